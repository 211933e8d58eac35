/*
 * validate.h - checks of an inference or MatMul request before anything is queued.
 *
 * DESIGN
 * Pure functions over plain structs (no protobuf, no sockets, no model handles), so every failure
 * can be unit-tested and fuzzed from values. The server fills tpu_vrequest_t from a decoded
 * ModelInferRequest (pointers into it, no copies) and tpu_vmodel_t from the model's metadata.
 * Every failure returns INVALID_ARGUMENT with a message that names the input and says what was
 * expected, e.g. "input 'x': shape [3,5] needs 60 bytes of FP32 data, got 56". Floating-point
 * data must be finite: "input 'x': element [0,5] is NaN; expected finite FP32 values". Looking up the
 * model and version (NOT_FOUND) is the caller's job, since it needs the registry.
 */
#ifndef TPU_VALIDATE_H
#define TPU_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "result.h" /* tpu_validate_result: the check of a computed result, in compute/ */

#define TPU_VALIDATE_MAX_RANK 8     /* dimensions of any request tensor */
#define TPU_VALIDATE_MAX_TENSORS 64 /* inputs or requested outputs in one request */

/* A model input or output: shape may hold -1 (the batch dimension), nothing else negative. */
typedef struct {
  const char *name;
  const char *datatype; /* "FP32", ... */
  const int64_t *shape;
  size_t rank;
  int nonfinite_ok; /* inputs: NaN and infinities are accepted (tree models: NaN = missing) */
  int on_request;   /* outputs: returned only when the request names it (not by default) */
} tpu_tensor_spec_t;

typedef struct {
  const char *name; /* "model 'digits' version 1", for messages */
  const tpu_tensor_spec_t *inputs;
  size_t ninputs;
  const tpu_tensor_spec_t *outputs;
  size_t noutputs;
} tpu_vmodel_t;

/* One request input, as received. Data comes from raw_input_contents[i] (has_raw) or from typed
 * contents: fp32 values, or some other typed field (n_other_typed values in `other_field`). */
typedef struct {
  const char *name;
  const char *datatype;
  const int64_t *shape;
  size_t rank;
  int has_raw;
  const void *raw;
  size_t raw_len;
  const float *fp32;
  size_t n_fp32;
  size_t n_other_typed;     /* values in typed fields other than fp32_contents */
  const char *other_field;  /* name of such a field, for the message */
} tpu_vinput_t;

typedef struct {
  const tpu_vinput_t *inputs;
  size_t ninputs;
  size_t n_raw;             /* entries in raw_input_contents (0, or ninputs) */
  const char *const *outputs; /* requested output names; none = every output */
  size_t noutputs;
} tpu_vrequest_t;

/* What a valid request resolves to. */
typedef struct {
  size_t rows;                                  /* value of the batch (-1) dimension; 1 if none */
  size_t input_of[TPU_VALIDATE_MAX_TENSORS];    /* model input i ← request input input_of[i] */
  const void *data[TPU_VALIDATE_MAX_TENSORS];   /* model input i's bytes (raw or fp32 values) */
  size_t bytes[TPU_VALIDATE_MAX_TENSORS];       /* model input i's byte count */
  unsigned char want_output[TPU_VALIDATE_MAX_TENSORS]; /* model output j is to be returned */
} tpu_vresult_t;

struct Inference__ModelInferRequest;

/* Describes a decoded ModelInferRequest for tpu_validate_infer: fills vin[] and vout[] (one
 * entry per input and output; the caller has checked both counts against
 * TPU_VALIDATE_MAX_TENSORS) and *req. Every pointer points into q, which must outlive them.
 * The one mapping from the protobuf request, shared by the server and the fuzz target. */
void tpu_validate_describe_request(const struct Inference__ModelInferRequest *q,
                                   tpu_vinput_t *vin, const char **vout, tpu_vrequest_t *req);

/* Validates an inference request against a model. Returns TPU_CODE_OK (0) and fills *res, or
 * TPU_CODE_INVALID_ARGUMENT with msg (msglen bytes) saying what was wrong. */
int tpu_validate_infer(const tpu_vmodel_t *model, const tpu_vrequest_t *req, tpu_vresult_t *res,
                       char *msg, size_t msglen);

/* First, a request with no raw contents whose inputs use typed contents other than
 * fp32_contents (int64_contents for INT64, int_contents for INT8..INT32, ...: OIP's field for
 * each datatype) has them turned into raw contents (a field that does not match the datatype
 * is refused naming both). Then it converts raw input tensors whose datatype differs from the
 * model input of the same name, in
 * the directions that keep every value: any number type to FP32 or FP64 (an FP64 beyond FP32's
 * range is refused, not made infinite), integers to a model's signed integer type when each
 * value fits (else refused naming the element). Others are left for tpu_validate_infer to
 * refuse ("datatype X, expected Y"). The converted bytes replace the message's raw contents and
 * datatype (malloc'd, as protobuf-c's unpack allocates them). Returns TPU_CODE_OK,
 * INVALID_ARGUMENT or RESOURCE_EXHAUSTED (out of memory) with msg. */
int tpu_validate_convert_inputs(struct Inference__ModelInferRequest *q, const tpu_vmodel_t *m,
                                char *msg, size_t msglen);

/* Element size in bytes of a protocol datatype name ("FP32" 4, "BF16" 2, "INT8" 1, ...); 0 for
 * names the protocol does not define or whose elements have no fixed size (BYTES). */
size_t tpu_validate_dtype_size(const char *datatype);

/* Element count of a request shape: every dim ≥ 0, rank ≤ TPU_VALIDATE_MAX_RANK, product and
 * product × elem_size within uint64/SIZE_MAX. Returns 0 and sets *count, *bytes; or -1 with msg
 * naming `what` (e.g. "input 'x'"). */
int tpu_validate_shape(const char *what, const int64_t *shape, size_t rank, size_t elem_size,
                       size_t *count, size_t *bytes, char *msg, size_t msglen);

/* Formats a shape as "[3,5]" into buf. */
void tpu_validate_format_shape(const int64_t *shape, size_t rank, char *buf, size_t len);

/* MatMul: a [M,K] × b [K,N], one dtype of FP32, BF16, INT8; each tensor's data holds exactly
 * its bytes, none of them NaN or infinite; M·K, K·N and M·N at most max_elems. On success fills m, k, n and the engine dtype
 * (tpu_dtype_t as int). Returns TPU_CODE_OK or INVALID_ARGUMENT (RESOURCE_EXHAUSTED when only
 * the size limit is exceeded) with msg. */
typedef struct {
  const int64_t *shape;
  size_t rank;
  const char *datatype;
  size_t data_len;
  int present;      /* the message had this tensor */
  const void *data; /* its data_len bytes (NULL only when 0); FP32/BF16 values must be finite */
} tpu_vtensor_t;

int tpu_validate_matmul(const tpu_vtensor_t *a, const tpu_vtensor_t *b, uint64_t max_elems,
                        size_t *m, size_t *k, size_t *n, int *dtype, char *msg, size_t msglen);

#endif /* TPU_VALIDATE_H */

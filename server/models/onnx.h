/*
 * onnx.h - the ONNX model decoder: an .onnx file's bytes in, a checked plain-C description out.
 *
 * DESIGN
 * This module owns decoding and validating an ONNX ModelProto (schema: proto/onnx.proto, tpud's
 * own subset of the public field numbers) and nothing after it: it does not convert the graph to
 * the engine's IR, check operators or infer shapes. What it promises about a description it
 * returns:
 *   - ir_version is present and an opset_import names the default domain ("" or "ai.onnx") at a
 *     version in TPU_ONNX_OPSET_MIN..TPU_ONNX_OPSET_MAX; every node's domain has an opset_import;
 *   - every tensor (initializers, and tensors held by attributes) has a known data_type,
 *     non-negative dims whose element count and byte count do not overflow, and exactly the
 *     data its dims call for: raw_data of exactly that many bytes, or that many elements of the
 *     typed field its data_type uses, or external data of that length. Its bytes are copied out
 *     little-endian, packed as raw_data would hold them;
 *   - external data (data_location EXTERNAL) is read only from a relative path inside the model
 *     file's directory: no absolute path, no ".." component, and after realpath() still inside
 *     the directory (a symlink may point within it, never out of it);
 *   - graph inputs and outputs are tensors with a known elem_type and a shape; a symbolic (or
 *     unknown) dimension is accepted only as dimension 0, the batch dimension, given as -1;
 *   - subgraphs (If/Loop/Scan bodies), sparse tensors, non-tensor types and segmented tensors
 *     are refused by name.
 * Every refusal returns a message that starts with the model's name and names the node, tensor
 * or input and what was wrong. The description holds no protobuf type; it is freed with one
 * call. A standalone TensorProto (ONNX test data's .pb files) is decoded by the same tensor
 * code, with the same checks. No threads, no state; safe from any thread.
 */
#ifndef TPU_ONNX_H
#define TPU_ONNX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu_engine.h" /* tpu_status_t */

#ifdef __cplusplus
extern "C" {
#endif

/* The default domain's opsets this loader accepts. */
#define TPU_ONNX_OPSET_MIN 7
#define TPU_ONNX_OPSET_MAX 21

/* TensorProto.DataType values (the ONNX numbers, as on the wire). */
typedef enum {
  TPU_ONNX_UNDEFINED = 0, /* not a type: refused */
  TPU_ONNX_FLOAT = 1,
  TPU_ONNX_UINT8 = 2,
  TPU_ONNX_INT8 = 3,
  TPU_ONNX_UINT16 = 4,
  TPU_ONNX_INT16 = 5,
  TPU_ONNX_INT32 = 6,
  TPU_ONNX_INT64 = 7,
  TPU_ONNX_STRING = 8, /* allowed for inputs and outputs; string tensors' data is refused */
  TPU_ONNX_BOOL = 9,   /* one byte per element, 0 or 1 */
  TPU_ONNX_FLOAT16 = 10,
  TPU_ONNX_DOUBLE = 11,
  TPU_ONNX_UINT32 = 12,
  TPU_ONNX_UINT64 = 13,
  TPU_ONNX_COMPLEX64 = 14,
  TPU_ONNX_COMPLEX128 = 15,
  TPU_ONNX_BFLOAT16 = 16,
  TPU_ONNX_FLOAT8E4M3FN = 17,
  TPU_ONNX_FLOAT8E4M3FNUZ = 18,
  TPU_ONNX_FLOAT8E5M2 = 19,
  TPU_ONNX_FLOAT8E5M2FNUZ = 20,
  TPU_ONNX_UINT4 = 21, /* two elements per byte, low nibble first; raw_data only */
  TPU_ONNX_INT4 = 22   /* likewise */
} tpu_onnx_dtype_t;

/* The ONNX name of a data type ("FLOAT", "INT64"), or NULL for an unknown value. */
const char *tpu_onnx_dtype_name(int dtype);
/* Bits per element of a known data type (4 for the 4-bit ones), 0 for unknown or STRING. */
unsigned tpu_onnx_dtype_bits(int dtype);

/* A constant tensor: an initializer, or an attribute's tensor. */
typedef struct {
  char *name;        /* "" when the file gives none (attribute tensors often do) */
  int dtype;         /* a tpu_onnx_dtype_t, never UNDEFINED or STRING */
  size_t ndim;       /* 0: a scalar */
  int64_t *dims;     /* ndim values, each >= 0 */
  uint64_t nelements; /* product of dims (1 for a scalar) */
  size_t nbytes;     /* nelements * bits / 8, rounded up for 4-bit types */
  void *data;        /* nbytes, little-endian, 64-byte aligned; NULL when nbytes is 0 */
  int external;      /* 1: the bytes came from an external data file */
} tpu_onnx_tensor_t;

/* A byte string (attribute strings: not necessarily text, not NUL-terminated). */
typedef struct {
  uint8_t *data;
  size_t len;
} tpu_onnx_bytes_t;

/* AttributeProto.AttributeType values this loader keeps (the ONNX numbers). */
typedef enum {
  TPU_ONNX_ATTR_FLOAT = 1,
  TPU_ONNX_ATTR_INT = 2,
  TPU_ONNX_ATTR_STRING = 3,
  TPU_ONNX_ATTR_TENSOR = 4,
  TPU_ONNX_ATTR_FLOATS = 6,
  TPU_ONNX_ATTR_INTS = 7,
  TPU_ONNX_ATTR_STRINGS = 8,
  TPU_ONNX_ATTR_TENSORS = 9
} tpu_onnx_attr_type_t;

typedef struct {
  char *name;
  tpu_onnx_attr_type_t type;
  float f;                   /* FLOAT */
  int64_t i;                 /* INT */
  tpu_onnx_bytes_t s;        /* STRING */
  tpu_onnx_tensor_t *t;      /* TENSOR */
  size_t n;                  /* element count of the list types below */
  float *floats;             /* FLOATS */
  int64_t *ints;             /* INTS */
  tpu_onnx_bytes_t *strings; /* STRINGS */
  tpu_onnx_tensor_t *tensors; /* TENSORS */
} tpu_onnx_attr_t;

typedef struct {
  char *name;   /* "" when the file gives none */
  char *op_type;
  char *domain; /* "" for the default domain ("ai.onnx" is reported as "") */
  int64_t opset; /* the opset_import version of the node's domain */
  size_t ninputs, noutputs;
  char **inputs;  /* "" marks an omitted optional input */
  char **outputs;
  size_t nattrs;
  tpu_onnx_attr_t *attrs;
} tpu_onnx_node_t;

/* A graph input or output. */
typedef struct {
  char *name;
  int dtype;          /* a tpu_onnx_dtype_t, never UNDEFINED */
  size_t ndim;
  int64_t *dims;      /* ndim values; dims[0] may be -1: the batch dimension */
  char *batch_param;  /* dims[0]'s dim_param when it is symbolic ("" when unnamed), else NULL */
  int initializer;    /* inputs only: 1 when an initializer of the same name gives a default */
} tpu_onnx_value_t;

typedef struct {
  char *domain;
  int64_t version;
} tpu_onnx_opset_t;

typedef struct {
  int64_t ir_version;
  int64_t opset;      /* the default domain's */
  size_t nopsets;
  tpu_onnx_opset_t *opsets;
  char *producer_name, *producer_version, *graph_name; /* "" when absent */
  size_t ninitializers;
  tpu_onnx_tensor_t *initializers;
  size_t nnodes;
  tpu_onnx_node_t *nodes; /* in file order (ONNX requires topological order; not checked here) */
  size_t ninputs, noutputs;
  tpu_onnx_value_t *inputs, *outputs;
} tpu_onnx_model_t;

/* Reads the .onnx file at `path` (at most max_bytes, 0: no bound; cancel as for tpu_file_read)
 * and decodes it; external data files are looked up in path's directory, and only the bytes
 * of each tensor are read from them, at most max_bytes of them in all. On success *out is a
 * new description (tpu_onnx_free). On failure *out is NULL and err (errlen bytes) says why,
 * starting with the path:
 *   TPU_EINVAL     the file (or an external data file) cannot be read, or is not a valid ONNX
 *                  model: the message says which and why
 *   TPU_ENOTSUP    valid ONNX that this loader does not take (an opset outside its range, a
 *                  subgraph, a sparse tensor, a segmented tensor, a non-tensor type)
 *   TPU_EOVERFLOW  a tensor's element or byte count overflows
 *   TPU_ENOMEM     out of memory         TPU_ECANCELED  *cancel was set while reading */
tpu_status_t tpu_onnx_load(const char *path, size_t max_bytes, const atomic_int *cancel,
                           tpu_onnx_model_t **out, char *err, size_t errlen);

/* Decodes `len` bytes at `buf` (a whole .onnx file). `name` prefixes messages. `dir`: the
 * directory external data paths are relative to, or NULL to refuse external data (no bound on
 * its bytes here). Same checks, results and errors as tpu_onnx_load. */
tpu_status_t tpu_onnx_parse(const void *buf, size_t len, const char *name, const char *dir,
                            tpu_onnx_model_t **out, char *err, size_t errlen);

/* An external data file a model may read and the SHA-256 its bytes must have. */
typedef struct {
  const char *path;   /* as the tensors' external_data "location" names it (or another
                       * spelling of the same file inside the directory) */
  const char *sha256; /* 64 lower-case hex digits */
} tpu_onnx_external_t;

typedef struct {
  const char *dir; /* external data's directory; NULL: external data refused */
  /* digests_required: every external data file must be one of `external` and have its
   * digest; each is then read whole once, hashed, and its tensors copied from those bytes (a
   * file changed after the check cannot reach the model). Otherwise external is unused and
   * each tensor's bytes are read where they lie. */
  const tpu_onnx_external_t *external;
  size_t nexternal;
  int digests_required;
  uint64_t max_bytes; /* bound on external data (tensors, and whole files); 0: none */
} tpu_onnx_parse_opts_t;

/* tpu_onnx_parse with options: the model's directory, and the digests its external data files
 * must have. A file not listed, or whose bytes do not match, is TPU_EINVAL naming the tensor
 * and the file. */
tpu_status_t tpu_onnx_parse_with(const void *buf, size_t len, const char *name,
                                 const tpu_onnx_parse_opts_t *opts, tpu_onnx_model_t **out,
                                 char *err, size_t errlen);

/* Frees a description and everything it holds. Accepts NULL. */
void tpu_onnx_free(tpu_onnx_model_t *m);

/* Decodes `len` bytes at `buf` as one standalone TensorProto (a .pb file of ONNX's test data:
 * test_data_set_N/input_K.pb). `name` (the file's path) prefixes messages. The same checks as
 * for an initializer: a known data_type other than STRING, non-negative dims, exactly the data
 * the dims call for, copied out little-endian. External data is refused (a lone tensor has no
 * directory to resolve it in). On success *out is a new tensor (tpu_onnx_tensor_free); its
 * name is "" when the file gives none. On failure *out is NULL and err says why:
 *   TPU_EINVAL     not a valid TensorProto (truncated, wrong wire types), a check failed, or
 *                  external data
 *   TPU_ENOTSUP    a STRING or segmented tensor, 4-bit data not in raw_data
 *   TPU_EOVERFLOW  the element or byte count overflows      TPU_ENOMEM  out of memory */
tpu_status_t tpu_onnx_tensor_parse(const void *buf, size_t len, const char *name,
                                   tpu_onnx_tensor_t **out, char *err, size_t errlen);

/* Frees a tensor from tpu_onnx_tensor_parse. Accepts NULL. */
void tpu_onnx_tensor_free(tpu_onnx_tensor_t *t);

#ifdef __cplusplus
}
#endif

#endif /* TPU_ONNX_H */

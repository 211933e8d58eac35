/*
 * fuzz_graph.c - libFuzzer target: the graph IR, shape inference, the compiler and the kernels,
 * from a small graph built through the public builder API (tpu_graph.h).
 *
 * DESIGN
 * The input is a byte-code read front to back; when it runs out every read yields 0, so any
 * prefix is a (smaller) program. It says:
 *   header   flags (bits 0-1 batch sizes, 2-3 precision, 4-5 how graph inputs are filled),
 *            then 1-3 batch sizes
 *   inputs   1-3 graph inputs: dtype, rank, dims, whether dimension 0 is the batch
 *   items    up to 16 nodes (an op of the supported set, quantization ops included, with inputs picked from the tensors so
 *            far, absent ones and unknown names included, 1-3 outputs, an opset and attributes
 *            of the op's own names with values from tables of edge values, sometimes of the
 *            wrong type) or initializers (small shapes, any dtype, data raw or from edge values:
 *            ids out of range, NaN, infinities, huge values; empty dims)
 *   outputs  1-2 tensors, mostly the newest
 *   rest     the bytes the graph inputs are filled from
 * The graph is validated, compiled for each batch size with a 64 MiB memory_limit, and each
 * program is run twice on the same inputs. The verdicts: every failing call returns a status
 * other than TPU_OK and leaves a non-empty message (tpu_graph_error, tpu_graph_program_error);
 * a program holds no more than the limit; its inputs and outputs have consistent shapes and
 * sizes (the buffers are allocated exactly that size, so ASan sees an overrun); two runs on the
 * same inputs give the same bytes (a kernel reading memory it never wrote differs between runs,
 * since the arena is shared by liveness). Crashes, sanitizer reports and hangs are findings.
 * BOOL data is normalised to 0/1, which is what the API says a BOOL byte holds.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_graph.h"

#define MAX_TENSORS 64
#define MAX_ITEMS 16
#define MAX_ELEMS 4096 /* per graph input or initializer */
#define MEMORY_LIMIT (64u << 20)

typedef struct {
  const uint8_t *p;
  size_t n;
} rd_t;

static uint8_t u8(rd_t *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

/* ---- edge values ---- */

static const int64_t ints_tab[] = {0, 1, -1, 2, -2, 3, -3, 4, 5, 7, 8, 16, 100, -100, 1000,
                                   INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN, 9, 10, 11,
                                   INT64_MAX - 1, -4, -5, -8, 6, 12, 13, 1 << 20, 64, -9};
static int64_t edge_int(rd_t *r) {
  uint8_t b = u8(r);
  if (b < 0xC0) return ints_tab[b % (sizeof ints_tab / sizeof ints_tab[0])];
  return (int8_t)u8(r);
}
static float edge_float(rd_t *r) {
  static const float tab[] = {0.0f, 1.0f, -1.0f, 0.5f, 1e-5f, NAN, INFINITY, -INFINITY, 3.4e38f,
                              -3.4e38f, -0.0f, 2.0f, 1e-45f, 65504.0f, 1e30f, -2.5f, 0.1f, 6.0f};
  uint8_t b = u8(r);
  if (b < 0xC0) return tab[b % (sizeof tab / sizeof tab[0])];
  return (float)(int8_t)u8(r) / 4.0f;
}

static uint16_t half_from_float(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  if (isnan(f)) return 0x7E00;
  float a = fabsf(f);
  if (a >= 65520.0f) return sign | 0x7C00;
  if (a < 6.1e-5f) return sign | (uint16_t)(a / 5.9604645e-8f); /* subnormal */
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  uint16_t mant = (uint16_t)((m * 2.0f - 1.0f) * 1024.0f);
  return sign | (uint16_t)((e - 1 + 15) << 10) | mant;
}

/* Stores v (an integer or float edge value) as element k of a dtype buffer. */
static void store(void *buf, tpu_graph_dtype_t dt, size_t k, double v) {
  unsigned char *b = buf;
  switch (dt) {
  case TPU_GRAPH_FP32: {
    float f = (float)v;
    memcpy(b + 4 * k, &f, 4);
    break;
  }
  case TPU_GRAPH_FP64: memcpy(b + 8 * k, &v, 8); break;
  case TPU_GRAPH_FP16: {
    uint16_t h = half_from_float((float)v);
    memcpy(b + 2 * k, &h, 2);
    break;
  }
  case TPU_GRAPH_BF16: {
    uint16_t h = tpu_bf16_from_fp32((float)v);
    memcpy(b + 2 * k, &h, 2);
    break;
  }
  default: { /* integers: v is finite here */
    int64_t i = v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    if (dt == TPU_GRAPH_INT64) memcpy(b + 8 * k, &i, 8);
    if (dt == TPU_GRAPH_INT32) {
      int32_t w = (int32_t)(uint32_t)(uint64_t)i;
      memcpy(b + 4 * k, &w, 4);
    }
    if (dt == TPU_GRAPH_INT8 || dt == TPU_GRAPH_UINT8) b[k] = (unsigned char)(uint64_t)i;
    if (dt == TPU_GRAPH_BOOL) b[k] = i != 0;
    break;
  }
  }
}

static int is_float(tpu_graph_dtype_t dt) {
  return dt == TPU_GRAPH_FP32 || dt == TPU_GRAPH_FP16 || dt == TPU_GRAPH_BF16 ||
         dt == TPU_GRAPH_FP64;
}

/* Fills n elements: mode 0 raw bytes (cycled), 1 small integers, 2 edge values. */
static void fill(rd_t *r, void *buf, tpu_graph_dtype_t dt, size_t n, int mode) {
  size_t es = tpu_graph_dtype_size(dt);
  if (mode == 0) {
    unsigned char *b = buf;
    for (size_t k = 0; k < n * es; k++) b[k] = u8(r);
    if (dt == TPU_GRAPH_BOOL)
      for (size_t k = 0; k < n; k++) b[k] &= 1;
    return;
  }
  for (size_t k = 0; k < n; k++) {
    double v;
    if (mode == 1) v = (int8_t)u8(r) % 8;
    else if (is_float(dt)) v = edge_float(r);
    else v = (double)edge_int(r);
    store(buf, dt, k, v);
  }
}

static tpu_graph_dtype_t pick_dtype(rd_t *r) {
  uint8_t b = u8(r);
  /* FP32 and INT64 twice as likely: they are what most ops take and what ids are. */
  static const tpu_graph_dtype_t tab[] = {
      TPU_GRAPH_FP32, TPU_GRAPH_INT64, TPU_GRAPH_FP32, TPU_GRAPH_INT64, TPU_GRAPH_FP16,
      TPU_GRAPH_BF16, TPU_GRAPH_FP64,  TPU_GRAPH_INT32, TPU_GRAPH_INT8, TPU_GRAPH_UINT8,
      TPU_GRAPH_BOOL, TPU_GRAPH_FP32,  TPU_GRAPH_FP32, TPU_GRAPH_INT64, TPU_GRAPH_FP32,
      TPU_GRAPH_UNDEFINED};
  return tab[b % 16];
}

/* rank 0-4 (8 rarely) and dims mostly small, 0 included; the element count kept <= MAX_ELEMS. */
static int pick_shape(rd_t *r, int64_t *dims) {
  static const int64_t tab[] = {1, 2, 3, 4, 0, 1, 2, 5, 3, 7, 8, 16, 1, 2, 64, 1};
  uint8_t b = u8(r);
  int rank = b % 5;
  if (b >= 0xF8) rank = 8;
  uint64_t n = 1;
  for (int d = 0; d < rank; d++) {
    dims[d] = tab[u8(r) % 16];
    if (n * (uint64_t)(dims[d] ? dims[d] : 1) > MAX_ELEMS) dims[d] = 1;
    n *= (uint64_t)(dims[d] ? dims[d] : 1);
  }
  return rank;
}

/* ---- ops ---- */

typedef struct {
  const char *name;
  tpu_graph_attr_type_t type;
} attr_spec_t;

typedef struct {
  const char *op;
  int nin, nout; /* the usual arity */
  attr_spec_t attrs[4];
} op_spec_t;

#define A_I TPU_GRAPH_ATTR_INT
#define A_F TPU_GRAPH_ATTR_FLOAT
#define A_S TPU_GRAPH_ATTR_STRING
#define A_IS TPU_GRAPH_ATTR_INTS
#define A_FS TPU_GRAPH_ATTR_FLOATS
#define A_T TPU_GRAPH_ATTR_TENSOR

static const op_spec_t ops[] = {
    {"Gemm", 3, 1, {{"transA", A_I}, {"transB", A_I}, {"alpha", A_F}, {"beta", A_F}}},
    {"MatMul", 2, 1, {{0}}},
    {"Add", 2, 1, {{0}}},
    {"Sub", 2, 1, {{0}}},
    {"Mul", 2, 1, {{0}}},
    {"Div", 2, 1, {{0}}},
    {"Pow", 2, 1, {{0}}},
    {"Max", 3, 1, {{0}}},
    {"Min", 2, 1, {{0}}},
    {"Where", 3, 1, {{0}}},
    {"Relu", 1, 1, {{0}}},
    {"LeakyRelu", 1, 1, {{"alpha", A_F}}},
    {"Sigmoid", 1, 1, {{0}}},
    {"Tanh", 1, 1, {{0}}},
    {"Erf", 1, 1, {{0}}},
    {"Gelu", 1, 1, {{"approximate", A_S}}},
    {"Clip", 3, 1, {{"min", A_F}, {"max", A_F}}},
    {"Sqrt", 1, 1, {{0}}},
    {"Reciprocal", 1, 1, {{0}}},
    {"Neg", 1, 1, {{0}}},
    {"Abs", 1, 1, {{0}}},
    {"Exp", 1, 1, {{0}}},
    {"Log", 1, 1, {{0}}},
    {"Identity", 1, 1, {{0}}},
    {"Cast", 1, 1, {{"to", A_I}}},
    {"Softmax", 1, 1, {{"axis", A_I}}},
    {"LogSoftmax", 1, 1, {{"axis", A_I}}},
    {"LayerNormalization", 3, 1, {{"axis", A_I}, {"epsilon", A_F}, {"stash_type", A_I}}},
    {"BatchNormalization", 5, 1,
     {{"epsilon", A_F}, {"momentum", A_F}, {"training_mode", A_I}, {"spatial", A_I}}},
    {"ReduceSum", 2, 1, {{"axes", A_IS}, {"keepdims", A_I}, {"noop_with_empty_axes", A_I}}},
    {"ReduceMean", 1, 1, {{"axes", A_IS}, {"keepdims", A_I}, {"noop_with_empty_axes", A_I}}},
    {"ReduceMax", 1, 1, {{"axes", A_IS}, {"keepdims", A_I}, {"noop_with_empty_axes", A_I}}},
    {"ArgMax", 1, 1, {{"axis", A_I}, {"keepdims", A_I}, {"select_last_index", A_I}}},
    {"Gather", 2, 1, {{"axis", A_I}}},
    {"Concat", 2, 1, {{"axis", A_I}}},
    {"Flatten", 1, 1, {{"axis", A_I}}},
    {"Reshape", 2, 1, {{"allowzero", A_I}, {"shape", A_IS}}},
    {"Squeeze", 2, 1, {{"axes", A_IS}}},
    {"Unsqueeze", 2, 1, {{"axes", A_IS}}},
    {"Transpose", 1, 1, {{"perm", A_IS}}},
    {"Identity", 1, 1, {{0}}},
    {"Constant", 0, 1,
     {{"value", A_T}, {"value_float", A_F}, {"value_ints", A_IS}, {"value_floats", A_FS}}},
    {"Shape", 1, 1, {{"start", A_I}, {"end", A_I}}},
    {"Dropout", 1, 2, {{"ratio", A_F}}},
    {"QuantizeLinear", 3, 1,
     {{"axis", A_I}, {"saturate", A_I}, {"block_size", A_I}, {"output_dtype", A_I}}},
    {"DequantizeLinear", 3, 1, {{"axis", A_I}, {"block_size", A_I}}},
    {"MatMulInteger", 4, 1, {{0}}},
    {"QLinearMatMul", 8, 1, {{0}}},
    {"DynamicQuantizeLinear", 1, 3, {{0}}},
};
#define NOPS (sizeof ops / sizeof ops[0])

static const int opsets[] = {13, 13, 17, 18, 1, 5, 6, 7, 9, 10, 11, 12, 14, 20, 21, 13};

typedef struct {
  char names[MAX_TENSORS][8];
  size_t n;
  int next; /* number for the next new name */
} pool_t;

static const char *pick_input(rd_t *r, pool_t *pl) {
  uint8_t b = u8(r);
  if (b == 0xFF) return "";        /* an absent optional input */
  if (b == 0xFE) return "nowhere"; /* a name nothing defines */
  if (!pl->n) return "nowhere";
  return pl->names[pl->n - 1 - b % pl->n]; /* the newest first */
}

static const char *new_name(pool_t *pl) {
  static char spare[8];
  char *s = pl->n < MAX_TENSORS ? pl->names[pl->n] : spare;
  snprintf(s, 8, "t%d", pl->next++ % 1000);
  if (pl->n < MAX_TENSORS) pl->n++;
  return s;
}

/* FUZZ_GRAPH_VERBOSE=1 in the environment prints each refusal and program (to read seeds). */
static int verbose = -1;

static void check_fail(tpu_graph_t *g, tpu_status_t st) {
  if (st == TPU_OK) return;
  const char *e = tpu_graph_error(g);
  if (verbose) fprintf(stderr, "refused (%s): %s\n", tpu_strerror(st), e ? e : "(null)");
  if (!e || !e[0]) {
    fprintf(stderr, "status %d (%s) with an empty tpu_graph_error\n", (int)st, tpu_strerror(st));
    abort();
  }
}

/* Tensor data for an initializer or a TENSOR attribute: 0 on success. */
typedef struct {
  tpu_graph_dtype_t dt;
  int rank;
  int64_t dims[TPU_GRAPH_MAX_RANK];
  void *data;
  size_t bytes;
} blob_t;

static void make_blob(rd_t *r, blob_t *b) {
  uint8_t f = u8(r);
  b->dt = pick_dtype(r);
  b->rank = pick_shape(r, b->dims);
  size_t n = 1;
  for (int d = 0; d < b->rank; d++) n *= (size_t)b->dims[d];
  size_t es = tpu_graph_dtype_size(b->dt);
  b->bytes = n * es;
  b->data = malloc(b->bytes ? b->bytes : 1);
  if (es) fill(r, b->data, b->dt, n, f % 3);
  if ((f & 0xF8) == 0xF8 && b->bytes) b->bytes--; /* disagrees with the shape */
}

static void add_attr(rd_t *r, tpu_graph_t *g, size_t node, const op_spec_t *sp) {
  size_t na = 0;
  while (na < 4 && sp->attrs[na].name) na++;
  uint8_t b = u8(r);
  tpu_graph_attr_t a = {0};
  if (na && b % 8) {
    a.name = sp->attrs[b % na].name;
    a.type = sp->attrs[b % na].type;
  } else {
    static const char *const other[] = {"axis", "bogus", "value", "to", ""};
    a.name = other[b / 8 % 5];
    a.type = (tpu_graph_attr_type_t)(b / 64 % 6);
  }
  if ((b & 0xC0) == 0xC0) a.type = (tpu_graph_attr_type_t)(u8(r) % 7); /* maybe the wrong type */
  int64_t ints[TPU_GRAPH_MAX_RANK + 2];
  float floats[4];
  blob_t blob = {0};
  static const char *const strs[] = {"none", "tanh", "", "Tanh"};
  switch (a.type) {
  case TPU_GRAPH_ATTR_INT: a.i = edge_int(r); break;
  case TPU_GRAPH_ATTR_FLOAT: a.f = edge_float(r); break;
  case TPU_GRAPH_ATTR_STRING: a.s = strs[u8(r) % 4]; break;
  case TPU_GRAPH_ATTR_INTS:
    a.n = u8(r) % (TPU_GRAPH_MAX_RANK + 3);
    for (size_t k = 0; k < a.n; k++) ints[k] = edge_int(r);
    a.ints = ints;
    break;
  case TPU_GRAPH_ATTR_FLOATS:
    a.n = u8(r) % 5;
    for (size_t k = 0; k < a.n; k++) floats[k] = edge_float(r);
    a.floats = floats;
    break;
  case TPU_GRAPH_ATTR_TENSOR:
    make_blob(r, &blob);
    a.t_dtype = blob.dt;
    a.t_rank = blob.rank;
    a.t_dims = blob.dims;
    a.t_data = blob.data;
    a.t_bytes = blob.bytes;
    break;
  default: break; /* an unknown type: refused */
  }
  check_fail(g, tpu_graph_add_attr(g, node, &a));
  free(blob.data);
}

static void add_node(rd_t *r, tpu_graph_t *g, pool_t *pl, const op_spec_t *sp) {
  uint8_t f = u8(r);
  int nin = sp->nin, nout = sp->nout;
  if (f & 0x80) nin = f % 6;
  if ((f & 0x60) == 0x60) nout = 1 + f % 3;
  int opset = opsets[u8(r) % 16];
  const char *in[8], *out[3];
  for (int i = 0; i < nin; i++) in[i] = pick_input(r, pl);
  char nm[8];
  snprintf(nm, sizeof nm, "n%d", pl->next);
  size_t before = pl->n;
  for (int o = 0; o < nout; o++) out[o] = (o == 1 && (f & 0x10)) ? "" : new_name(pl);
  size_t idx;
  tpu_status_t st = tpu_graph_add_node(g, (f & 8) ? NULL : nm, sp->op, (f & 4) && (f & 0x80)
                                       ? "ai.onnx" : NULL, opset, (size_t)nin, in,
                                       (size_t)nout, out, &idx);
  check_fail(g, st);
  if (verbose) {
    fprintf(stderr, "node %s opset %d (", sp->op, opset);
    for (int i = 0; i < nin; i++) fprintf(stderr, "%s'%s'", i ? ", " : "", in[i]);
    fprintf(stderr, ") ->");
    for (int o = 0; o < nout; o++) fprintf(stderr, " '%s'", out[o]);
    fprintf(stderr, "\n");
  }
  if (st != TPU_OK) {
    pl->n = before; /* the graph is as it was: those names are not defined */
    return;
  }
  int nattr = u8(r) % 4;
  for (int k = 0; k < nattr; k++) add_attr(r, g, idx, sp);
}

static void add_init(rd_t *r, tpu_graph_t *g, pool_t *pl) {
  blob_t b;
  make_blob(r, &b);
  size_t before = pl->n;
  const char *name = new_name(pl);
  tpu_status_t st = tpu_graph_add_initializer(g, name, b.dt, b.rank, b.dims, b.data, b.bytes);
  check_fail(g, st);
  if (verbose) {
    fprintf(stderr, "initializer '%s' %s [", name, tpu_graph_dtype_name(b.dt));
    for (int d = 0; d < b.rank; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)b.dims[d]);
    fprintf(stderr, "] %zu bytes\n", b.bytes);
  }
  if (st != TPU_OK) pl->n = before;
  free(b.data);
}

/* ---- compile and run ---- */

static tpu_engine_t *engine;

static void check_io(const tpu_graph_io_t *io) {
  if (!io->name || io->rank < 0 || io->rank > TPU_GRAPH_MAX_RANK) abort();
  size_t n = 1;
  for (int d = 0; d < io->rank; d++) {
    if (io->dims[d] < 0) abort();
    n *= (size_t)io->dims[d];
  }
  if (n != io->elems || io->bytes != n * tpu_graph_dtype_size(io->dtype)) abort();
}

static void run_program(tpu_graph_program_t *p, rd_t *data, int mode) {
  size_t ni = tpu_graph_program_input_count(p), no = tpu_graph_program_output_count(p);
  void **in = calloc(ni + 1, sizeof *in), **out = calloc(no + 1, sizeof *out);
  void **again = calloc(no + 1, sizeof *again);
  size_t *obytes = calloc(no + 1, sizeof *obytes);
  rd_t rd = *data; /* every batch size reads the same bytes */
  for (size_t i = 0; i < ni; i++) {
    tpu_graph_io_t io;
    if (tpu_graph_program_input(p, i, &io) != TPU_OK) abort();
    check_io(&io);
    in[i] = malloc(io.bytes ? io.bytes : 1);
    if (tpu_graph_dtype_size(io.dtype)) fill(&rd, in[i], io.dtype, io.elems, mode);
  }
  for (size_t o = 0; o < no; o++) {
    tpu_graph_io_t io;
    if (tpu_graph_program_output(p, o, &io) != TPU_OK) abort();
    check_io(&io);
    obytes[o] = io.bytes;
    out[o] = malloc(io.bytes ? io.bytes : 1);
    again[o] = malloc(io.bytes ? io.bytes : 1);
  }
  tpu_status_t st = tpu_graph_program_run(p, (const void *const *)in, out);
  if (st != TPU_OK) {
    const char *e = tpu_graph_program_error(p);
    if (verbose) fprintf(stderr, "run refused (%s): %s\n", tpu_strerror(st), e ? e : "(null)");
    if (!e || !e[0]) abort();
  } else {
    tpu_status_t st2 = tpu_graph_program_run(p, (const void *const *)in, again);
    if (st2 != TPU_OK) abort(); /* the same inputs succeeded a moment ago */
    for (size_t o = 0; o < no; o++)
      if (memcmp(out[o], again[o], obytes[o]) != 0) {
        fprintf(stderr, "output %zu differs between two runs on the same inputs\n", o);
        abort();
      }
  }
  for (size_t i = 0; i < ni; i++) free(in[i]);
  for (size_t o = 0; o < no; o++) {
    free(out[o]);
    free(again[o]);
  }
  free(in);
  free(out);
  free(again);
  free(obytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (verbose < 0) verbose = getenv("FUZZ_GRAPH_VERBOSE") != NULL;
  if (!engine) {
    tpu_engine_config_t cfg = {.threads = 1};
    if (tpu_engine_create(&cfg, &engine) != TPU_OK) abort();
  }
  rd_t r = {data, size};
  uint8_t h = u8(&r);
  int nbatch = 1 + (h & 3) % 3;
  static const tpu_dtype_t prec[] = {TPU_DTYPE_FP32, TPU_DTYPE_BF16, TPU_DTYPE_INT8,
                                     TPU_DTYPE_FP32};
  tpu_graph_compile_opts_t opts = {.precision = prec[(h >> 2) & 3], .memory_limit = MEMORY_LIMIT};
  int fill_mode = ((h >> 4) & 3) % 3;
  int64_t batches[3];
  for (int i = 0; i < nbatch; i++) batches[i] = 1 + u8(&r) % 4;

  tpu_graph_t *g = NULL;
  if (tpu_graph_new(&g) != TPU_OK) abort();
  pool_t pl = {.n = 0};
  const char *inputs[3];
  size_t ninputs = 0;
  int nin = 1 + u8(&r) % 3;
  for (int i = 0; i < nin; i++) {
    tpu_graph_dtype_t dt = pick_dtype(&r);
    int64_t dims[TPU_GRAPH_MAX_RANK];
    uint8_t f = u8(&r);
    int rank = pick_shape(&r, dims);
    if (rank && (f & 1)) dims[0] = TPU_GRAPH_BATCH;
    size_t before = pl.n;
    const char *name = new_name(&pl);
    tpu_status_t st = tpu_graph_add_tensor(g, name, dt, rank, dims);
    check_fail(g, st);
    if (verbose) {
      fprintf(stderr, "input '%s' %s [", name, tpu_graph_dtype_name(dt));
      for (int d = 0; d < rank; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)dims[d]);
      fprintf(stderr, "]\n");
    }
    if (st != TPU_OK) pl.n = before;
    else inputs[ninputs++] = name;
  }
  int nitems = u8(&r) % (MAX_ITEMS + 1);
  for (int k = 0; k < nitems; k++) {
    uint8_t op = u8(&r);
    if (op % (NOPS + 4) >= NOPS) add_init(&r, g, &pl);
    else add_node(&r, g, &pl, &ops[op % (NOPS + 4)]);
  }
  check_fail(g, tpu_graph_set_inputs(g, ninputs, inputs));
  const char *outputs[2];
  size_t nout = 1 + u8(&r) % 2;
  for (size_t o = 0; o < nout; o++) {
    uint8_t b = u8(&r);
    outputs[o] = pl.n ? pl.names[pl.n - 1 - (b < 0xC0 ? 0 : b % pl.n)] : "nowhere";
    if (o == 1 && pl.n > 1 && b < 0xC0) outputs[o] = pl.names[pl.n - 2];
  }
  if (nout == 2 && strcmp(outputs[0], outputs[1]) == 0) nout = 1;
  check_fail(g, tpu_graph_set_outputs(g, nout, outputs));

  tpu_status_t st = tpu_graph_validate(g);
  check_fail(g, st);
  if (st == TPU_OK) {
    for (int i = 0; i < nbatch; i++) {
      tpu_graph_program_t *p = NULL;
      st = tpu_graph_compile(g, engine, batches[i], &opts, &p);
      check_fail(g, st);
      if (st != TPU_OK) {
        if (p) abort();
        continue;
      }
      if (!p || tpu_graph_program_memory(p) > MEMORY_LIMIT) abort();
      char desc[1024];
      tpu_graph_program_describe(p, desc, sizeof desc);
      if (verbose) fprintf(stderr, "batch %lld:\n%s", (long long)batches[i], desc);
      run_program(p, &r, fill_mode);
      tpu_graph_program_free(p);
    }
  }
  tpu_graph_free(g);
  return 0;
}

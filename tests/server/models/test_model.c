/*
 * test_model.c - model loading and running: random layer chains against a float64 reference in
 * every precision, checkpoint dtypes (F32, F16, BF16, I8 + scales), every load-time refusal, and
 * the bundled models (digits must reproduce scikit-learn's predictions on the whole data set).
 */
#define _GNU_SOURCE /* nftw */
#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "safetensors.h"
#include "tpu_test.h"

/* ---- files ---- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static char *make_tmpdir(void) {
  char tmpl[] = "/tmp/tpud-model-XXXXXX";
  char *d = mkdtemp(tmpl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  return strdup(d);
}

static void rm_tmpdir(char *d) {
  nftw(d, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  free(d);
}

static void write_bytes(const char *dir, const char *name, const void *buf, size_t len) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(buf, 1, len, f), len);
  fclose(f);
}

static void *read_bytes(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "\n  cannot open %s\n", path);
    CU_FAIL_FATAL("fixture missing");
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *buf = malloc((size_t)n + 1);
  CU_ASSERT_EQUAL_FATAL(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  ((char *)buf)[n] = '\0';
  *len = (size_t)n;
  return buf;
}

static void sha256_hex_of(const void *buf, size_t len, char hex[65]) {
  unsigned char md[32];
  unsigned int n = 0;
  CU_ASSERT_FATAL(EVP_Digest(buf, len, md, &n, EVP_sha256(), NULL) == 1 && n == 32);
  for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

/* One tensor to write. */
typedef struct {
  const char *name;
  const char *dtype; /* "F32", "F16", "BF16", "I8", ... */
  size_t ndim;
  uint64_t shape[2];
  const void *data;
  size_t nbytes;
} tens_t;

/* Writes dir/model.safetensors (no header padding: tensors land unaligned) and returns its
 * SHA-256 in sha. */
static void write_checkpoint(const char *dir, const tens_t *t, size_t n, char sha[65]) {
  size_t cap = 256 + n * 256, hl = 0, dl = 0;
  for (size_t i = 0; i < n; i++) dl += t[i].nbytes;
  char *h = malloc(cap);
  hl += (size_t)snprintf(h + hl, cap - hl, "{");
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    hl += (size_t)snprintf(h + hl, cap - hl, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "",
                           t[i].name, t[i].dtype);
    for (size_t d = 0; d < t[i].ndim; d++)
      hl += (size_t)snprintf(h + hl, cap - hl, "%s%llu", d ? "," : "",
                             (unsigned long long)t[i].shape[d]);
    hl += (size_t)snprintf(h + hl, cap - hl, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].nbytes);
    off += t[i].nbytes;
  }
  hl += (size_t)snprintf(h + hl, cap - hl, "}");
  size_t len = 8 + hl + dl;
  uint8_t *b = malloc(len);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, h, hl);
  off = 8 + hl;
  for (size_t i = 0; i < n; i++) {
    memcpy(b + off, t[i].data, t[i].nbytes);
    off += t[i].nbytes;
  }
  write_bytes(dir, "model.safetensors", b, len);
  sha256_hex_of(b, len, sha);
  free(b);
  free(h);
}

typedef struct {
  const char *weight, *bias, *act; /* bias NULL: none */
} lspec_t;

static void write_config(const char *dir, size_t k, size_t n, const lspec_t *l, size_t nl,
                         const char *precision, const char *buckets, const char *sha) {
  char j[8192];
  size_t o = (size_t)snprintf(j, sizeof j,
                              "{\"inputs\": [{\"name\": \"in\", \"datatype\": \"FP32\", \"shape\": "
                              "[-1, %zu]}],\n \"outputs\": [{\"name\": \"out\", \"datatype\": "
                              "\"FP32\", \"shape\": [-1, %zu]}],\n \"layers\": [",
                              k, n);
  for (size_t i = 0; i < nl; i++) {
    o += (size_t)snprintf(j + o, sizeof j - o, "%s{\"weight\": \"%s\"", i ? ", " : "", l[i].weight);
    if (l[i].bias) o += (size_t)snprintf(j + o, sizeof j - o, ", \"bias\": \"%s\"", l[i].bias);
    o += (size_t)snprintf(j + o, sizeof j - o, ", \"activation\": \"%s\"}", l[i].act);
  }
  snprintf(j + o, sizeof j - o,
           "],\n \"precision\": \"%s\", \"batching\": {\"buckets\": %s},\n \"checkpoint\": "
           "{\"sha256\": \"%s\"}}\n",
           precision, buckets, sha);
  write_bytes(dir, "model.json", j, strlen(j));
}

/* ---- the float64 reference ---- */

typedef struct {
  size_t in, out;
  const float *w; /* [out][in] */
  const float *b; /* [out] or NULL */
  tpu_act_t act;
} ref_layer_t;

static void ref_act(tpu_act_t act, double *y, size_t n) {
  double mx = -INFINITY, sum = 0;
  for (size_t j = 0; j < n; j++) {
    switch (act) {
    case TPU_ACT_RELU: y[j] = y[j] > 0 ? y[j] : 0; break;
    case TPU_ACT_GELU: y[j] = 0.5 * y[j] * (1 + erf(y[j] / sqrt(2.0))); break;
    case TPU_ACT_TANH: y[j] = tanh(y[j]); break;
    case TPU_ACT_SIGMOID: y[j] = 1 / (1 + exp(-y[j])); break;
    case TPU_ACT_SOFTMAX: mx = y[j] > mx ? y[j] : mx; break;
    default: break;
    }
  }
  if (act != TPU_ACT_SOFTMAX) return;
  for (size_t j = 0; j < n; j++) sum += (y[j] = exp(y[j] - mx));
  for (size_t j = 0; j < n; j++) y[j] /= sum;
}

/* out: rows × last width, in double. */
static void ref_forward(const ref_layer_t *L, size_t nl, const float *x, size_t rows, double *out) {
  size_t maxw = L[0].in;
  for (size_t i = 0; i < nl; i++) maxw = L[i].out > maxw ? L[i].out : maxw;
  double *a = malloc(maxw * sizeof *a), *y = malloc(maxw * sizeof *y);
  for (size_t r = 0; r < rows; r++) {
    for (size_t c = 0; c < L[0].in; c++) a[c] = x[r * L[0].in + c];
    for (size_t i = 0; i < nl; i++) {
      for (size_t o = 0; o < L[i].out; o++) {
        double s = L[i].b ? L[i].b[o] : 0;
        for (size_t c = 0; c < L[i].in; c++) s += (double)L[i].w[o * L[i].in + c] * a[c];
        y[o] = s;
      }
      ref_act(L[i].act, y, L[i].out);
      memcpy(a, y, L[i].out * sizeof *a);
    }
    memcpy(out + r * L[nl - 1].out, a, L[nl - 1].out * sizeof *a);
  }
  free(a);
  free(y);
}

/* Largest error of got against ref, relative to each row's scale max(1, max|ref|). */
static double max_rel_err(const float *got, const double *ref, size_t rows, size_t n) {
  double worst = 0;
  for (size_t r = 0; r < rows; r++) {
    double scale = 1;
    for (size_t j = 0; j < n; j++) scale = fabs(ref[r * n + j]) > scale ? fabs(ref[r * n + j]) : scale;
    for (size_t j = 0; j < n; j++) {
      double e = fabs((double)got[r * n + j] - ref[r * n + j]) / scale;
      if (!(e <= worst)) worst = e; /* NaN wins */
    }
  }
  return worst;
}

static tpu_engine_t *shared_engine;

static tpu_engine_t *engine(void) {
  if (!shared_engine) CU_ASSERT_EQUAL_FATAL(tpu_engine_create(NULL, &shared_engine), TPU_OK);
  return shared_engine;
}

static tpu_model_t *load_ok(const char *dir) {
  char err[1024];
  tpu_model_t *m = NULL;
  tpu_status_t rc = tpu_model_load(engine(), dir, "t", 1, NULL, &m, err, sizeof err);
  if (rc != TPU_OK) fprintf(stderr, "\n  load failed: %s\n", err);
  CU_ASSERT_EQUAL(rc, TPU_OK);
  return m;
}

/* Expects the model in dir to be refused with a message containing `want`. */
static void load_bad(const char *dir, const char *want) {
  char err[1024] = "";
  tpu_model_t *m = (tpu_model_t *)1;
  CU_ASSERT_NOT_EQUAL(tpu_model_load(engine(), dir, "t", 1, NULL, &m, err, sizeof err), TPU_OK);
  CU_ASSERT_PTR_NULL(m);
  if (!strstr(err, want)) {
    fprintf(stderr, "\n  expected \"%s\" in \"%s\"\n", want, err);
    CU_FAIL("message lacks the expected text");
  }
}

/* ---- random chains against the reference ---- */

#define MAXL 3

static void random_chain_trial(char *dir, const char *precision, double tol) {
  static const char *acts[] = {"none", "relu", "gelu", "tanh", "sigmoid", "softmax"};
  size_t nl = (size_t)tpu_test_rand_range(1, MAXL);
  size_t width[MAXL + 1];
  for (size_t i = 0; i <= nl; i++) width[i] = (size_t)tpu_test_rand_range(1, 48);
  float *w[MAXL], *b[MAXL];
  ref_layer_t L[MAXL];
  lspec_t spec[MAXL];
  tens_t t[2 * MAXL];
  size_t nt = 0;
  char wn[MAXL][16], bn[MAXL][16];
  for (size_t i = 0; i < nl; i++) {
    size_t in = width[i], out = width[i + 1];
    float amp = 2.0f / sqrtf((float)in);
    w[i] = malloc(in * out * sizeof(float));
    b[i] = malloc(out * sizeof(float));
    for (size_t j = 0; j < in * out; j++) w[i][j] = tpu_test_rand_float(-amp, amp);
    for (size_t j = 0; j < out; j++) b[i][j] = tpu_test_rand_float(-0.5f, 0.5f);
    int has_bias = tpu_test_rand_range(0, 3) != 0;
    snprintf(wn[i], sizeof wn[i], "l%zu.weight", i);
    snprintf(bn[i], sizeof bn[i], "l%zu.bias", i);
    L[i] = (ref_layer_t){in, out, w[i], has_bias ? b[i] : NULL,
                         (tpu_act_t)tpu_test_rand_range(0, TPU_ACT_COUNT - 1)};
    spec[i] = (lspec_t){wn[i], has_bias ? bn[i] : NULL, acts[L[i].act]};
    t[nt++] = (tens_t){wn[i], "F32", 2, {out, in}, w[i], in * out * sizeof(float)};
    if (has_bias) t[nt++] = (tens_t){bn[i], "F32", 1, {out, 0}, b[i], out * sizeof(float)};
  }
  char sha[65];
  write_checkpoint(dir, t, nt, sha);
  write_config(dir, width[0], width[nl], spec, nl, precision, "[1, 3, 16, 64]", sha);
  tpu_model_t *m = load_ok(dir);
  if (m) {
    size_t rows = (size_t)tpu_test_rand_range(1, 150); /* > 64 exercises chunking */
    float *x = malloc(rows * width[0] * sizeof(float));
    float *y = malloc(rows * width[nl] * sizeof(float));
    double *ref = malloc(rows * width[nl] * sizeof(double));
    for (size_t j = 0; j < rows * width[0]; j++) x[j] = tpu_test_rand_float(-1, 1);
    CU_ASSERT_EQUAL(tpu_model_infer(m, rows, x, y), TPU_OK);
    ref_forward(L, nl, x, rows, ref);
    double e = max_rel_err(y, ref, rows, width[nl]);
    if (!(e <= tol))
      fprintf(stderr, "\n  %s chain of %zu layers, %zu rows: error %.3g > %.3g\n", precision, nl,
              rows, e, tol);
    TPU_ASSERT_SEED(e <= tol);
    free(x);
    free(y);
    free(ref);
    tpu_model_free(m);
  }
  for (size_t i = 0; i < nl; i++) {
    free(w[i]);
    free(b[i]);
  }
}

static void test_random_fp32(void) {
  char *dir = make_tmpdir();
  for (int i = 0; i < 12; i++) random_chain_trial(dir, "fp32", 1e-5);
  rm_tmpdir(dir);
}

static void test_random_bf16(void) {
  char *dir = make_tmpdir();
  for (int i = 0; i < 12; i++) random_chain_trial(dir, "bf16", 4e-2);
  rm_tmpdir(dir);
}

static void test_random_int8(void) {
  char *dir = make_tmpdir();
  for (int i = 0; i < 12; i++) random_chain_trial(dir, "int8", 8e-2);
  rm_tmpdir(dir);
}

/* ---- run, infer and the accessors ---- */

static void test_run_and_metadata(void) {
  char *dir = make_tmpdir(), sha[65];
  enum { K = 5, H = 7, N = 3 };
  float w1[H * K], b1[H], w2[N * H];
  for (int i = 0; i < H * K; i++) w1[i] = tpu_test_rand_float(-1, 1);
  for (int i = 0; i < H; i++) b1[i] = tpu_test_rand_float(-1, 1);
  for (int i = 0; i < N * H; i++) w2[i] = tpu_test_rand_float(-1, 1);
  tens_t t[] = {{"a.w", "F32", 2, {H, K}, w1, sizeof w1},
                {"a.b", "F32", 1, {H, 0}, b1, sizeof b1},
                {"b.w", "F32", 2, {N, H}, w2, sizeof w2}};
  write_checkpoint(dir, t, 3, sha);
  lspec_t l[] = {{"a.w", "a.b", "tanh"}, {"b.w", NULL, "softmax"}};
  write_config(dir, K, N, l, 2, "fp32", "[2, 4, 8]", sha);
  char err[512];
  tpu_model_t *m = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_model_load(engine(), dir, "mlp", 7, NULL, &m, err, sizeof err), TPU_OK);

  CU_ASSERT_STRING_EQUAL(tpu_model_name(m), "mlp");
  CU_ASSERT_EQUAL(tpu_model_version(m), 7);
  CU_ASSERT_STRING_EQUAL(tpu_model_dir(m), dir);
  CU_ASSERT_STRING_EQUAL(tpu_model_input_name(m), "in");
  CU_ASSERT_EQUAL(tpu_model_input_width(m), K);
  CU_ASSERT_STRING_EQUAL(tpu_model_output_name(m), "out");
  CU_ASSERT_EQUAL(tpu_model_output_width(m), N);
  size_t nb;
  const size_t *bk = tpu_model_buckets(m, &nb);
  CU_ASSERT_EQUAL(nb, 3);
  CU_ASSERT_EQUAL(bk[0], 2);
  CU_ASSERT_EQUAL(bk[2], 8);
  CU_ASSERT_EQUAL(tpu_model_max_batch_size(m), 8);
  CU_ASSERT_EQUAL(tpu_model_max_queue_delay_us(m), 500);
  CU_ASSERT_EQUAL(tpu_model_precision(m), TPU_DTYPE_FP32);
  CU_ASSERT_EQUAL(tpu_model_layer_count(m), 2);
  CU_ASSERT_STRING_EQUAL(tpu_model_sha256(m), sha);
  CU_ASSERT_EQUAL(tpu_model_config(m)->nlayers, 2);
  CU_ASSERT(tpu_model_load_us(m) >= tpu_model_warmup_us(m));

  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 0), -1);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 1), 0);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 2), 0);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 3), 1);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 5), 2);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 8), 2);
  CU_ASSERT_EQUAL(tpu_model_bucket_index(m, 9), -1);

  /* A padded bucket run gives each real row what infer gives it, whatever the padding holds:
   * rows never mix. */
  float x[8 * K], y[8 * N], y2[8 * N];
  for (int i = 0; i < 8 * K; i++) x[i] = tpu_test_rand_float(-2, 2);
  CU_ASSERT_EQUAL(tpu_model_run(m, 1, x, y, NULL, 0), TPU_OK); /* 4 rows */
  CU_ASSERT_EQUAL(tpu_model_infer(m, 3, x, y2), TPU_OK);
  for (int i = 0; i < 3 * N; i++) CU_ASSERT_DOUBLE_EQUAL(y[i], y2[i], 1e-6);
  double s = 0;
  for (int j = 0; j < N; j++) s += y[j];
  CU_ASSERT_DOUBLE_EQUAL(s, 1.0, 1e-5); /* softmax rows sum to 1 */

  CU_ASSERT_EQUAL(tpu_model_run(m, 3, x, y, NULL, 0), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_run(m, 0, NULL, y, NULL, 0), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_run(NULL, 0, x, y, NULL, 0), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_infer(m, 0, x, y), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_infer(m, 1, x, NULL), TPU_EINVAL);
  tpu_model_free(m);
  tpu_model_free(NULL);
  CU_ASSERT_PTR_NULL(tpu_model_name(NULL));
  CU_ASSERT_EQUAL(tpu_model_bucket_index(NULL, 1), -1);

  CU_ASSERT_EQUAL(tpu_model_load(NULL, dir, "mlp", 1, NULL, &m, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_load(engine(), NULL, "mlp", 1, NULL, &m, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "mlp", 1, NULL, NULL, err, sizeof err), TPU_EINVAL);
  rm_tmpdir(dir);
}

/* ---- checkpoint dtypes ---- */

/* float -> binary16 for values that are exact in binary16 (the tests only use those). */
static uint16_t f16_exact(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  float a = fabsf(f);
  if (a == 0) return sign;
  int e;
  float m = frexpf(a, &e); /* a = m·2^e, m in [0.5, 1) */
  if (e - 1 < -14) return (uint16_t)(sign | (uint16_t)ldexpf(a, 24)); /* subnormal */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(ldexpf(m, 11) - 1024));
}

static uint16_t bf16_exact(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}

/* The same weights stored as F32, F16 and BF16 must give bit-identical fp32 outputs. */
static void test_f16_bf16_weights(void) {
  enum { K = 6, N = 4 };
  float w[N * K], b[N];
  /* k/64 is exact in binary16 and bfloat16; add binary16's edge values where bf16 can hold them. */
  for (int i = 0; i < N * K; i++) w[i] = (float)tpu_test_rand_range(-64, 64) / 64.0f;
  for (int i = 0; i < N; i++) b[i] = (float)tpu_test_rand_range(-64, 64) / 32.0f;
  w[0] = ldexpf(1, -24); /* smallest binary16 subnormal */
  w[1] = -0.0f;
  w[2] = 96.0f;           /* exact in both */
  w[5] = ldexpf(1, -14);  /* smallest binary16 normal */
  float wf16[N * K];
  memcpy(wf16, w, sizeof w);
  wf16[3] = ldexpf(1023, -24); /* largest binary16 subnormal: not exact in bf16 */
  wf16[4] = 65504.0f;          /* largest binary16 */

  uint16_t h[N * K], hb[N], bb[N * K], bbb[N];
  for (int i = 0; i < N * K; i++) h[i] = f16_exact(wf16[i]), bb[i] = bf16_exact(w[i]);
  for (int i = 0; i < N; i++) hb[i] = f16_exact(b[i]), bbb[i] = bf16_exact(b[i]);
  CU_ASSERT_EQUAL(h[0], 0x0001);
  CU_ASSERT_EQUAL(h[3], 0x03ff);
  CU_ASSERT_EQUAL(h[4], 0x7bff);
  CU_ASSERT_EQUAL(h[1], 0x8000);

  float x[9 * K], y32[9 * N], y16[9 * N], ybf[9 * N], y32h[9 * N];
  for (int i = 0; i < 9 * K; i++) x[i] = (float)tpu_test_rand_range(-8, 8) / 8.0f;
  lspec_t l[] = {{"w", "b", "none"}};
  char *dir = make_tmpdir(), sha[65];
  struct {
    tens_t t[2];
    float *y;
  } cases[] = {
      {{{"w", "F32", 2, {N, K}, w, sizeof w}, {"b", "F32", 1, {N, 0}, b, sizeof b}}, y32},
      {{{"w", "F32", 2, {N, K}, wf16, sizeof wf16}, {"b", "F32", 1, {N, 0}, b, sizeof b}}, y32h},
      {{{"w", "F16", 2, {N, K}, h, sizeof h}, {"b", "F16", 1, {N, 0}, hb, sizeof hb}}, y16},
      {{{"w", "BF16", 2, {N, K}, bb, sizeof bb}, {"b", "BF16", 1, {N, 0}, bbb, sizeof bbb}}, ybf},
  };
  for (size_t c = 0; c < 4; c++) {
    write_checkpoint(dir, cases[c].t, 2, sha);
    write_config(dir, K, N, l, 1, "fp32", "[1, 4]", sha);
    tpu_model_t *m = load_ok(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(tpu_model_infer(m, 9, x, cases[c].y), TPU_OK);
    tpu_model_free(m);
  }
  CU_ASSERT_EQUAL(memcmp(y32, ybf, sizeof y32), 0);
  CU_ASSERT_EQUAL(memcmp(y32h, y16, sizeof y32), 0);

  /* Non-finite values are refused with the element named. */
  h[1 * K + 2] = 0x7c00; /* +Inf */
  tens_t bad[] = {{"w", "F16", 2, {N, K}, h, sizeof h}, {"b", "F16", 1, {N, 0}, hb, sizeof hb}};
  write_checkpoint(dir, bad, 2, sha);
  write_config(dir, K, N, l, 1, "fp32", "[1, 4]", sha);
  load_bad(dir, "layers[0].weight 'w': element [1, 2] is inf; expected finite values");
  h[1 * K + 2] = 0;
  hb[3] = 0x7e00; /* NaN */
  write_checkpoint(dir, bad, 2, sha);
  write_config(dir, K, N, l, 1, "fp32", "[1, 4]", sha);
  load_bad(dir, "layers[0].bias 'b': element [3] is nan");
  rm_tmpdir(dir);
}

/* I8 weights with "<weight>_scale": packed as they are for int8, dequantized for fp32. */
static void test_i8_weights(void) {
  enum { K = 24, N = 9 };
  int8_t q[N * K];
  float s[N], deq[N * K], b[N];
  for (int i = 0; i < N * K; i++) q[i] = (int8_t)tpu_test_rand_range(-127, 127);
  for (int r = 0; r < N; r++) s[r] = tpu_test_rand_float(0.001f, 0.02f), b[r] = tpu_test_rand_float(-1, 1);
  for (int i = 0; i < N * K; i++) deq[i] = (float)q[i] * s[i / K];
  float x[20 * K], y[20 * N];
  double ref[20 * N];
  for (int i = 0; i < 20 * K; i++) x[i] = tpu_test_rand_float(-1, 1);
  ref_layer_t L = {K, N, deq, b, TPU_ACT_NONE};
  ref_forward(&L, 1, x, 20, ref);
  lspec_t l[] = {{"fc.weight", "fc.bias", "none"}};
  char *dir = make_tmpdir(), sha[65];

  for (int shape2 = 0; shape2 < 2; shape2++) { /* scales [N] and [N, 1] */
    tens_t t[] = {{"fc.weight", "I8", 2, {N, K}, q, sizeof q},
                  {"fc.weight_scale", "F32", shape2 ? 2 : 1, {N, 1}, s, sizeof s},
                  {"fc.bias", "F32", 1, {N, 0}, b, sizeof b}};
    write_checkpoint(dir, t, 3, sha);
    const char *prec[] = {"fp32", "bf16", "int8"};
    const double tol[] = {2e-5, 3e-2, 4e-2};
    for (int p = 0; p < 3; p++) {
      write_config(dir, K, N, l, 1, prec[p], "[1, 8]", sha);
      tpu_model_t *m = load_ok(dir);
      CU_ASSERT_PTR_NOT_NULL_FATAL(m);
      CU_ASSERT_EQUAL(tpu_model_infer(m, 20, x, y), TPU_OK);
      double e = max_rel_err(y, ref, 20, N);
      if (!(e <= tol[p])) fprintf(stderr, "\n  I8 weights, %s: error %.3g\n", prec[p], e);
      TPU_ASSERT_SEED(e <= tol[p]);
      tpu_model_free(m);
    }
  }

  /* Refusals. */
  tens_t noscale[] = {{"fc.weight", "I8", 2, {N, K}, q, sizeof q}, {"fc.bias", "F32", 1, {N, 0}, b, sizeof b}};
  write_checkpoint(dir, noscale, 2, sha);
  write_config(dir, K, N, l, 1, "int8", "[1, 8]", sha);
  load_bad(dir, "layers[0].weight 'fc.weight' is I8, but the checkpoint has no 'fc.weight_scale'");

  tens_t badshape[] = {{"fc.weight", "I8", 2, {N, K}, q, sizeof q},
                       {"fc.weight_scale", "F32", 2, {1, N}, s, sizeof s},
                       {"fc.bias", "F32", 1, {N, 0}, b, sizeof b}};
  write_checkpoint(dir, badshape, 3, sha);
  write_config(dir, K, N, l, 1, "int8", "[1, 8]", sha);
  load_bad(dir, "'fc.weight_scale': expected shape [9] or [9, 1] (out_features of 'fc.weight'), got [1, 9]");

  float s0[N];
  memcpy(s0, s, sizeof s);
  s0[4] = 0;
  tens_t zero[] = {{"fc.weight", "I8", 2, {N, K}, q, sizeof q},
                   {"fc.weight_scale", "F32", 1, {N, 0}, s0, sizeof s0},
                   {"fc.bias", "F32", 1, {N, 0}, b, sizeof b}};
  write_checkpoint(dir, zero, 3, sha);
  write_config(dir, K, N, l, 1, "int8", "[1, 8]", sha);
  load_bad(dir, "'fc.weight_scale': element [4] is 0; expected a finite scale > 0");

  q[2 * K + 5] = -128;
  tens_t m128[] = {{"fc.weight", "I8", 2, {N, K}, q, sizeof q},
                   {"fc.weight_scale", "F32", 1, {N, 0}, s, sizeof s},
                   {"fc.bias", "F32", 1, {N, 0}, b, sizeof b}};
  write_checkpoint(dir, m128, 3, sha);
  write_config(dir, K, N, l, 1, "int8", "[1, 8]", sha);
  load_bad(dir, "element [2, 5] is -128; symmetric int8 weights must be in [-127, 127]");
  rm_tmpdir(dir);
}

/* ---- refusals at load ---- */

static void test_digest_mismatch(void) {
  enum { K = 3, N = 2 };
  float w[N * K] = {1, 2, 3, 4, 5, 6};
  tens_t t[] = {{"w", "F32", 2, {N, K}, w, sizeof w}};
  lspec_t l[] = {{"w", NULL, "none"}};
  char *dir = make_tmpdir(), sha[65], other[65];
  write_checkpoint(dir, t, 1, sha);
  memcpy(other, sha, 65);
  other[0] = other[0] == '0' ? '1' : '0';
  write_config(dir, K, N, l, 1, "fp32", "[1]", other);
  char want[300];
  snprintf(want, sizeof want, "SHA-256 mismatch: the file's digest is %s, expected %s", sha, other);
  load_bad(dir, want);

  /* The right digest, then the file changes under it (a partial or tampered copy). */
  write_config(dir, K, N, l, 1, "fp32", "[1]", sha);
  tpu_model_t *m = load_ok(dir);
  tpu_model_free(m);
  w[5] = 7;
  char sha2[65];
  write_checkpoint(dir, t, 1, sha2);
  load_bad(dir, "SHA-256 mismatch");
  rm_tmpdir(dir);
}

static void test_load_errors(void) {
  enum { K = 4, H = 3, N = 2 };
  float w1[H * K] = {0}, b1[H] = {0}, w2[N * H] = {0}, w3[N * 5] = {0};
  int32_t wi[H * K] = {0};
  char *dir = make_tmpdir(), sha[65], path[512];

  /* model.json problems carry its path. */
  load_bad(dir, "/model.json: cannot open: No such file or directory");
  write_bytes(dir, "model.json", "{\"inputs\": 1}", 13);
  snprintf(path, sizeof path, "%s/model.json: inputs: expected an array", dir);
  load_bad(dir, path);

  /* Missing checkpoint. */
  lspec_t l2[] = {{"w1", "b1", "relu"}, {"w2", NULL, "none"}};
  write_config(dir, K, N, l2, 2, "fp32", "[1]", "0000000000000000000000000000000000000000000000000000000000000000");
  load_bad(dir, "model.safetensors: cannot open: No such file or directory");

  tens_t good[] = {{"w1", "F32", 2, {H, K}, w1, sizeof w1},
                   {"b1", "F32", 1, {H, 0}, b1, sizeof b1},
                   {"w2", "F32", 2, {N, H}, w2, sizeof w2}};
  write_checkpoint(dir, good, 3, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  tpu_model_free(load_ok(dir));

  /* Width mismatches along the chain. */
  write_config(dir, K + 1, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[0].weight 'w1': shape [3, 4] takes 4 input features, but inputs[0] is [-1, 5]");
  write_config(dir, K, N + 1, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[1].weight 'w2': shape [2, 3] gives 2 output features, but outputs[0] is [-1, 3]");
  tens_t chain[] = {{"w1", "F32", 2, {H, K}, w1, sizeof w1},
                    {"b1", "F32", 1, {H, 0}, b1, sizeof b1},
                    {"w2", "F32", 2, {N, 5}, w3, sizeof w3}};
  write_checkpoint(dir, chain, 3, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[1].weight 'w2': shape [2, 5] takes 5 input features, but layers[0] outputs 3");

  /* Bias shape, missing tensors, bad ranks and dtypes. */
  tens_t bias[] = {{"w1", "F32", 2, {H, K}, w1, sizeof w1},
                   {"b1", "F32", 2, {1, H}, b1, sizeof b1},
                   {"w2", "F32", 2, {N, H}, w2, sizeof w2}};
  write_checkpoint(dir, bias, 3, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[0].bias 'b1': expected shape [3] (out_features of 'w1'), got [1, 3]");

  write_checkpoint(dir, good, 2, sha); /* no w2 */
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[1].weight: no tensor named 'w2' in the checkpoint");
  lspec_t lb[] = {{"w1", "nob", "relu"}, {"w2", NULL, "none"}};
  write_checkpoint(dir, good, 3, sha);
  write_config(dir, K, N, lb, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[0].bias: no tensor named 'nob' in the checkpoint");

  tens_t rank[] = {{"w1", "F32", 1, {H * K, 0}, w1, sizeof w1},
                   {"b1", "F32", 1, {H, 0}, b1, sizeof b1},
                   {"w2", "F32", 2, {N, H}, w2, sizeof w2}};
  write_checkpoint(dir, rank, 3, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[0].weight 'w1': expected shape [out_features, in_features] with each in 1..1048576, got [12]");

  tens_t dt[] = {{"w1", "I32", 2, {H, K}, wi, sizeof wi},
                 {"b1", "F32", 1, {H, 0}, b1, sizeof b1},
                 {"w2", "F32", 2, {N, H}, w2, sizeof w2}};
  write_checkpoint(dir, dt, 3, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "layers[0].weight 'w1': dtype I32 is not supported (expected F32, F16, BF16, or I8 with '<weight>_scale')");

  /* A malformed checkpoint whose digest matches is refused by the reader. */
  write_bytes(dir, "model.safetensors", "\x02\0\0\0\0\0\0\0{}x", 11);
  sha256_hex_of("\x02\0\0\0\0\0\0\0{}x", 11, sha);
  write_config(dir, K, N, l2, 2, "fp32", "[1]", sha);
  load_bad(dir, "model.safetensors: 1 trailing bytes");
  rm_tmpdir(dir);
}

/* ---- the bundled models ---- */

#define DIGITS_N 1797

static size_t argmax(const float *p, size_t n) {
  size_t best = 0;
  for (size_t j = 1; j < n; j++)
    if (p[j] > p[best]) best = j;
  return best;
}

/* Loads the digits weights with `precision` (a temp copy of models/digits/1 when not fp32) and
 * returns how many of the 1797 predictions equal scikit-learn's; *max_diff gets the largest
 * probability difference. */
static size_t digits_agreement(const char *precision, double *max_diff) {
  const char *src = TPU_SOURCE_DIR "/models/digits/1";
  size_t xl, pl, ql;
  uint8_t *xu = read_bytes(TPU_SOURCE_DIR "/tests/data/digits_x.u8", &xl);
  uint8_t *pred = read_bytes(TPU_SOURCE_DIR "/tests/data/digits_pred.u8", &pl);
  float *proba = read_bytes(TPU_SOURCE_DIR "/tests/data/digits_proba.f32", &ql);
  CU_ASSERT_EQUAL_FATAL(xl, DIGITS_N * 64);
  CU_ASSERT_EQUAL_FATAL(pl, DIGITS_N);
  CU_ASSERT_EQUAL_FATAL(ql, DIGITS_N * 10 * sizeof(float));

  char *dir = NULL;
  const char *load_dir = src;
  if (strcmp(precision, "fp32") != 0) {
    dir = make_tmpdir();
    size_t jl, cl;
    char *json = read_bytes(TPU_SOURCE_DIR "/models/digits/1/model.json", &jl);
    void *ck = read_bytes(TPU_SOURCE_DIR "/models/digits/1/model.safetensors", &cl);
    char *at = strstr(json, "\"precision\": \"fp32\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    memcpy(at + 14, precision, 4);
    write_bytes(dir, "model.json", json, jl);
    write_bytes(dir, "model.safetensors", ck, cl);
    free(json);
    free(ck);
    load_dir = dir;
  }

  char err[1024];
  tpu_model_t *m = NULL;
  tpu_status_t rc = tpu_model_load(engine(), load_dir, "digits", 1, NULL, &m, err, sizeof err);
  if (rc != TPU_OK) fprintf(stderr, "\n  %s\n", err);
  CU_ASSERT_EQUAL_FATAL(rc, TPU_OK);
  CU_ASSERT_STRING_EQUAL(tpu_model_input_name(m), "x");
  CU_ASSERT_EQUAL(tpu_model_input_width(m), 64);
  CU_ASSERT_STRING_EQUAL(tpu_model_output_name(m), "probs");
  CU_ASSERT_EQUAL(tpu_model_output_width(m), 10);

  float *x = malloc(DIGITS_N * 64 * sizeof(float)), *y = malloc(DIGITS_N * 10 * sizeof(float));
  for (size_t i = 0; i < DIGITS_N * 64; i++) x[i] = xu[i];
  CU_ASSERT_EQUAL(tpu_model_infer(m, DIGITS_N, x, y), TPU_OK);
  size_t agree = 0;
  double md = 0;
  for (size_t r = 0; r < DIGITS_N; r++) {
    agree += argmax(y + r * 10, 10) == pred[r];
    for (size_t j = 0; j < 10; j++) {
      double d = fabs((double)y[r * 10 + j] - proba[r * 10 + j]);
      if (!(d <= md)) md = d;
    }
  }
  *max_diff = md;
  tpu_model_free(m);
  free(x);
  free(y);
  free(xu);
  free(pred);
  free(proba);
  if (dir) rm_tmpdir(dir);
  return agree;
}

static void test_digits_fp32(void) {
  double md;
  size_t agree = digits_agreement("fp32", &md);
  CU_ASSERT_EQUAL(agree, DIGITS_N); /* every prediction equals scikit-learn's */
  if (md > 1e-4) fprintf(stderr, "\n  digits fp32: probabilities differ by %.3g\n", md);
  CU_ASSERT(md <= 1e-4);
}

static void test_digits_bf16(void) {
  double md;
  size_t agree = digits_agreement("bf16", &md);
  if (agree * 100 < DIGITS_N * 99) fprintf(stderr, "\n  digits bf16: %zu/%d agree\n", agree, DIGITS_N);
  CU_ASSERT(agree * 100 >= DIGITS_N * 99);
}

static void test_digits_int8(void) {
  double md;
  size_t agree = digits_agreement("int8", &md);
  if (agree * 100 < DIGITS_N * 99) fprintf(stderr, "\n  digits int8: %zu/%d agree\n", agree, DIGITS_N);
  CU_ASSERT(agree * 100 >= DIGITS_N * 99);
}

static void test_matmul_model(void) {
  const char *dir = TPU_SOURCE_DIR "/models/matmul/1";
  tpu_model_t *m = load_ok(dir);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_EQUAL(tpu_model_precision(m), TPU_DTYPE_INT8);
  size_t k = tpu_model_input_width(m), n = tpu_model_output_width(m);
  CU_ASSERT_EQUAL(k, 256);
  CU_ASSERT_EQUAL(n, 256);

  /* Reference: the stored I8 weights times their scales, in float64. */
  char err[512];
  tpu_safetensors_t *st;
  CU_ASSERT_EQUAL_FATAL(tpu_safetensors_open(TPU_SOURCE_DIR "/models/matmul/1/model.safetensors", &st, err, sizeof err), TPU_OK);
  const tpu_st_tensor_t *q = tpu_safetensors_find(st, "dense.weight");
  const tpu_st_tensor_t *s = tpu_safetensors_find(st, "dense.weight_scale");
  CU_ASSERT_PTR_NOT_NULL_FATAL(q);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL_FATAL(q->dtype, TPU_ST_I8);
  float *w = malloc(k * n * sizeof(float)), scale[256];
  memcpy(scale, s->data, sizeof scale);
  for (size_t i = 0; i < k * n; i++) w[i] = (float)((const int8_t *)q->data)[i] * scale[i / k];
  tpu_safetensors_close(st);

  enum { ROWS = 20 };
  float *x = malloc(ROWS * k * sizeof(float)), *y = malloc(ROWS * n * sizeof(float));
  double *ref = malloc(ROWS * n * sizeof(double));
  for (size_t i = 0; i < ROWS * k; i++) x[i] = tpu_test_rand_float(-1, 1);
  CU_ASSERT_EQUAL(tpu_model_infer(m, ROWS, x, y), TPU_OK);
  ref_layer_t L = {k, n, w, NULL, TPU_ACT_NONE};
  ref_forward(&L, 1, x, ROWS, ref);
  double e = max_rel_err(y, ref, ROWS, n);
  if (!(e <= 3e-2)) fprintf(stderr, "\n  matmul model: error %.3g\n", e);
  TPU_ASSERT_SEED(e <= 3e-2);
  free(w);
  free(x);
  free(y);
  free(ref);
  tpu_model_free(m);
}


/* Layers may share a weight and a bias (tied layers): the graph holds each once (a regression:
 * the dense chain as a graph refused the second use of a name). */
static void test_tied_layers(void) {
  enum { D = 8, ROWS = 5 };
  char *dir = make_tmpdir(), sha[65], err[512];
  float w[D * D], b[D], x[ROWS * D], y[ROWS * D];
  double ref[ROWS * D];
  for (size_t i = 0; i < D * D; i++) w[i] = tpu_test_rand_float(-1, 1);
  for (size_t i = 0; i < D; i++) b[i] = tpu_test_rand_float(-1, 1);
  for (size_t i = 0; i < ROWS * D; i++) x[i] = tpu_test_rand_float(-1, 1);
  tens_t t[] = {{"w", "F32", 2, {D, D}, w, sizeof w}, {"b", "F32", 1, {D}, b, sizeof b}};
  write_checkpoint(dir, t, 2, sha);
  lspec_t l[] = {{"w", "b", "relu"}, {"w", "b", "none"}};
  write_config(dir, D, D, l, 2, "fp32", "[1, 8]", sha);
  tpu_model_t *m = NULL;
  CU_ASSERT_EQUAL_FATAL(tpu_model_load(engine(), dir, "t", 1, NULL, &m, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(tpu_model_infer(m, ROWS, x, y), TPU_OK);
  ref_layer_t L[] = {{D, D, w, b, TPU_ACT_RELU}, {D, D, w, b, TPU_ACT_NONE}};
  ref_forward(L, 2, x, ROWS, ref);
  TPU_ASSERT_SEED(max_rel_err(y, ref, ROWS, D) <= 1e-5);
  tpu_model_free(m);
  rm_tmpdir(dir);
}

/* ---- memory, cancel, transient failures, special files (issue #15) ---- */

/* Writes a one-layer K -> N model with buckets `buckets` into a new directory. */
static char *one_layer(size_t k, size_t n, const char *buckets) {
  char *dir = make_tmpdir(), sha[65];
  float *w = calloc(k * n, sizeof *w);
  for (size_t i = 0; i < k * n; i++) w[i] = (float)(i % 7) - 3.0f;
  tens_t t[] = {{"w", "F32", 2, {n, k}, w, k * n * sizeof *w}};
  write_checkpoint(dir, t, 1, sha);
  lspec_t l[] = {{"w", NULL, "none"}};
  write_config(dir, k, n, l, 1, "fp32", buckets, sha);
  free(w);
  return dir;
}

/* Regression (a 1 MiB checkpoint asking for 4 GiB loaded for 31 s): the need is computed from
 * the shapes before any big allocation and checked against the limit, with the figures. */
static void test_memory_limit(void) {
  char *dir = one_layer(1024, 2, "[1, 4096]"), err[1024];
  tpu_model_t *m = (tpu_model_t *)1;
  tpu_model_load_opts_t o = {.memory_limit = 8u << 20, .batch_copies = 1};
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_ERANGE);
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "more than the model memory limit of 8.0 MiB"));
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "activations and staging for 4096 rows"));
  CU_ASSERT_FALSE(o.transient);
  /* Input and output staging alone: 4096 x (1024 + 2) floats, twice (model and batcher). */
  uint64_t staging = 4096ull * 1026 * 4;
  CU_ASSERT(o.memory_bytes >= 2 * staging);
  CU_ASSERT(o.memory_bytes < 2 * staging + (1u << 20));
  CU_ASSERT(o.peak_bytes > o.memory_bytes);
  /* Under a limit that holds it: loads and reports the same figure. */
  tpu_model_load_opts_t o2 = {.memory_limit = 64u << 20, .batch_copies = 1};
  CU_ASSERT_EQUAL_FATAL(tpu_model_load(engine(), dir, "t", 1, &o2, &m, err, sizeof err), TPU_OK);
  CU_ASSERT_EQUAL(o2.memory_bytes, o.memory_bytes);
  CU_ASSERT_EQUAL(tpu_model_memory_bytes(m), o.memory_bytes);
  tpu_model_free(m);
  /* A checkpoint larger than the limit is refused from its size, before it is read. */
  tpu_model_load_opts_t o3 = {.memory_limit = 1000};
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o3, &m, err, sizeof err), TPU_ERANGE);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "the checkpoint is"));
  rm_tmpdir(dir);
}

/* The estimate is what the load really allocates: the heap grows by memory_bytes (glibc's
 * mallinfo2, small and mmapped blocks), within allocator rounding. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TPU_TEST_OWN_MALLOC 0
#endif
#endif
#if !defined(TPU_TEST_OWN_MALLOC) && (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__))
#define TPU_TEST_OWN_MALLOC 0
#endif
#ifndef TPU_TEST_OWN_MALLOC
#define TPU_TEST_OWN_MALLOC 1 /* glibc's malloc, which mallinfo2 describes */
#endif

static void test_memory_estimate(void) {
  if (!TPU_TEST_OWN_MALLOC) {
    printf("\n  skipped: a sanitizer's allocator replaces glibc's (mallinfo2 sees none of it)\n");
    return;
  }
  static const char *const shapes[][3] = {
      {"300", "70", "[1, 8, 64]"}, {"64", "1000", "[2, 512]"}, {"2000", "3", "[1, 128, 1024]"}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    char *dir = one_layer((size_t)atoi(shapes[i][0]), (size_t)atoi(shapes[i][1]), shapes[i][2]);
    char err[512];
    tpu_model_t *m = NULL;
    tpu_model_load_opts_t o = {0};
    struct mallinfo2 a = mallinfo2();
    CU_ASSERT_EQUAL_FATAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_OK);
    struct mallinfo2 b = mallinfo2();
    double used = (double)(b.uordblks + b.hblkhd) - (double)(a.uordblks + a.hblkhd);
    double want = (double)o.memory_bytes;
    if (!(used <= want * 1.05 + 65536 && used >= want * 0.95 - 65536))
      fprintf(stderr, "\n  %s x %s %s: heap grew %.0f bytes, estimate %.0f\n", shapes[i][0],
              shapes[i][1], shapes[i][2], used, want);
    CU_ASSERT(used <= want * 1.05 + 65536 && used >= want * 0.95 - 65536);
    tpu_model_free(m);
    rm_tmpdir(dir);
  }
}

static void test_cancel(void) {
  char *dir = one_layer(16, 4, "[1, 8]"), err[512];
  tpu_model_t *m = (tpu_model_t *)1;
  atomic_int cancel;
  atomic_init(&cancel, 1);
  tpu_model_load_opts_t o = {.cancel = &cancel};
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_ECANCELED);
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "cancelled"));
  CU_ASSERT_FALSE(o.transient);
  atomic_store(&cancel, 0);
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_OK);
  /* Per-bucket cost from the plans: M·K·N MACs of the one layer. */
  uint64_t macs = 0, cycles = 0, slots = 0;
  CU_ASSERT_EQUAL(tpu_model_bucket_cost(m, 1, &macs, &cycles, &slots), TPU_OK);
  CU_ASSERT_EQUAL(macs, 8 * 16 * 4);
  CU_ASSERT_EQUAL(cycles, tpu_systolic_cycles(128, 128, 8, 16, 4));
  CU_ASSERT_EQUAL(tpu_model_bucket_cost(m, 2, &macs, NULL, NULL), TPU_EINVAL);
  tpu_model_free(m);
  rm_tmpdir(dir);
}

/* Descriptors exhausted: the load fails with transient set (retry with the same files), unlike
 * a bad file. */
static void test_transient(void) {
  char *dir = one_layer(16, 4, "[1]"), err[512];
  tpu_model_t *m = NULL;
  tpu_model_load_opts_t o = {0};
  struct rlimit old, low;
  CU_ASSERT_EQUAL_FATAL(getrlimit(RLIMIT_NOFILE, &old), 0);
  int fds[512], n = 0;
  low = old;
  low.rlim_cur = 256;
  CU_ASSERT_EQUAL_FATAL(setrlimit(RLIMIT_NOFILE, &low), 0);
  while (n < 512 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) n++;
  tpu_status_t rc = tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err);
  while (n > 0) close(fds[--n]);
  CU_ASSERT_EQUAL(setrlimit(RLIMIT_NOFILE, &old), 0);
  CU_ASSERT_EQUAL(rc, TPU_EINVAL);
  CU_ASSERT_TRUE(o.transient);
  CU_ASSERT_PTR_NOT_NULL(strstr(err, "Too many open files"));
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_OK);
  CU_ASSERT_FALSE(o.transient);
  tpu_model_free(m);
  /* A bad digest is the files' fault: not transient. */
  char p[600];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  FILE *f = fopen(p, "ab");
  fputc(0, f);
  fclose(f);
  CU_ASSERT_EQUAL(tpu_model_load(engine(), dir, "t", 1, &o, &m, err, sizeof err), TPU_EINVAL);
  CU_ASSERT_FALSE(o.transient);
  rm_tmpdir(dir);
}

/* Regression (a FIFO as model.json or as the checkpoint blocked the load forever). */
static void test_fifo_files(void) {
  char *dir = one_layer(16, 4, "[1]"), p[600];
  snprintf(p, sizeof p, "%s/model.safetensors", dir);
  CU_ASSERT_EQUAL(unlink(p), 0);
  CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0644), 0);
  load_bad(dir, "model.safetensors: a FIFO, not a regular file");
  snprintf(p, sizeof p, "%s/model.json", dir);
  CU_ASSERT_EQUAL(unlink(p), 0);
  CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0644), 0);
  load_bad(dir, "model.json: a FIFO, not a regular file");
  rm_tmpdir(dir);
}

static void test_cleanup(void) {
  /* Last case: the shared engine goes, so valgrind sees no leak. */
  tpu_engine_free(shared_engine);
  shared_engine = NULL;
}

TPU_TEST_SUITE(model,
               {"tied_layers", test_tied_layers},
               {"random_fp32", test_random_fp32},
               {"random_bf16", test_random_bf16},
               {"random_int8", test_random_int8},
               {"run_and_metadata", test_run_and_metadata},
               {"f16_bf16_weights", test_f16_bf16_weights},
               {"i8_weights", test_i8_weights},
               {"digest_mismatch", test_digest_mismatch},
               {"load_errors", test_load_errors},
               {"digits_fp32", test_digits_fp32},
               {"digits_bf16", test_digits_bf16},
               {"digits_int8", test_digits_int8},
               {"matmul_model", test_matmul_model},
               {"memory_limit", test_memory_limit},
               {"memory_estimate", test_memory_estimate},
               {"cancel", test_cancel},
               {"transient", test_transient},
               {"fifo_files", test_fifo_files},
               {"cleanup", test_cleanup})

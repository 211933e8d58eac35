/*
 * tpu_kernels.h - the internal interface between the engine's frame and its kernel sets.
 *
 * DESIGN
 * The frame (engine/frame/) owns everything that does not depend on the instruction set:
 * argument checks, dtype conversion of sources, quantization, plans, threads, softmax and the
 * statistics. A kernel set (engine/kernels/<isa>/) owns exactly two things per compute dtype:
 * the layout of packed weights and the micro-kernel that multiplies a block of A by them with the
 * epilogue fused. Kernel sets never allocate, never block, never touch global state and never
 * return errors: the frame has validated every argument before it calls them.
 *
 * Adding a kernel set (say AVX-512):
 *   1. engine/kernels/avx512/ sources, compiled with only that ISA's flags (engine/CMakeLists.txt
 *      does this and defines TPU_HAVE_KERNELS_AVX512 for the frame).
 *   2. Define `const tpu__kernel_set_t tpu__kernels_avx512 = {...}` there (declared below).
 *      Its `cpu` mask names the features it needs; registry.c checks them (cpuid plus the OS's
 *      XSAVE state, and the AMX tile permission) in baseline code, so no ISA instruction runs
 *      before the check.
 *   3. Nothing else: registry.c already lists amx, avx512, avx2, ref (newest first) under
 *      #ifdef TPU_HAVE_KERNELS_<ISA>, and TPUD_ISA=<name> forces one. The unit tests run their
 *      numeric checks once per available set (tests/engine/test_plan.c, test_kernels_ref.c).
 * A set may leave the entry of a compute dtype zeroed (gemm == NULL): the registry then fills it
 * with the entry of the next supported set below it (ref at the bottom), so e.g. an AMX set can
 * provide BF16 and INT8 only and inherit FP32. Pack and gemm always come from the same set.
 *
 * Names follow BLIS: tpu_<op>_<dtype>_<isa>_<MRxNR>, e.g. tpu_gemm_i8_avx512_16x64.
 */
#ifndef TPU_KERNELS_H
#define TPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tpu_engine.h"

/* Alignment in bytes of packed weights and of per-thread workspaces (one cache line, and what
 * AMX tile loads and aligned AVX-512 loads want). The frame guarantees it; A and C are only
 * element-aligned (they are the caller's buffers). */
#define TPU__KERNEL_ALIGN 64

/*
 * Arguments of one plan run, shared read-only by all threads of the run.
 *
 * Layouts and units:
 *   a        [m][k] row-major, no padding, in the compute dtype: float (FP32), uint16_t holding
 *            bfloat16 bits (BF16) or int8_t (INT8). The frame has already converted or quantized
 *            FP32 input.
 *   a_scales INT8 only: m per-row scales, each finite and > 0 (real value of one quantum);
 *            NULL for INT32 output, which does not read them.
 *   w        what this set's pack() wrote for the same compute dtype, k and n.
 *   w_scales INT8 only: n per-output-channel scales, each finite and > 0; NULL for INT32
 *            output (tpu_matmul packs raw integers without scales).
 *   bias     n floats, or NULL for none.
 *   c        row i starts at (char *)c + i * ldc * size(out_dtype); ldc >= n, in elements.
 *
 * Epilogue contract (every set must honour it; tests compare against it):
 *   acc      FP32: binary32 sum of a[i][p]·w[j][p]; BF16: the same over bf16 values widened to
 *            binary32 (each product is exact, only the accumulation rounds); INT8: exact int32
 *            sum (the frame bounds k so that it cannot overflow, even for -128 inputs).
 *            The reference accumulates p = 0..k-1 in order; other sets may reorder the sum.
 *   y        FP32/BF16 compute: y = acc (+ bias[j]).
 *            INT8 compute:      y = (float)acc * a_scales[i] * w_scales[j] (+ bias[j]), the two
 *                               products evaluated left to right in binary32.
 *   y        = tpu__act_fp32(act, y); act is never TPU_ACT_SOFTMAX (the frame asks for FP32
 *            output without activation and applies softmax to whole rows itself).
 *   store    FP32: y. BF16: tpu__bf16_rne(y). INT8: tpu__requantize(y, out_scale).
 *            INT32 (INT8 compute only, with act NONE and no bias): acc itself.
 * None/relu and the store are elementary operations, so any correct set is bit-identical to the
 * reference there (the tests hold INT8 epilogues to exact equality); vectorized tanh/sigmoid/
 * gelu may differ in the last bits (say so in the set). ISA files are built with -mfma, and GCC
 * would contract a*b + c into one FMA even across two intrinsics (they are plain vector
 * arithmetic to it): engine/CMakeLists.txt builds them with -ffp-contract=off, so a multiply
 * and an add round as written and an FMA is only where a kernel asks for one.
 */
typedef struct tpu__gemm_args {
  size_t m, k, n;
  const void *a;
  const float *a_scales;
  const void *w;
  const float *w_scales;
  const float *bias;
  tpu_act_t act;
  tpu_dtype_t out_dtype;
  float out_scale; /* INT8 output: real value of one output quantum, finite and > 0 */
  void *c;
  size_t ldc; /* elements between the starts of two rows of c */
} tpu__gemm_args_t;

/*
 * The kernels of one compute dtype within a set.
 *
 * packed_size(k, n)  bytes of packed storage for k×n weights; may include padding to whole
 *                    tiles and per-channel extras (e.g. the column sums a u8·s8 VNNI kernel needs
 *                    to correct for shifting signed A into unsigned range). 0 means the size
 *                    overflows size_t (the frame then fails with TPU_EOVERFLOW).
 * pack(k, n, src, sn, sk, dst)
 *                    writes the packed form of weights given in the compute dtype: element
 *                    (output channel j, inner index p) is src[j*sn + p*sk] (in elements; so
 *                    [N][K] data has sn = k, sk = 1 and [K][N] data has sn = 1, sk = n). dst is
 *                    packed_size(k, n) bytes, TPU__KERNEL_ALIGN-aligned, uninitialized: pack
 *                    writes every byte the gemm will read, padding included. Called once per
 *                    tpu_weights_pack; may be slow.
 * ws_size(k)         bytes of per-thread workspace the gemm needs for inner dimension k (e.g. a
 *                    packed panel of A, an AMX accumulator tile spill); NULL means none. The
 *                    frame allocates it at plan creation, TPU__KERNEL_ALIGN-aligned, once per
 *                    compute thread, and never shares one workspace between two threads.
 * gemm(args, m0, m1, n0, n1, ws)
 *                    computes and stores C[i][j] for m0 <= i < m1, n0 <= j < n1 (with
 *                    0 <= m0 < m1 <= m and 0 <= n0 < n1 <= n) following the epilogue contract
 *                    above, touching no other element of C. Several threads call it at once on
 *                    disjoint blocks; blocks start at multiples of (mr, nr) below except where
 *                    they are clipped by m and n, so edge handling is only ever at the end.
 * mr, nr             the register tile (rows of A, columns of C) the gemm is built around; the
 *                    frame splits work into whole tiles where it can. 1, 1 means no preference.
 */
typedef struct tpu__dtype_kernels {
  const char *name; /* micro-kernel name, e.g. "tpu_gemm_f32_ref_1x1" */
  size_t (*packed_size)(size_t k, size_t n);
  void (*pack)(size_t k, size_t n, const void *src, size_t sn, size_t sk, void *dst);
  size_t (*ws_size)(size_t k);
  void (*gemm)(const tpu__gemm_args_t *args, size_t m0, size_t m1, size_t n0, size_t n1,
               void *ws);
  size_t mr, nr;
} tpu__dtype_kernels_t;

/* CPU features a set may require (registry.c tests them, including OS support). */
enum {
  TPU__CPU_AVX2 = 1u << 0,
  TPU__CPU_FMA = 1u << 1,
  TPU__CPU_F16C = 1u << 2,
  TPU__CPU_AVX512F = 1u << 3,
  TPU__CPU_AVX512BW = 1u << 4,
  TPU__CPU_AVX512DQ = 1u << 5,
  TPU__CPU_AVX512VL = 1u << 6,
  TPU__CPU_AVX512VNNI = 1u << 7,
  TPU__CPU_AVX512BF16 = 1u << 8,
  TPU__CPU_AMX_TILE = 1u << 9, /* also means the kernel may use tile data (permission granted) */
  TPU__CPU_AMX_INT8 = 1u << 10,
  TPU__CPU_AMX_BF16 = 1u << 11
};

/*
 * Vector math of a set: the element-wise functions, softmax and the double-precision row sums
 * that the graph's ops and the frame run outside the GEMM. Every function takes any length
 * (n >= 1; tails are masked, never read or written past n) and unaligned pointers.
 *
 * map(f, x, y, n)    y[i] = f(x[i]) for i < n, binary32; y == x (in place) or no overlap. Each
 *                    lane is computed alone, so a value's result never depends on its position
 *                    or neighbours. The epilogue of the same set computes gelu, tanh and sigmoid
 *                    with the same lane function, bit for bit (a fused activation equals the
 *                    unfused op). Accuracy: ref is libm and tpu__act_fp32 (within ~1 ulp); the
 *                    vector sets' maximum error is in engine/kernels/vmath.h (a few ulp,
 *                    measured over every binary32 input by bench/vmath_check) and is held by
 *                    tests/engine/test_vmath.c. NaN in gives NaN out; ±Inf and ±0 give the
 *                    function's limits (sign of zero kept by the odd functions).
 * softmax(x, r, n)   in place, each of r rows of n: e_j = exp(x_j - max), x_j = e_j / Σe in
 *                    double, as tpu__softmax_row (any NaN in a row makes that row NaN). A
 *                    row's result depends on its values and n only, never on r or its place.
 * acc_f64(acc, x, n) acc[i] += (double)x[i]: bit-identical to the scalar loop (one addition per
 *                    element, in the same order for each element).
 * layernorm(...)     one row of LayerNormalization with a contiguous scale and bias (either may
 *                    be NULL): mean and variance summed in double (in another order than the
 *                    scalar kernel: last bits of the double may differ), y = (float)(((double)x
 *                    - mean) * inv * scale + bias) with inv = 1/sqrt(var/n + eps); stores mean
 *                    and inv if the pointers are not NULL.
 */
typedef enum {
  TPU__VF_EXP,
  TPU__VF_TANH,
  TPU__VF_SIGMOID,
  TPU__VF_ERF,
  TPU__VF_GELU,      /* exact: x·Φ(x) */
  TPU__VF_GELU_TANH, /* ONNX Gelu approximate="tanh": ½x(1 + tanh(√(2/π)(x + 0.044715x³))) */
  TPU__VF_COUNT
} tpu__vfn_t;

/* A tree ensemble laid out for level-by-level traversal (engine/graph/ops_tree.c builds it):
 * every tree padded to `depth` levels, node i's children at 2i+1 (taken when the comparison
 * holds, or for NaN when the node's default-left bit is set) and 2i+2; a leaf above the last
 * level fills every slot below it, so any path through the padding ends at its value. */
typedef struct {
  int depth;      /* D >= 1 */
  int leq;        /* 1: x <= thr goes left; 0: x < thr */
  size_t ntrees;
  const int32_t *feat; /* ntrees * (2^D - 1): the feature, bit 31 set when NaN goes left */
  const float *thr;    /* ntrees * (2^D - 1) */
  const float *lval;   /* ntrees * 2^D: the leaf value of each slot */
  const int32_t *target; /* ntrees: the output column every leaf of tree t adds to */
} tpu__tree_perfect_t;

typedef struct tpu__vec_kernels {
  const char *name; /* "tpu_vmath_avx512" */
  void (*map)(tpu__vfn_t f, const float *x, float *y, size_t n);
  void (*softmax)(float *x, size_t rows, size_t n);
  void (*acc_f64)(double *acc, const float *x, size_t n);
  void (*layernorm)(const float *x, size_t n, const float *scale, const float *bias, double eps,
                    float *y, double *mean, double *inv);
  /* Adds, for each of `rows` rows of x (width floats each), every tree's leaf value to its
   * row of acc (nt floats, initialised by the caller) in tree order, so the sums are those of
   * any exact traversal bit for bit. NULL: the portable loop (tpu__tree_perfect_ref). */
  void (*tree_perfect)(const tpu__tree_perfect_t *p, const float *x, size_t width, size_t rows,
                       float *acc, size_t nt);
  /* The GEMM strategy's decisions (engine/graph/tree_gemm.c) for one row: out[j] = 1 when
   * row[feat[j] & 0x7fffffff] < thr[j] (leq: <=), or it is NaN and bit 31 of feat[j] is set;
   * else 0. NULL: the portable loop (tpu__tree_decide_ref). */
  void (*tree_decide)(const int32_t *feat, const float *thr, size_t n, int leq,
                      const float *row, int8_t *out);
  /* One row's symmetric INT8 quantization, bit for bit tpu__quantize_row's (the reference,
   * engine/frame/convert.c): *scale = tpu__quant_scale(max |x|), q = sat_i8(x / scale);
   * TPU_ERANGE (nothing written) for a NaN or ±Inf element. The plans' INT8 prologue. */
  tpu_status_t (*quantize_row)(const float *x, size_t cols, int8_t *q, float *scale);
} tpu__vec_kernels_t;

/* The portable level-by-level traversal (engine/kernels/ref/tree_ref.c). */
void tpu__tree_perfect_ref(const tpu__tree_perfect_t *p, const float *x, size_t width,
                           size_t rows, float *acc, size_t nt);
void tpu__tree_decide_ref(const int32_t *feat, const float *thr, size_t n, int leq,
                          const float *row, int8_t *out);
#ifdef TPU_HAVE_KERNELS_AVX512
/* The same with AVX-512 gathers, 16 trees (or nodes) at a time
 * (engine/kernels/avx512/tree_avx512.c). */
void tpu__tree_perfect_avx512(const tpu__tree_perfect_t *p, const float *x, size_t width,
                              size_t rows, float *acc, size_t nt);
void tpu__tree_decide_avx512(const int32_t *feat, const float *thr, size_t n, int leq,
                             const float *row, int8_t *out);
#endif

/* One kernel set: a name users can force with TPUD_ISA, the CPU features it needs, one entry
 * per compute dtype, indexed by tpu_dtype_t (FP32, BF16, INT8), and its vector math (NULL:
 * inherited like an empty dtype entry). */
typedef struct tpu__kernel_set {
  const char *name; /* "ref", "avx2", "avx512", "amx" */
  uint32_t cpu;     /* TPU__CPU_* mask; 0 for portable C */
  tpu__dtype_kernels_t dt[3];
  const tpu__vec_kernels_t *vec;
} tpu__kernel_set_t;

/* The vector math of each kernel directory (engine/kernels/<isa>/vmath_<isa>.c). */
extern const tpu__vec_kernels_t tpu__vec_ref;
#ifdef TPU_HAVE_KERNELS_AVX2
extern const tpu__vec_kernels_t tpu__vec_avx2;
#endif
#ifdef TPU_HAVE_KERNELS_AVX512
extern const tpu__vec_kernels_t tpu__vec_avx512;
#endif

/* The kernel sets compiled into this build (each defined in engine/kernels/<isa>/). */
extern const tpu__kernel_set_t tpu__kernels_ref;
#ifdef TPU_HAVE_KERNELS_AVX2
extern const tpu__kernel_set_t tpu__kernels_avx2;
#endif
#ifdef TPU_HAVE_KERNELS_AVX512
extern const tpu__kernel_set_t tpu__kernels_avx512;
#endif
#ifdef TPU_HAVE_KERNELS_AMX
extern const tpu__kernel_set_t tpu__kernels_amx;
#endif

/* ---- registry (registry.c) ---- */

/* Picks the kernel set for a new engine. `forced` is a set name ("ref", "avx2", "avx512",
 * "amx") or NULL/"" for the newest set this CPU supports. Returns the resolved set (dtype
 * entries a set leaves empty filled from the sets below it) in *out, which stays valid for the
 * life of the process. TPU_EINVAL for an unknown name, TPU_ENOTSUP for a set that is not
 * compiled in or that this CPU or OS cannot run. */
tpu_status_t tpu__kernels_select(const char *forced, const tpu__kernel_set_t **out);
/* One line for the log: the chosen set, why (forced or best available), and for every compiled
 * set whether this CPU runs it or which features it lacks. Returns the length written. */
size_t tpu__kernels_describe(const tpu__kernel_set_t *chosen, int forced, char *buf, size_t len);
/* The resolved sets this build has and this CPU supports, newest first; returns how many there
 * are (at least 1: ref) and stores up to `max` of them. */
size_t tpu__kernels_available(const tpu__kernel_set_t **out, size_t max);
/* The resolution step, exposed for tests: out[i] is cands[i] (newest first) with each empty
 * dtype entry copied from the nearest following set that a CPU with features `cpu` can run;
 * usable[i] says whether it can run cands[i] itself. */
void tpu__kernels_resolve(const tpu__kernel_set_t *const *cands, size_t n, uint32_t cpu,
                          tpu__kernel_set_t *out, int *usable);
/* TPU__CPU_* features of this CPU that the OS also enabled. */
uint32_t tpu__cpu_features(void);

/* ---- scalar epilogue helpers, shared by every set (they define the reference numerics) ---- */

/* FP32 -> BF16 with round-to-nearest-even; NaN stays NaN (quiet bit set, sign kept). */
static inline uint16_t tpu__bf16_rne(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u); /* carries into the exponent: overflow gives ±Inf */
  return (uint16_t)(u >> 16);
}

static inline float tpu__bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* Round half to even, independent of the floating-point environment's rounding mode. Finite x
 * only; the result is exact (an integer-valued float). */
static inline float tpu__round_half_even(float x) {
  float r = floorf(x), d = x - r; /* both exact */
  if (d > 0.5f || (d == 0.5f && fmodf(r, 2.0f) != 0.0f)) r += 1.0f;
  return r;
}

/* Symmetric INT8 with saturation: clamp(rne(x), -127, 127); NaN gives 0. */
static inline int8_t tpu__sat_i8(float x) {
  if (!(x > -127.0f)) return x != x ? 0 : -127; /* also -Inf */
  if (!(x < 127.0f)) return 127;
  return (int8_t)tpu__round_half_even(x);
}

/* The scale of a row whose largest magnitude is amax (finite): amax / 127, or 1 for a zero
 * row. For subnormal rows amax / 127 may round down (or to 0) so far that amax / s rounds past
 * 127 and the largest element would be clipped: step up to the next representable scale (for
 * normal amax, amax / s is 127 within a few ulps and this is never taken). */
static inline float tpu__quant_scale(float amax) {
  if (amax == 0.0f) return 1.0f;
  float s = amax / 127.0f;
  while (s == 0.0f || amax / s >= 127.5f) s = nextafterf(s, INFINITY);
  return s;
}

/* Quantizes one row (tpu_quantize_rows without the argument checks): the reference
 * (engine/frame/convert.c) every set's quantize_row equals. */
tpu_status_t tpu__quantize_row(const float *x, size_t cols, int8_t *q, float *scale);

/* INT8 output: clamp(rne(y / out_scale), -127, 127). Division, not a reciprocal product, so the
 * result is exactly what the epilogue contract says. */
static inline int8_t tpu__requantize(float y, float out_scale) {
  return tpu__sat_i8(y / out_scale);
}

/* One element of every activation but softmax (act.c). */
float tpu__act_fp32(tpu_act_t act, float x);
/* Numerically stable softmax of one row of n ≥ 1 floats, in place: the reference (act.c). */
void tpu__softmax_row(float *x, size_t n);

#endif /* TPU_KERNELS_H */

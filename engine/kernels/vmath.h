/*
 * vmath.h - the engine's vector math, written once over a small vector interface and compiled
 * once per ISA (engine/kernels/avx512/vec_avx512.h, engine/kernels/avx2/vec_avx2.h include it
 * after defining that interface).
 *
 * DESIGN
 * Every element-wise function is a lane-wise sequence of IEEE operations with explicit FMAs, the
 * same in every ISA, so the avx2 and avx512 sets give the same bits for the same input (the
 * interface's operations are all correctly rounded or exact; vm_ldexp rounds once, like
 * VSCALEFPS). The row functions (softmax, layernorm) sum in double across W/2 lanes, so their
 * last bits may differ between ISAs (never between runs or rows). The polynomials come from
 * tools/vmath_fit.py (minimax relative error, coefficients in binary32).
 *
 *   exp      n = rne(x·log2 e), r = x - n·ln2 in two FMAs (exact high part), e^r = 1 + r +
 *            r²·P5(r), times 2^n with one rounding (so results near underflow round once into
 *            the subnormals). x clamped to [-110, 89]: 0 and +Inf beyond.
 *   tanh     |x| < 0.625: x + x³·P4(x²); else 1 - 2/(e^(2|x|) + 1); sign of x.
 *   sigmoid  e = e^-|x|: 1/(1 + e) for x >= 0, e/(1 + e) below (no overflow, no cancellation).
 *   erf      |x| < 1: x + x·P6(x²); else 1 - e^(-x²)·erfcx(|x|), with x² split into a rounded
 *            part and its FMA residual (e^(-h-l) = e^-h·(1 - l)): without that, x²'s rounding
 *            alone would cost 10s of ulp of erfc near |x| = 4 (and 100s in gelu's tail).
 *   erfcx    erfc(z)·e^(z²) on [0.95, 4] as P7(t)/(z + 3), t = (z - 3)/(z + 3).
 *   gelu     x·Φ(x), Φ(x) = ½erfc(-x/√2): for x/√2 <= -0.5 the tail x·G(|x|)·e^(-x²/2), with
 *            G(a) = ½erfcx(a/√2) = P9(t)/(a + 5), t = (a - 5)/(a + 5), fitted in a itself so
 *            that the rounded x/√2 never enters it, and the exponent split like erf's; the
 *            possibly subnormal factor comes last, so such a result rounds about once. Between
 *            -0.5 and 1, ½(1 + erf(x/√2)); above, 1 - G·e^(-x²/2). Accurate in the negative
 *            tail, where 1 + erf(x/√2) cancels.
 *   gelu_tanh  x·σ(2u) with u = √(2/π)(x + 0.044715x³), σ as above: ½(1 + tanh u) without
 *            the cancellation.
 *
 * Maximum error against the correctly rounded value over every binary32 input, measured by
 * bench/vmath_check on 2026-12-02 (avx512; avx2 gives the same bits), in ulp of the result
 * (subnormal results: in units of the smallest subnormal), and the bound the tests hold:
 *   exp 0.988 (1), tanh 1.330 (1.5), sigmoid 2.402 (2.5), erf 1.264 (1.5), gelu 4.957 (5),
 *   gelu_tanh 3.898 (4; against the formula evaluated exactly).
 * gelu's and gelu_tanh's are chains of five or six correctly rounded steps after the exp.
 *
 * Interface an ISA header defines before including this file (all static inline):
 *   vf, vd, vmask      W binary32 lanes; W/2 binary64 lanes; a lane mask
 *   VM_W               W
 *   vm_set1 vm_add vm_sub vm_mul vm_div vm_fma (a·b + c) vm_fnma (c - a·b) vm_min vm_max
 *   vm_abs vm_copysign(mag, sign) vm_lt vm_le vm_isnan vm_sel(m, a, b) (m ? a : b)
 *   vm_round (to nearest even) vm_ldexp(p, n) (p·2^n rounded once, for n integer-valued in
 *   [-159, 129] and p·2^⌊n/2⌋ normal) vm_loadu vm_storeu vm_loadn(p, cnt, fill) (lanes >= cnt
 *   get fill and are not read) vm_storen(p, v, cnt) (lanes < cnt only) vm_hmax (of NaN-free
 *   lanes); vd_zero vd_set1 vd_add vd_sub vd_mul vd_loadu vd_storeu vd_lo vd_hi (the low and
 *   high W/2 lanes of a vf, widened) vd_narrow(lo, hi) (both rounded to binary32, lo first)
 *   vd_hsum (in a fixed order)
 * vm_min/vm_max return the second operand when either is NaN (x86's MINPS/MAXPS): callers
 * restore NaN where it matters.
 */
#ifndef TPU_VMATH_H
#define TPU_VMATH_H

/* tools/vmath_fit.py */
static const float tpu__vm_exp_p[6] = {0.5f,           0.166666657f,   0.0416662805f,
                                       0.0083335042f,  0.00139457523f, 0.000197892616f};
static const float tpu__vm_tanh_p[5] = {-0.333332807f, 0.133314416f, -0.0537397154f,
                                        0.0206390861f, -0.00570498686f};
static const float tpu__vm_erf_p[7] = {0.128379166f,   -0.37612626f,      0.112835854f,
                                       -0.0268538129f, 0.00518832868f,    -0.000801020069f,
                                       7.85388329e-05f};
static const float tpu__vm_erfcx_p[8] = {1.07400692f,    -0.88339448f,  0.590228379f,
                                         -0.310467213f,  0.119524851f,  -0.0268371832f,
                                         -0.00116605044f, 0.00333759747f};
static const float tpu__vm_gelu_p[10] = {0.769193053f,    -0.665382504f,   0.495305687f,
                                         -0.313533008f,   0.165018752f,    -0.0691206381f,
                                         0.0208085291f,   -0.00297982758f, -0.000843863352f,
                                         0.000501947245f};

/* Horner's rule in FMAs: c[0] + t·(c[1] + t·(...)). */
#define TPU__VM_HORNER(t, c, n)                                                              \
  __extension__({                                                                            \
    vf h_ = vm_set1((c)[(n) - 1]);                                                           \
    for (int i_ = (n) - 2; i_ >= 0; i_--) h_ = vm_fma(h_, (t), vm_set1((c)[i_]));            \
    h_;                                                                                      \
  })

/* e^x = p·2^n with p in [0.7, 1.42] (x clamped to [-110, 89]: low enough that p·2^n times a
 * factor up to 64 still rounds to 0 where e^x·factor does; NaN not handled). */
static inline vf tpu__v_exp_parts(vf x, vf *n) {
  vf xc = vm_min(vm_max(x, vm_set1(-110.0f)), vm_set1(89.0f));
  *n = vm_round(vm_mul(xc, vm_set1(1.44269502f)));
  vf r = vm_fma(*n, vm_set1(-0.693147182f), xc); /* exact: x - n·ln2_hi needs <= 24 bits */
  r = vm_fma(*n, vm_set1(1.90465421e-09f), r);   /* - n·(ln2 - ln2_hi) */
  vf p = vm_fma(vm_mul(r, r), TPU__VM_HORNER(r, tpu__vm_exp_p, 6), r);
  return vm_add(p, vm_set1(1.0f));
}

static inline vf tpu__v_exp(vf x) {
  vf n, p = tpu__v_exp_parts(x, &n);
  return vm_sel(vm_isnan(x), x, vm_ldexp(p, n));
}

/* e^-(h + l) for h >= 0 with |l| tiny against h (the residual of a rounded square), as p·2^n
 * (p·(1 - l): e^-l to first order, exact enough as |l| < 2^-17). */
static inline vf tpu__v_exp_neg2_parts(vf h, vf l, vf *n) {
  vf p = tpu__v_exp_parts(vm_sub(vm_set1(0.0f), h), n);
  return vm_fnma(p, l, p);
}

/* erfc(z)·e^(z²) for z in [0.95, 4] (clamped there): P7(t)/(z + 3), t = (z - 3)/(z + 3), with
 * two divisions (1/(z + 3) times both would cost one more rounding each). */
static inline vf tpu__v_erfcx(vf z) {
  z = vm_min(vm_max(z, vm_set1(0.95f)), vm_set1(4.0f));
  vf d = vm_add(z, vm_set1(3.0f));
  vf t = vm_div(vm_sub(z, vm_set1(3.0f)), d);
  return vm_div(TPU__VM_HORNER(t, tpu__vm_erfcx_p, 8), d);
}

/* hi + lo = a + b exactly (TwoSum: no condition on the magnitudes). */
#define TPU__VM_TWO_SUM(hi, lo, a, b)                                                        \
  do {                                                                                       \
    vf bv_;                                                                                  \
    (hi) = vm_add((a), (b));                                                                 \
    bv_ = vm_sub((hi), (a));                                                                 \
    (lo) = vm_add(vm_sub((a), vm_sub((hi), bv_)), vm_sub((b), bv_));                         \
  } while (0)

/* ½erfcx(a/√2) for a = |x| in [0.7, 14.5] (clamped there): gelu's tail is x·this·e^(-x²/2).
 * P9(t)/(a + 5), t = (a - 5)/(a + 5). a ± 5 are carried exactly (TwoSum) and t and the
 * quotient corrected to first order (1/(a + 5) = (1 - t)/10 is close enough for the
 * corrections): with plain roundings, t's error alone cost up to 2.5 ulp of the result. */
static inline vf tpu__v_gelu_cx(vf a) {
  vf dh, dl, nh, nl;
  a = vm_min(vm_max(a, vm_set1(0.7f)), vm_set1(14.5f));
  TPU__VM_TWO_SUM(dh, dl, a, vm_set1(5.0f));
  TPU__VM_TWO_SUM(nh, nl, a, vm_set1(-5.0f));
  vf q = vm_div(nh, dh);
  vf inv = vm_mul(vm_sub(vm_set1(1.0f), q), vm_set1(0.1f)); /* ≈ 1/dh */
  vf r = vm_fnma(q, dh, nh);                                 /* nh - q·dh, exact */
  vf t = vm_fma(vm_fnma(q, dl, vm_add(r, nl)), inv, q);      /* (nh + nl)/(dh + dl) */
  vf g = vm_div(TPU__VM_HORNER(t, tpu__vm_gelu_p, 10), dh);
  return vm_fnma(g, vm_mul(dl, inv), g);                     /* g·(1 - dl/dh) */
}

/* erf(z) for |z| < 1: z + z·P6(z²) (odd: keeps the sign of z, -0 included). */
static inline vf tpu__v_erf_small(vf z) {
  return vm_fma(z, TPU__VM_HORNER(vm_mul(z, z), tpu__vm_erf_p, 7), z);
}

static inline vf tpu__v_tanh(vf x) {
  vf a = vm_abs(x), a2 = vm_mul(a, a);
  vf small = vm_fma(vm_mul(a2, a), TPU__VM_HORNER(a2, tpu__vm_tanh_p, 5), a);
  vf e = tpu__v_exp(vm_min(vm_add(a, a), vm_set1(20.0f)));
  vf large = vm_sub(vm_set1(1.0f), vm_div(vm_set1(2.0f), vm_add(e, vm_set1(1.0f))));
  vf y = vm_copysign(vm_sel(vm_lt(a, vm_set1(0.625f)), small, large), x);
  return vm_sel(vm_isnan(x), x, y);
}

static inline vf tpu__v_sigmoid(vf x) {
  /* x >= 20: e^-20 no longer changes 1/(1 + e), and a subnormal e would cost an assist */
  vf a = vm_sel(vm_lt(x, vm_set1(0.0f)), vm_abs(x), vm_min(x, vm_set1(20.0f)));
  vf e = tpu__v_exp(vm_sub(vm_set1(0.0f), vm_sel(vm_isnan(x), x, a))); /* NaN stays NaN */
  vf num = vm_sel(vm_lt(x, vm_set1(0.0f)), e, vm_set1(1.0f));
  return vm_div(num, vm_add(vm_set1(1.0f), e));
}

static inline vf tpu__v_erf(vf x) {
  vf a = vm_abs(x), z = vm_min(a, vm_set1(4.0f)); /* erf = 1 in binary32 from 3.92 on */
  vf h = vm_mul(z, z), l = vm_fma(z, z, vm_sub(vm_set1(0.0f), h));
  vf n, e = tpu__v_exp_neg2_parts(h, l, &n);
  vf erfc = vm_ldexp(vm_mul(e, tpu__v_erfcx(z)), n); /* >= 1.5e-8: never subnormal */
  vf large = vm_sub(vm_set1(1.0f), erfc);
  vf y = vm_copysign(vm_sel(vm_lt(a, vm_set1(1.0f)), tpu__v_erf_small(a), large), x);
  return vm_sel(vm_isnan(x), x, y);
}

static inline vf tpu__v_gelu(vf x) {
  const vf half = vm_set1(0.5f);
  vf z = vm_mul(x, vm_set1(0.707106769f)); /* x/√2, for the branch and erf's polynomial */
  /* beyond 14.5 the tail is 0 in binary32; above 6, 1 - ½erfc is 1 (and a smaller bound keeps
   * e^(-x²/2) normal there: subnormals cost an assist per instruction on many CPUs) */
  vf a = vm_min(vm_abs(x), vm_sel(vm_lt(x, vm_set1(0.0f)), vm_set1(14.5f), vm_set1(6.0f)));
  vf h = vm_mul(a, a), l = vm_fma(a, a, vm_sub(vm_set1(0.0f), h));
  vf n, e = tpu__v_exp_neg2_parts(vm_mul(h, half), vm_mul(l, half), &n); /* e^(-x²/2) = e·2^n */
  vf cx = tpu__v_gelu_cx(a);                                             /* ½erfcx(|x|/√2) */
  /* z <= -0.5: x·½erfcx·e, then 2^n with the one rounding (into the subnormals for x below
   * about -13); x clamped so that -Inf gives -0, not -Inf·0. */
  vf tail = vm_ldexp(vm_mul(vm_mul(vm_max(x, vm_set1(-14.5f)), cx), e), n);
  vf mid = vm_fma(tpu__v_erf_small(z), half, half);               /* ½(1 + erf z) */
  vf upper = vm_sub(vm_set1(1.0f), vm_ldexp(vm_mul(e, cx), n));   /* 1 - ½erfc z */
  vf phi = vm_sel(vm_lt(z, vm_set1(1.0f)), mid, upper);
  vf y = vm_sel(vm_le(z, vm_set1(-0.5f)), tail, vm_mul(x, phi));
  return vm_sel(vm_isnan(x), x, y);
}

/* hi + lo = a·b exactly (for a·b that neither overflows nor underflows). */
#define TPU__VM_TWO_PROD(hi, lo, a, b)                                                       \
  do {                                                                                       \
    (hi) = vm_mul((a), (b));                                                                 \
    (lo) = vm_fma((a), (b), vm_sub(vm_set1(0.0f), (hi)));                                    \
  } while (0)

/* x·σ(v) with v = 2u = 2√(2/π)(x + 0.044715x³), as the sigmoid above (e = e^-|v|: x/(1 + e)
 * for v >= 0, x·e/(1 + e) below). v is carried as hi + lo (products split by FMA, the sum by
 * TwoSum, the constants in two parts): where the result is small, e^-|v| magnifies v's
 * relative error by |v| (about 90 near x = -10), which a plain binary32 v would make 100s of
 * ulp. */
static inline vf tpu__v_gelu_tanh(vf x) {
  vf x2h, x2l, x3h, x3l, ph, pl, vh, vl;
  vf xc = vm_min(vm_max(x, vm_set1(-30.0f)), vm_set1(30.0f)); /* beyond: the limits, no Inf */
  TPU__VM_TWO_PROD(x2h, x2l, xc, xc);
  TPU__VM_TWO_PROD(x3h, x3l, x2h, xc);
  x3l = vm_fma(x2l, xc, x3l);
  const vf ch = vm_set1(0.0447149985f), cl = vm_set1(1.54614443e-09f); /* 0.044715 */
  TPU__VM_TWO_PROD(ph, pl, ch, x3h);
  pl = vm_fma(ch, x3l, vm_fma(cl, x3h, pl));
  vf sh = vm_add(xc, ph), bv = vm_sub(sh, xc); /* TwoSum(x, ph) */
  vf sl = vm_add(vm_sub(xc, vm_sub(sh, bv)), vm_sub(ph, bv));
  sl = vm_add(sl, pl);
  const vf kh = vm_set1(1.59576917f), kl = vm_set1(-4.53406805e-08f); /* 2√(2/π) */
  TPU__VM_TWO_PROD(vh, vl, kh, sh);
  vl = vm_fma(kh, sl, vm_fma(kl, sh, vl));
  vmask neg = vm_lt(vh, vm_set1(0.0f));
  vf av = vm_sel(neg, vm_abs(vh), vm_min(vh, vm_set1(20.0f))); /* as in the sigmoid */
  vf n, p = tpu__v_exp_parts(vm_sub(vm_set1(0.0f), av), &n);
  p = vm_fnma(p, vm_sel(neg, vm_sub(vm_set1(0.0f), vl), vl), p); /* e^-(|vh| + sign(vh)·vl) */
  vf e = vm_ldexp(p, n);
  vf d = vm_add(vm_set1(1.0f), e);
  /* v < 0: x·p/(1 + e), then 2^n with the one rounding (the result may be subnormal) */
  vf y = vm_sel(neg, vm_ldexp(vm_div(vm_mul(xc, p), d), n), vm_div(x, d));
  return vm_sel(vm_isnan(x), x, y);
}

static inline vf tpu__v_act(tpu_act_t act, vf y) {
  switch (act) {
  case TPU_ACT_GELU: return tpu__v_gelu(y);
  case TPU_ACT_TANH: return tpu__v_tanh(y);
  case TPU_ACT_SIGMOID: return tpu__v_sigmoid(y);
  case TPU_ACT_RELU: return vm_sel(vm_lt(y, vm_set1(0.0f)), vm_set1(0.0f), y);
  default: return y; /* NONE; SOFTMAX is applied to whole rows by the frame */
  }
}

static inline vf tpu__v_fn(tpu__vfn_t f, vf x) {
  switch (f) {
  case TPU__VF_EXP: return tpu__v_exp(x);
  case TPU__VF_TANH: return tpu__v_tanh(x);
  case TPU__VF_SIGMOID: return tpu__v_sigmoid(x);
  case TPU__VF_ERF: return tpu__v_erf(x);
  case TPU__VF_GELU: return tpu__v_gelu(x);
  case TPU__VF_GELU_TANH: return tpu__v_gelu_tanh(x);
  case TPU__VF_COUNT: break;
  }
  return x;
}

/*
 * The out-of-line table of one ISA: a kernel directory's vmath_<isa>.c defines
 * TPU_VMATH_TABLE as the table's name and TPU_VMATH_NAME as its string, then includes this file
 * again with TPU_VMATH_DEFINE_TABLE.
 */
#endif /* TPU_VMATH_H */

#ifdef TPU_VMATH_DEFINE_TABLE
#undef TPU_VMATH_DEFINE_TABLE

/* One function per loop, so each loop is the lane function inlined with no switch inside. */
#define TPU__VM_MAP(NAME, FN)                                                                \
  static void NAME(const float *x, float *y, size_t n) {                                     \
    size_t i = 0;                                                                            \
    for (; i + VM_W <= n; i += VM_W) vm_storeu(y + i, FN(vm_loadu(x + i)));                  \
    if (i < n) vm_storen(y + i, FN(vm_loadn(x + i, n - i, 0.0f)), n - i);                    \
  }
TPU__VM_MAP(vmap_exp, tpu__v_exp)
TPU__VM_MAP(vmap_tanh, tpu__v_tanh)
TPU__VM_MAP(vmap_sigmoid, tpu__v_sigmoid)
TPU__VM_MAP(vmap_erf, tpu__v_erf)
TPU__VM_MAP(vmap_gelu, tpu__v_gelu)
TPU__VM_MAP(vmap_gelu_tanh, tpu__v_gelu_tanh)

static void vmap(tpu__vfn_t f, const float *x, float *y, size_t n) {
  switch (f) {
  case TPU__VF_EXP: vmap_exp(x, y, n); break;
  case TPU__VF_TANH: vmap_tanh(x, y, n); break;
  case TPU__VF_SIGMOID: vmap_sigmoid(x, y, n); break;
  case TPU__VF_ERF: vmap_erf(x, y, n); break;
  case TPU__VF_GELU: vmap_gelu(x, y, n); break;
  case TPU__VF_GELU_TANH: vmap_gelu_tanh(x, y, n); break;
  case TPU__VF_COUNT: break;
  }
}

/* Σ of W floats widened to double, added into two accumulators. */
static inline void vd_acc(vd *lo, vd *hi, vf v) {
  *lo = vd_add(*lo, vd_lo(v));
  *hi = vd_add(*hi, vd_hi(v));
}

static void vsoftmax_row(float *x, size_t n) {
  size_t i = 0;
  vf mx = vm_set1(-__builtin_inff());
  /* The reference keeps x[0] unless something compares above it, so NaNs elsewhere are
   * skipped there as here (vm_max keeps the running maximum when a lane is NaN); they make
   * the sum NaN below either way. */
  for (; i + VM_W <= n; i += VM_W) mx = vm_max(vm_loadu(x + i), mx);
  if (i < n) mx = vm_max(vm_loadn(x + i, n - i, -__builtin_inff()), mx);
  float m = vm_hmax(mx);
  if (x[0] != x[0]) m = x[0];
  vf vmx = vm_set1(m);
  vd s0 = vd_zero(), s1 = vd_zero();
  for (i = 0; i + VM_W <= n; i += VM_W) {
    vf e = tpu__v_exp(vm_sub(vm_loadu(x + i), vmx));
    vm_storeu(x + i, e);
    vd_acc(&s0, &s1, e);
  }
  if (i < n) {
    /* Lanes past n get the maximum (e^0 = 1, then dropped): e^-Inf there would be an
     * underflow, which costs a microcode assist per instruction on many CPUs. */
    vf e = tpu__v_exp(vm_sub(vm_loadn(x + i, n - i, m), vmx));
    vm_storen(x + i, e, n - i);
    vd_acc(&s0, &s1, vm_sel(vm_maskn(n - i), e, vm_set1(0.0f)));
  }
  vd inv = vd_set1(1.0 / vd_hsum(vd_add(s0, s1)));
  for (i = 0; i + VM_W <= n; i += VM_W) {
    vf e = vm_loadu(x + i);
    vm_storeu(x + i, vd_narrow(vd_mul(vd_lo(e), inv), vd_mul(vd_hi(e), inv)));
  }
  if (i < n) {
    vf e = vm_loadn(x + i, n - i, 0.0f);
    vm_storen(x + i, vd_narrow(vd_mul(vd_lo(e), inv), vd_mul(vd_hi(e), inv)), n - i);
  }
}

/* Rows of n <= TPU__VM_SMALL elements, W rows at a time, one row per lane (the lanes of
 * the last group masked): each row's max, exps, sum (in double, in element order) and
 * quotients are lane operations, so a row's result does not depend on which group or lane it
 * falls in. One vector per row would leave most lanes idle and pay the reductions per row. */
#define TPU__VM_SMALL 8
static void vsoftmax_small(float *x, size_t rows, size_t n) {
  for (size_t r = 0; r < rows; r += VM_W) {
    size_t cnt = rows - r < VM_W ? rows - r : VM_W;
    float *base = x + r * n;
    vf v[TPU__VM_SMALL];
    for (size_t j = 0; j < n; j++) v[j] = vm_gather(base + j, n, cnt);
    vf mx = v[0];
    for (size_t j = 1; j < n; j++) mx = vm_max(v[j], mx);
    mx = vm_sel(vm_isnan(v[0]), v[0], mx); /* as the reference: x[0] NaN makes the max NaN */
    vd s0 = vd_zero(), s1 = vd_zero();
    for (size_t j = 0; j < n; j++) {
      v[j] = tpu__v_exp(vm_sub(v[j], mx));
      vd_acc(&s0, &s1, v[j]);
    }
    vd i0 = vd_div(vd_set1(1.0), s0), i1 = vd_div(vd_set1(1.0), s1);
    for (size_t j = 0; j < n; j++)
      vm_scatter(base + j, n, vd_narrow(vd_mul(vd_lo(v[j]), i0), vd_mul(vd_hi(v[j]), i1)), cnt);
  }
}

static void vsoftmax(float *x, size_t rows, size_t n) {
  if (n <= TPU__VM_SMALL) {
    vsoftmax_small(x, rows, n);
    return;
  }
  for (size_t r = 0; r < rows; r++) vsoftmax_row(x + r * n, n);
}

static void vacc_f64(double *acc, const float *x, size_t n) {
  size_t i = 0;
  for (; i + VM_W <= n; i += VM_W) {
    vf v = vm_loadu(x + i);
    vd_storeu(acc + i, vd_add(vd_loadu(acc + i), vd_lo(v)));
    vd_storeu(acc + i + VM_W / 2, vd_add(vd_loadu(acc + i + VM_W / 2), vd_hi(v)));
  }
  for (; i < n; i++) acc[i] += (double)x[i]; /* one exact-order addition: the same bits */
}

static void vlayernorm(const float *x, size_t n, const float *scale, const float *bias,
                       double eps, float *y, double *mean_out, double *inv_out) {
  size_t i = 0;
  vd s0 = vd_zero(), s1 = vd_zero();
  for (; i + VM_W <= n; i += VM_W) vd_acc(&s0, &s1, vm_loadu(x + i));
  double sum = vd_hsum(vd_add(s0, s1));
  for (; i < n; i++) sum += (double)x[i];
  double mean = sum / (double)n;
  vd vmean = vd_set1(mean);
  s0 = vd_zero(), s1 = vd_zero();
  for (i = 0; i + VM_W <= n; i += VM_W) {
    vf v = vm_loadu(x + i);
    vd d0 = vd_sub(vd_lo(v), vmean), d1 = vd_sub(vd_hi(v), vmean);
    s0 = vd_add(s0, vd_mul(d0, d0));
    s1 = vd_add(s1, vd_mul(d1, d1));
  }
  double var = vd_hsum(vd_add(s0, s1));
  for (; i < n; i++) {
    double d = (double)x[i] - mean;
    var += d * d;
  }
  double inv = 1.0 / __builtin_sqrt(var / (double)n + eps);
  vd vinv = vd_set1(inv);
  for (i = 0; i < n; i += VM_W) {
    size_t cnt = n - i < VM_W ? n - i : VM_W;
    vf v = vm_loadn(x + i, cnt, 0.0f);
    vd lo = vd_mul(vd_sub(vd_lo(v), vmean), vinv), hi = vd_mul(vd_sub(vd_hi(v), vmean), vinv);
    if (scale) {
      vf sc = vm_loadn(scale + i, cnt, 0.0f);
      lo = vd_mul(lo, vd_lo(sc)), hi = vd_mul(hi, vd_hi(sc));
    }
    if (bias) {
      vf b = vm_loadn(bias + i, cnt, 0.0f);
      lo = vd_add(lo, vd_lo(b)), hi = vd_add(hi, vd_hi(b));
    }
    vm_storen(y + i, vd_narrow(lo, hi), cnt);
  }
  if (mean_out) *mean_out = mean;
  if (inv_out) *inv_out = inv;
}

/* tpu__quantize_row, a vector at a time: the largest magnitude (with a flag for NaN and ±Inf,
 * which max alone would drop), the same scale, then x / s rounded half to even and clamped.
 * Division, RNE and the clamp are exact, so every element is the reference's. */
static tpu_status_t vquantize_row(const float *x, size_t cols, int8_t *q, float *scale) {
  const vf zero = vm_set1(0.0f), one = vm_set1(1.0f), big = vm_set1(3.40282347e38f);
  vf amax = zero, bad = zero;
  for (size_t c = 0; c < cols; c += VM_W) {
    vf a = vm_abs(c + VM_W <= cols ? vm_loadu(x + c) : vm_loadn(x + c, cols - c, 0.0f));
    vmask fin = vm_le(a, big); /* false for NaN and ±Inf */
    amax = vm_max(amax, vm_sel(fin, a, zero));
    bad = vm_max(bad, vm_sel(fin, zero, one));
  }
  if (vm_hmax(bad) > 0.0f) return TPU_ERANGE;
  float s = tpu__quant_scale(vm_hmax(amax));
  const vf sv = vm_set1(s), lo = vm_set1(-127.0f), hi = vm_set1(127.0f);
  for (size_t c = 0; c < cols; c += VM_W) {
    size_t n = cols - c < VM_W ? cols - c : VM_W;
    vf v = n == VM_W ? vm_loadu(x + c) : vm_loadn(x + c, n, 0.0f);
    vm_store_i8n(q + c, vm_min(vm_max(vm_round(vm_div(v, sv)), lo), hi), n);
  }
  *scale = s;
  return TPU_OK;
}

const tpu__vec_kernels_t TPU_VMATH_TABLE = {
    .name = TPU_VMATH_NAME,
    .map = vmap,
    .softmax = vsoftmax,
    .acc_f64 = vacc_f64,
    .layernorm = vlayernorm,
#ifdef TPU_VMATH_TREE
    .tree_perfect = TPU_VMATH_TREE,
#endif
#ifdef TPU_VMATH_TREE_DECIDE
    .tree_decide = TPU_VMATH_TREE_DECIDE,
#endif
    .quantize_row = vquantize_row,
};
#endif /* TPU_VMATH_DEFINE_TABLE */

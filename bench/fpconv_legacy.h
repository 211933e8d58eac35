/*
 * fpconv_legacy.h - the float text conversions tpud used before proto/tpu_fpconv.c, kept as
 * the reference for fpconv_check and fpconv_bench (never linked into tpud).
 */
#ifndef FPCONV_LEGACY_H
#define FPCONV_LEGACY_H

#include <stddef.h>

/* Finite v as the old sb_float/sb_double wrote it into tmp (32/40 bytes); returns the length. */
size_t fpconv_legacy_f32_format(char *tmp, float v);
size_t fpconv_legacy_f64_format(char *tmp, double v);
/* The old JSON fast path's conversion of a non-integer number token s[0..n) to a double. */
int fpconv_legacy_parse(const char *s, size_t n, double *dv);

#endif

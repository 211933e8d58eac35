/*
 * vmath_avx2.c - the vector math table of the avx2 set: the functions of engine/kernels/vmath.h
 * over engine/kernels/avx2/vec_avx2.h.
 */
#include "vec_avx2.h"

#define TPU_VMATH_TABLE tpu__vec_avx2
#define TPU_VMATH_NAME "tpu_vmath_avx2_8"
#define TPU_VMATH_DEFINE_TABLE
#include "../vmath.h"

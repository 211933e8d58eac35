/*
 * vmath_avx512.c - the vector math table of the avx512 set (the amx set shares it): the
 * functions of engine/kernels/vmath.h over engine/kernels/avx512/vec_avx512.h.
 */
#include "vec_avx512.h"

#define TPU_VMATH_TABLE tpu__vec_avx512
#define TPU_VMATH_NAME "tpu_vmath_avx512_16"
#define TPU_VMATH_DEFINE_TABLE
#include "tpu_kernels.h"
#define TPU_VMATH_TREE tpu__tree_perfect_avx512 /* tree_avx512.c */
#define TPU_VMATH_TREE_DECIDE tpu__tree_decide_avx512
#include "../vmath.h"

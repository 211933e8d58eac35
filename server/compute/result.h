/*
 * result.h - the check every computed result passes before it is answered.
 *
 * DESIGN
 * Compute threads (the MatMul pool, and dispatch for an infer's output) produce FP32 results that
 * JSON cannot carry and a client must never mistake for a score when they hold NaN or infinity.
 * The check reads bits, not floats, so it neither traps nor slows on denormals. It lives in
 * compute/ because the MatMul pool calls it; dispatch/validate.h includes this header for its
 * callers there.
 */
#ifndef TPU_RESULT_H
#define TPU_RESULT_H

#include <stddef.h>

/* A computed FP32 result of rows × cols values that must be finite (JSON cannot carry NaN or
 * infinity, and a NaN score must never pass for one): 0, or -1 with msg "<what> element [r,c]
 * is NaN: <why>" for the first that is not (infer: the model's output; MatMul: C). y may be NULL
 * (nothing to check: 0). */
int tpu_validate_result(const float *y, size_t rows, size_t cols, const char *what,
                        const char *why, char *msg, size_t msglen);

/* The same over `rows` rows of `cols` FP32 values each, row r's at base + r·stride + offset
 * bytes (one output inside packed rows of several). */
int tpu_validate_result_rows(const void *base, size_t rows, size_t stride, size_t offset,
                             size_t cols, const char *what, const char *why, char *msg,
                             size_t msglen);

/* The same for an output of OIP datatype `datatype`: FP32, FP64, FP16 and BF16 are checked
 * (by their bits), other datatypes are always finite. */
int tpu_validate_result_typed(const void *base, size_t rows, size_t stride, size_t offset,
                              size_t cols, const char *datatype, const char *what,
                              const char *why, char *msg, size_t msglen);

#endif /* TPU_RESULT_H */

/*
 * ops_matmul.c - kernels of the graph's matmul ops (see exec_internal.h for the contract).
 */
#include "exec_internal.h"

const tpu__kernel_t tpu__kernels_matmul[] = {
    {NULL, NULL, NULL},
};

/*
 * ops_tensor.c - kernels of the graph's tensor ops (see exec_internal.h for the contract).
 */
#include "exec_internal.h"

const tpu__kernel_t tpu__kernels_tensor[] = {
    {NULL, NULL, NULL},
};

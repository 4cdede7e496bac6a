/* Element types and predefined operations of reductions, and the kernel
 * that combines one buffer into another. */
#ifndef PMC_REDUCE_OPS_H
#define PMC_REDUCE_OPS_H

#include <stdint.h>

/* acc[i] = acc[i] op in[i] for n elements; dtype and op are PMC_DT_* and
 * PMC_OP_* codes already checked with pmc_op_valid. */
void pmc_reduce_into(void *acc, const void *in, uint64_t n, int dtype, int op);

#endif

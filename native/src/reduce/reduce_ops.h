/* Element types and predefined operations of reductions, and the kernels
 * that combine buffers. */
#ifndef PMC_REDUCE_OPS_H
#define PMC_REDUCE_OPS_H

#include <stdint.h>

/* acc[i] = acc[i] op in[i] for n elements; dtype and op are PMC_DT_* and
 * PMC_OP_* codes already checked with pmc_op_valid. */
void pmc_reduce_into(void *acc, const void *in, uint64_t n, int dtype, int op);

/* out[i] = lhs[i] op rhs[i]: the first two inputs of a reduction combined in
 * one pass, instead of a copy of lhs and a second pass over it. out may be
 * lhs itself (pmc_reduce_into), but must overlap no input otherwise. */
void pmc_reduce_to(void *out, const void *lhs, const void *rhs, uint64_t n, int dtype, int op);

/* out = in_0 op in_1 op ... op in_{k-1} (k >= 1 inputs of n elements, input
 * i at first + i * stride bytes, except input `own` at `own_at` when own is
 * in [0, k): a rank's own input read where it lies instead of from a copy),
 * combined in that order in k - 1 passes; out must overlap no input. */
void pmc_reduce_strided(void *out, const void *first, uint64_t stride, int k, int own, const void *own_at, uint64_t n,
                        int dtype, int op);

/* out[i] = lhs[i] op rhs[i] for binary16 (brain 0) or bfloat16 (brain 1)
 * elements, combined in float and rounded back to nearest even; op is SUM,
 * PROD, MIN or MAX; out is lhs or overlaps neither input. Eight elements at
 * a time where the CPU allows (pmc_reduce_half_vector_available), else
 * pmc_reduce_half_portable, which gives the same bits. */
void pmc_reduce_half(uint16_t *out, const uint16_t *lhs, const uint16_t *rhs, uint64_t n, int op, int brain);
void pmc_reduce_half_portable(uint16_t *out, const uint16_t *lhs, const uint16_t *rhs, uint64_t n, int op, int brain);
int pmc_reduce_half_vector_available(void);

#endif

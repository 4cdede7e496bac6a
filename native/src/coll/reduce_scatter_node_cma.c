/* Reduce-scatter within a node by single copy: every rank exposes its input
 * and reduces its own block straight from the others' inputs, chunk by
 * chunk through a small buffer, in rank order. One exposure step and no
 * synchronisation per chunk: once the inputs are exposed each rank's work
 * is its own, so ranks that share cores do not wait on each other's time
 * slices step after step as they do through the cells. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_reduce_scatter_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                                const uint64_t *counts, int dtype, int rop)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    uint64_t lo, hi, total;
    pmc_block_bounds(counts, block, L, me, &lo, &hi, &total);
    /* The result waits aside while writing it would change the exposed input the others still
     * read: in place (recv == send), or a slice of its own input (Allreduce in place). */
    const uintptr_t in_at = (uintptr_t)send, out_at = (uintptr_t)recv;
    const int in_place = hi > lo && out_at < in_at + total * esize && in_at < out_at + (hi - lo) * esize;
    /* The call's own result, not a step of an Allreduce whose slices the others read next. */
    const int final = op->a.coll == PMC_COLL_REDUCE_SCATTER || op->a.coll == PMC_COLL_REDUCE_SCATTER_BLOCK;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, total * esize));
    /* In place the result waits aside: the others read this rank's input
     * from recv until they are done. */
    f->p = pmc_scratch(c, (size_t)(PMC_CMA_REDUCE_CHUNK + (in_place ? (hi - lo) * esize : 0)));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, n->others, L - 1, f->aux));
    {
        unsigned char *tmp = f->p;
        int rc = pmc_cma_reduce_from(op, f->aux, L, send, lo, hi, in_place ? tmp + PMC_CMA_REDUCE_CHUNK : recv, tmp,
                                     dtype, rop, !in_place && final && (hi - lo) * esize >= n->stream_min);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    if (in_place && hi > lo)
        pmc_bulk_copy(recv, (unsigned char *)f->p + PMC_CMA_REDUCE_CHUNK, (hi - lo) * esize,
                      final ? n->stream_min : UINT64_MAX);
    n->step = f->aux;
    PMC_CO_END(f);
}

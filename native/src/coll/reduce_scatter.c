/* Reduce_scatter_block and Reduce_scatter: algorithm choice. Across nodes:
 * the whole vector is allreduced hierarchically and each rank keeps its
 * block (a simple composition until the lane reduce-scatter takes over). */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* Offset and length (elements) of this rank's block. */
static void my_block(const pmc_op *op, uint64_t *lo, uint64_t *len, uint64_t *total)
{
    const pmc_args *a = &op->a;
    const int rank = op->c->rank, size = op->c->size;
    if (a->recvcounts == NULL) {
        *lo = (uint64_t)rank * a->count;
        *len = a->count;
        *total = (uint64_t)size * a->count;
        return;
    }
    *lo = *total = 0;
    for (int i = 0; i < size; ++i) {
        if (i == rank) *lo = *total;
        *total += a->recvcounts[i];
    }
    *len = a->recvcounts[rank];
}

static int reduce_scatter_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const void *send = a->in_place ? a->recvbuf : a->sendbuf;
    const uint64_t esize = (uint64_t)pmc_dtype_size(a->dtype);
    uint64_t lo, len, total;
    my_block(op, &lo, &len, &total);
    PMC_CO_BEGIN(f);
    if (total == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (c->size == 1) {
        pmc_took(c, PMC_TRACE_ALGO_SELF);
        if (send != a->recvbuf) memmove(a->recvbuf, send, total * esize);
    } else if (pmc_use_mpi(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_reduce_mpi_gather(op, f + 1, send, a->recvbuf));
    } else if (c->nnodes == 1 && a->recvcounts == NULL &&
               pmc_node_path(c, a->coll, total * esize, 1, 0) == PMC_PATH_INLINE) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_inline(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, -1,
                                            PMC_INLINE_RSCATTER));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, total * esize / (uint64_t)c->size, 0, 1) == PMC_PATH_CMA) {
        /* The mean block decides: every rank knows it. */
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_scatter_node_cma(op, f + 1, send, a->recvbuf, a->count, a->recvcounts, a->dtype,
                                                 a->op));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_scatter_node_slices(op, f + 1, send, a->recvbuf, a->count, a->recvcounts, a->dtype,
                                                    a->op));
    } else {
        f->p = pmc_scratch_outer(c, (size_t)(total * esize));
        if (f->p == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", c->node_ctx.coll);
        }
        pmc_took(c, pmc_use_lanes(c, a->coll) ? PMC_TRACE_ALGO_LANES : PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_allreduce_across(op, f + 1, send, f->p, total, a->dtype, a->op));
        if (len > 0) memcpy(a->recvbuf, (unsigned char *)f->p + lo * esize, len * esize);
    }
    PMC_CO_END(f);
}

int pmc_reduce_scatter_block_run(pmc_op *op) { return reduce_scatter_run(op); }
int pmc_reduce_scatter_run(pmc_op *op) { return reduce_scatter_run(op); }

/* Allreduce within a node by single copy: every rank exposes its input and
 * reduces its own slice straight from the others' inputs (chunk by chunk
 * through a small buffer, in rank order, so every rank's result has the
 * same bits) into place in its receive buffer, then every rank reads the
 * others' result slices from their receive buffers. Each input byte is read
 * once and each result byte written once per reader, and nothing passes
 * through the cells: where the cores hand cache lines to each other slowly
 * (they share no cache), the cells' two copies per byte cost far more than
 * the kernel's one (perf/studies/large_and_back_to_back.md). Reduce has its
 * own single-copy algorithm (reduce_node_cma.c). */
#include "../comm.h"
#include "node_algos.h"

/* Per local rank, from f->p: the slices' element counts (for the reduction),
 * then their byte counts and byte displacements (for the gather). */
static uint64_t *slice_tables(void *scratch, int L, int table)
{
    return (uint64_t *)scratch + (size_t)table * (size_t)L;
}

int pmc_allreduce_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    uint64_t lo, hi;
    pmc_slice_of(count, L, me, &lo, &hi);
    /* The slice's result goes straight into place (in place too: the
     * reduce-scatter keeps it aside until the others have read the input). */
    unsigned char *slice = (unsigned char *)recv + lo * esize;
    PMC_CO_BEGIN(f);
    /* The outer scratch: the reduce-scatter and the gather use the inner one. */
    f->p = pmc_scratch_outer(c, (size_t)3 * (size_t)L * sizeof(uint64_t));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    for (int i = 0; i < L; ++i) {
        uint64_t a, b;
        pmc_slice_of(count, L, i, &a, &b);
        slice_tables(f->p, L, 0)[i] = b - a;
        slice_tables(f->p, L, 1)[i] = (b - a) * esize;
        slice_tables(f->p, L, 2)[i] = a * esize;
    }
    PMC_AWAIT(f, pmc_reduce_scatter_node_cma(op, f + 1, send, slice, 0, slice_tables(f->p, L, 0), dtype, rop));
    PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, slice, recv, 0, slice_tables(f->p, L, 1), slice_tables(f->p, L, 2), -1));
    PMC_CO_END(f);
}

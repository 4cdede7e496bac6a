/* Allreduce and Reduce within a node by single copy: every rank exposes its
 * input and reduces its own slice straight from the others' inputs (chunk by
 * chunk through a small buffer, in rank order, so every rank's result has
 * the same bits), then the slices are gathered by single copy: every rank
 * reads the others' result slices from their receive buffers (Allreduce), or
 * every rank stores its slice into the root's (Reduce). Each input byte is
 * read once and each result byte written once per reader, and nothing
 * passes through the cells: where the cores hand cache lines to each other
 * slowly (they share no cache), the cells' two copies per byte cost far more
 * than the kernel's one (perf/studies/large_and_back_to_back.md). */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

/* Elements of local rank i's slice of `count`: the first count % L slices
 * hold one more. */
static void slice_of(uint64_t count, int L, int i, uint64_t *lo, uint64_t *hi)
{
    const uint64_t per = count / (uint64_t)L, extra = count % (uint64_t)L, r = (uint64_t)i;
    *lo = r * per + (r < extra ? r : extra);
    *hi = *lo + per + (r < extra ? 1 : 0);
}

/* The gather's byte counts (L) and displacements (L) after the chunk buffer
 * and, when the slice waits aside, the slice (8-byte aligned). */
static size_t table_offset(size_t slice_aside)
{
    return ((size_t)PMC_CMA_REDUCE_CHUNK + slice_aside + 7) & ~(size_t)7;
}

static uint64_t *gather_table(void *scratch, size_t slice_aside)
{
    return (uint64_t *)(void *)((unsigned char *)scratch + table_offset(slice_aside));
}

int pmc_allreduce_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                           int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    uint64_t lo, hi;
    slice_of(count, L, me, &lo, &hi);
    /* The slice's result goes straight into place where this rank keeps the
     * result and its input is elsewhere; else it waits aside (the others read
     * this rank's input until all acknowledge, and a rank that only sends
     * has no receive buffer). */
    const int keeps = root < 0 || root == me;
    const int aside = !keeps || send == recv;
    const size_t slice_aside = aside ? (size_t)((hi - lo) * esize) : 0;
    unsigned char *in_place_slice = keeps ? (unsigned char *)recv + lo * esize : NULL;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, count * esize));
    f->p = pmc_scratch(c, table_offset(slice_aside) + 2 * (size_t)L * sizeof(uint64_t));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, n->others, L - 1, f->aux));
    {
        unsigned char *out = aside ? (unsigned char *)f->p + PMC_CMA_REDUCE_CHUNK : in_place_slice;
        int rc = pmc_cma_reduce_from(op, f->aux, L, send, lo, hi, out, f->p, dtype, rop);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    /* The inputs stay exposed until every rank has read its slice of them. */
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    n->step = f->aux;
    {
        uint64_t *table = gather_table(f->p, slice_aside);
        for (int i = 0; i < L; ++i) {
            uint64_t a, b;
            slice_of(count, L, i, &a, &b);
            table[i] = (b - a) * esize;
            table[L + i] = a * esize;
        }
        /* In place, this rank's slice of the result lands where its input was. */
        if (keeps && aside && hi > lo) memcpy(in_place_slice, (unsigned char *)f->p + PMC_CMA_REDUCE_CHUNK, slice_aside);
    }
    PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, keeps ? in_place_slice : (unsigned char *)f->p + PMC_CMA_REDUCE_CHUNK,
                                     recv, 0, gather_table(f->p, slice_aside), gather_table(f->p, slice_aside) + L,
                                     root));
    PMC_CO_END(f);
}

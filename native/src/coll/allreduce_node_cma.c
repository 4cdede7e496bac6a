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

/* Per local rank, from f->p: the slices' element counts (for the reduction),
 * then their byte counts and byte displacements (for the gather); after them
 * (tables_bytes) the slice of a rank that sends its result to a Reduce's root. */
static uint64_t *slice_tables(void *scratch, int L, int table)
{
    return (uint64_t *)scratch + (size_t)table * (size_t)L;
}

/* Bytes of the three tables, rounded up to a cache line: the slice kept
 * after them must be aligned for every element type (long double and its
 * complex need 16 bytes; 3 tables of 3 ranks end at byte 72). */
static size_t tables_bytes(int L)
{
    return ((size_t)3 * (size_t)L * sizeof(uint64_t) + 63) & ~(size_t)63;
}

/* Where this rank's slice of the result goes: into place in recv (at byte
 * `offset`) where it keeps the result, else the scratch after the tables. */
static void *result_slice(void *recv, uint64_t offset, void *scratch, int L, int keeps)
{
    return keeps ? (void *)((unsigned char *)recv + offset) : (void *)((unsigned char *)scratch + tables_bytes(L));
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
     * result (in place too: the reduce-scatter keeps it aside until the
     * others have read the input); a rank that only sends keeps it in
     * scratch until the gather stores it into the root. */
    const int keeps = root < 0 || root == me;
    PMC_CO_BEGIN(f);
    /* The outer scratch: the reduce-scatter and the gather use the inner one. */
    f->p = pmc_scratch_outer(c, tables_bytes(L) + (keeps ? 0 : (size_t)((hi - lo) * esize)));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    for (int i = 0; i < L; ++i) {
        uint64_t a, b;
        slice_of(count, L, i, &a, &b);
        slice_tables(f->p, L, 0)[i] = b - a;
        slice_tables(f->p, L, 1)[i] = (b - a) * esize;
        slice_tables(f->p, L, 2)[i] = a * esize;
    }
    PMC_AWAIT(f, pmc_reduce_scatter_node_cma(op, f + 1, send, result_slice(recv, lo * esize, f->p, L, keeps), 0,
                                             slice_tables(f->p, L, 0), dtype, rop));
    PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, result_slice(recv, lo * esize, f->p, L, keeps), recv, 0,
                                     slice_tables(f->p, L, 1), slice_tables(f->p, L, 2), root));
    PMC_CO_END(f);
}

/* Reduce-scatter within a node: every rank copies its input in chunk by
 * chunk; each rank reduces the part of the chunk that belongs to its own
 * block, over all inputs in rank order, straight into its receive buffer.
 * No result region and no copy out: the reduction is the only pass. */
#include <string.h>

#include "../comm.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"

int pmc_reduce_scatter_node_slices(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                                   const uint64_t *counts, int dtype, int rop)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const pmc_slices g = pmc_slices_of(n, esize);
    const uint64_t region = g.region, cell = g.cell, ncells = g.ncells, per_chunk = g.per_chunk;
    const unsigned char *in = send;
    unsigned char *out = recv;
    /* My block [lo, hi) of the whole vector, and the vector's length. */
    uint64_t lo = 0, total = 0;
    for (int i = 0; i < L; ++i) {
        if (i == me) lo = total;
        total += counts ? counts[i] : block;
    }
    const uint64_t hi = lo + (counts ? counts[me] : block);

    PMC_CO_BEGIN(f);
    if (L == 1) {
        if (hi > lo && send != recv) memmove(recv, send, (hi - lo) * esize);
        f->pc = 0;
        return PMC_OK;
    }
    f->n = (total + per_chunk - 1) / per_chunk;
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_SLICES, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1,
                                 pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep)));
        pmc_slices_copy_in(n, &g, f->base + f->k + 1, f->lstep, in, f->k, total, esize);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, L - 1, f->base + f->k + 1));
        {
            const uint64_t s = f->base + f->k + 1, first = f->k * per_chunk;
            const uint64_t m = total - first < per_chunk ? total - first : per_chunk;
            const uint64_t a = first > lo ? first : lo, b = first + m < hi ? first + m : hi;
            if (b > a) {
                /* In place, the result lands below the input already copied in. */
                const uint64_t cell_off = pmc_cell_of(s, ncells, f->lstep) * cell + (a - first) * esize;
                unsigned char *acc = out + (a - lo) * esize;
                memmove(acc, n->seg.data + cell_off, (b - a) * esize);
                for (int r = 1; r < L; ++r)
                    pmc_reduce_into(acc, n->seg.data + (uint64_t)r * region + cell_off, b - a, dtype, rop);
            }
            pmc_node_post(n, PMC_FLAG_ACK, s);
        }
    }
    n->step = f->base + f->n;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

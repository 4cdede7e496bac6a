/* Reductions where each receiver combines whole inputs itself: every rank
 * copies its input in chunk by chunk and combines the regions of ranks
 * 0 .. upto-1 in rank order into its receive buffer. Prefix reductions
 * (Scan: upto = rank + 1, Exscan: rank) and, for short vectors, Allreduce
 * and Reduce (upto = all ranks at the receivers): one step per chunk
 * instead of the slice algorithm's two. */
#include <string.h>

#include "../comm.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"

int pmc_scan_node(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                  int exclusive)
{
    const int me = op->c->node_ctx.local_rank;
    return pmc_reduce_node_flat(op, f, send, recv, count, dtype, rop, exclusive ? me : me + 1);
}

int pmc_reduce_node_flat(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                         int upto)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const pmc_slices g = pmc_slices_of(n, esize);
    const uint64_t region = g.region, cell = g.cell, ncells = g.ncells, per_chunk = g.per_chunk;
    const unsigned char *in = send;
    unsigned char *out = recv;

    PMC_CO_BEGIN(f);
    if (count == 0) {
        f->pc = 0;
        return PMC_OK;
    }
    if (L == 1) {
        if (upto > 0 && send != recv) memmove(recv, send, count * esize);
        f->pc = 0;
        return PMC_OK;
    }
    f->n = (count + per_chunk - 1) / per_chunk;
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_SLICES, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1,
                                 pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep)));
        pmc_slices_copy_in(n, &g, f->base + f->k + 1, f->lstep, in, f->k, count, esize);
        for (f->j = 0; f->j < upto; ++f->j) {
            if (f->j == me) continue;
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, &f->j, 1, f->base + f->k + 1));
        }
        if (upto > 0) {
            const uint64_t s = f->base + f->k + 1, first = f->k * per_chunk;
            const uint64_t m = count - first < per_chunk ? count - first : per_chunk;
            const uint64_t cell_off = pmc_cell_of(s, ncells, f->lstep) * cell;
            pmc_reduce_strided(out + first * esize, n->seg.data + cell_off, region, upto, -1, NULL, m, dtype, rop);
        }
        pmc_node_post(n, PMC_FLAG_ACK, f->base + f->k + 1);
    }
    n->step = f->base + f->n;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

/* Reduction within a node, every rank reducing one slice.
 *
 * The data area holds one input region per local rank and a result region,
 * each split into a ring of cells. A round moves one chunk: every rank copies
 * its chunk in (step s_in), reduces its slice of the chunk over all inputs in
 * rank order into the result cell (step s_out), then the receivers copy the
 * whole result chunk out. Each element is combined by one rank in a fixed
 * order, so every receiver gets the same bits. A rank's own slice of its
 * chunk is read by no one else: it stays out of the cell and is combined
 * straight from the input, which saves 1/L of the copy in. */
#include <string.h>

#include "../comm.h"
#include "../reduce/reduce_ops.h"
#include "node_algos.h"

#define MAX_CELL ((uint64_t)1 << 18)

/* Step after which the cell of round ending at s_out may be reused: rounds
 * take two steps, so its previous use ended 2 * ncells steps earlier. */
static inline uint64_t cell_free_step(uint64_t s_out, uint64_t ncells, uint64_t layout_step)
{
    const uint64_t prev = s_out - 2 * ncells;
    return pmc_step_geq(prev, layout_step) ? prev : layout_step;
}

int pmc_allreduce_node_slices(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count,
                              int dtype, int rop, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const int i_receive = root < 0 || root == me;
    /* L input regions and one result region. The geometry must not depend
     * on the element type (consecutive reductions share the cell ring), and
     * a multiple of 64 bytes holds whole elements of every type. The data
     * area is at least 256 bytes per local rank, so cells are >= 64 bytes. */
    const uint64_t region = (n->seg.data_bytes / (uint64_t)(L + 1)) & ~(uint64_t)63;
    uint64_t cell = region / 2;
    if (cell > MAX_CELL) cell = MAX_CELL;
    cell &= ~(uint64_t)63;
    if (cell < 64) cell = 64; /* no segment (a node of one rank): nothing is copied */
    const uint64_t ncells = region / cell;
    const uint64_t per_chunk = cell / esize;
    unsigned char *const data = n->seg.data;
    unsigned char *const result = data + (uint64_t)L * region;
    const unsigned char *in = send;
    unsigned char *out = recv;

    PMC_CO_BEGIN(f);
    if (count == 0) {
        f->pc = 0;
        return PMC_OK;
    }
    if (L == 1) {
        if (i_receive && send != recv) memmove(recv, send, count * esize);
        f->pc = 0;
        return PMC_OK;
    }
    f->n = (count + per_chunk - 1) / per_chunk;
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_REDUCE, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        /* Cells advance one per round (two steps) from the layout's start;
         * every rank read this cell's previous inputs and result. */
        f->aux = f->base + 2 * f->k + 1; /* s_in */
        PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, L - 1, cell_free_step(f->aux + 1, ncells, f->lstep)));
        {
            const uint64_t first = f->k * per_chunk, m = count - first < per_chunk ? count - first : per_chunk;
            const uint64_t cell_off = (((f->aux + 1 - f->lstep) / 2 - 1) % ncells) * cell;
            /* All but my own slice, which only I read (straight from the input, below). */
            const uint64_t lo = m * (uint64_t)me / (uint64_t)L, hi = m * (uint64_t)(me + 1) / (uint64_t)L;
            unsigned char *mine = data + (uint64_t)me * region + cell_off;
            pmc_cell_store(mine, in + first * esize, lo * esize, n->movsb_min);
            pmc_cell_store(mine + hi * esize, in + (first + hi) * esize, (m - hi) * esize, n->movsb_min);
            pmc_node_post(n, PMC_FLAG_SEQ, f->aux);
        }
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, L - 1, f->aux));
        {
            /* My slice of the chunk, combined in rank order 0, 1, ..., L-1. */
            const uint64_t first = f->k * per_chunk, m = count - first < per_chunk ? count - first : per_chunk;
            const uint64_t cell_off = (((f->aux + 1 - f->lstep) / 2 - 1) % ncells) * cell;
            const uint64_t lo = m * (uint64_t)me / (uint64_t)L, hi = m * (uint64_t)(me + 1) / (uint64_t)L;
            /* My own slice from my input: it was not copied in. */
            if (hi > lo)
                pmc_reduce_strided(result + cell_off + lo * esize, data + cell_off + lo * esize, region, L, me,
                                   in + (first + lo) * esize, hi - lo, dtype, rop);
            pmc_node_post(n, PMC_FLAG_SEQ, f->aux + 1);
        }
        if (i_receive) {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, L - 1, f->aux + 1));
            {
                const uint64_t first = f->k * per_chunk, m = count - first < per_chunk ? count - first : per_chunk;
                const uint64_t cell_off = (((f->aux + 1 - f->lstep) / 2 - 1) % ncells) * cell;
                memcpy(out + first * esize, result + cell_off, m * esize);
            }
        }
        pmc_node_post(n, PMC_FLAG_ACK, f->aux + 1);
    }
    n->step = f->base + 2 * f->n;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

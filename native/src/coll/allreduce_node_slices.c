/* Reduction within a node, every rank reducing one slice.
 *
 * The data area holds one input region per local rank and a result region,
 * each split into a ring of cells. A round moves one chunk: every rank copies
 * its chunk in (step s_in), reduces its slice of the chunk over all inputs in
 * rank order into the result cell (step s_out), then the receivers copy the
 * whole result chunk out. Each element is combined by one rank in a fixed
 * order, so every receiver gets the same bits. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "node_algos.h"
#include "pymcoll.h"

#define MAX_CELL ((uint64_t)1 << 18)

int pmc_allreduce_node_slices(pmc_node *n, const void *send, void *recv, uint64_t count,
                              int dtype, int op, int root)
{
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const int i_receive = root < 0 || root == me;
    const uint64_t bytes = count * esize;
    if (count == 0) return PMC_OK;
    if (L == 1) {
        if (i_receive && send != recv) memmove(recv, send, bytes);
        return PMC_OK;
    }

    /* L input regions and one result region. The geometry must not depend
     * on the element type (consecutive reductions share the cell ring), and
     * a multiple of 64 bytes holds whole elements of every type. The data
     * area is at least 256 bytes per local rank, so cells are >= 64 bytes. */
    const uint64_t region = (n->seg.data_bytes / (uint64_t)(L + 1)) & ~(uint64_t)63;
    uint64_t cell = region / 2;
    if (cell > MAX_CELL) cell = MAX_CELL;
    cell &= ~(uint64_t)63;
    const uint64_t ncells = region / cell;
    const uint64_t per_chunk = cell / esize;
    const uint64_t rounds = (count + per_chunk - 1) / per_chunk;
    const uint64_t base = n->step;
    const uint64_t layout_step = pmc_node_use_layout(n, PMC_LAYOUT_REDUCE, base);
    unsigned char *const data = n->seg.data;
    unsigned char *const result = data + (uint64_t)L * region;
    const unsigned char *in = send;
    unsigned char *out = recv;
    int rc;

    for (uint64_t k = 0; k < rounds; ++k) {
        const uint64_t s_in = base + 2 * k + 1, s_out = s_in + 1;
        const uint64_t first = k * per_chunk;
        const uint64_t m = count - first < per_chunk ? count - first : per_chunk;
        /* Cells advance one per round (two steps) from the layout's start. */
        const uint64_t cell_off = (((s_out - layout_step) / 2 - 1) % ncells) * cell;
        const uint64_t prev = s_out - 2 * ncells;
        const uint64_t need = pmc_step_geq(prev, layout_step) ? prev : layout_step;

        /* Every rank read this cell's previous inputs and result. */
        rc = pmc_node_wait(n, PMC_FLAG_ACK, n->others, L - 1, need);
        if (rc != PMC_OK) return rc;
        memcpy(data + (uint64_t)me * region + cell_off, in + first * esize, m * esize);
        pmc_node_post(n, PMC_FLAG_SEQ, s_in);
        rc = pmc_node_wait(n, PMC_FLAG_SEQ, n->others, L - 1, s_in);
        if (rc != PMC_OK) return rc;

        /* My slice of the chunk, combined in rank order 0, 1, ..., L-1. */
        const uint64_t lo = m * (uint64_t)me / (uint64_t)L, hi = m * (uint64_t)(me + 1) / (uint64_t)L;
        if (hi > lo) {
            unsigned char *acc = result + cell_off + lo * esize;
            memcpy(acc, data + cell_off + lo * esize, (hi - lo) * esize);
            for (int r = 1; r < L; ++r)
                pmc_reduce_into(acc, data + (uint64_t)r * region + cell_off + lo * esize, hi - lo, dtype, op);
        }
        pmc_node_post(n, PMC_FLAG_SEQ, s_out);
        if (i_receive) {
            rc = pmc_node_wait(n, PMC_FLAG_SEQ, n->others, L - 1, s_out);
            if (rc != PMC_OK) return rc;
            memcpy(out + first * esize, result + cell_off, m * esize);
        }
        pmc_node_post(n, PMC_FLAG_ACK, s_out);
    }
    n->step = base + 2 * rounds;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    return PMC_OK;
}

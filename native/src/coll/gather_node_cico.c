/* Gather and allgather (and their v forms) within a node: each rank owns a
 * region of the data area split into cells; it copies its block in chunk by
 * chunk while the readers copy earlier chunks out, so any block size
 * streams through. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

#define MAX_CELL ((uint64_t)1 << 20)

static inline uint64_t chunks_of(uint64_t bytes, uint64_t cell) { return (bytes + cell - 1) / cell; }

int pmc_gather_node_cico(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                         const uint64_t *counts, const uint64_t *displs, int root, int known)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int i_read = root < 0 || me == root;
    const int i_write = root < 0 || me != root;
    const int *readers = root < 0 ? n->others : &root;
    const int nreaders = root < 0 ? L - 1 : 1;
    const uint64_t region = (n->seg.data_bytes / (uint64_t)L) & ~(uint64_t)63;
    uint64_t cell = (region / pmc_ring_cells(n)) & ~(uint64_t)63;
    if (cell > MAX_CELL) cell = MAX_CELL;
    if (cell < 64) cell = 64; /* no segment (a node of one rank): nothing is copied */
    const uint64_t ncells = region / cell < PMC_MAX_CELLS ? region / cell : PMC_MAX_CELLS;
    const uint64_t mine = pmc_count_of(counts, block, me);
    unsigned char *out = recv;
    const unsigned char *in = send;

#define CELL(s) pmc_cell_rot((s), ncells, f->lstep)

    PMC_CO_BEGIN(f);
    if (i_read && mine > 0 && send != out + pmc_displ_of(displs, block, me))
        pmc_bulk_copy(out + pmc_displ_of(displs, block, me), send, mine, n->stream_min);
    if (L == 1) {
        f->pc = 0;
        return PMC_OK;
    }
    f->n = chunks_of(mine, cell);
    if (counts != NULL)
        for (int i = 0; i < L; ++i)
            if (chunks_of(counts[i], cell) > f->n) f->n = chunks_of(counts[i], cell);
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_REGIONS, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        if (i_write && f->k < chunks_of(mine, cell)) {
            /* The cell's last write was in an earlier collective, read by
             * any rank, or in this one, read by this collective's readers. */
            if (pmc_step_geq(f->base, n->cell_last[CELL(f->base + f->k + 1)])) {
                PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, L - 1, n->cell_last[CELL(f->base + f->k + 1)]));
            } else {
                PMC_AWAIT(f, pmc_op_wait_acked(op, readers, nreaders, n->cell_last[CELL(f->base + f->k + 1)]));
            }
            {
                const uint64_t s = f->base + f->k + 1, off = f->k * cell;
                const uint64_t len = mine - off < cell ? mine - off : cell;
                pmc_cell_store(n->seg.data + (uint64_t)me * region + CELL(s) * cell, in + off, len, n->movsb_min);
                n->cell_last[CELL(s)] = s;
                pmc_node_post(n, PMC_FLAG_SEQ, s);
            }
        }
        if (i_read) {
            for (f->j = 0; f->j < L - 1; ++f->j) {
                if (f->k >= chunks_of(pmc_count_of(counts, block, n->others[f->j]), cell)) continue;
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, &n->others[f->j], 1, f->base + f->k + 1));
                {
                    const int peer = n->others[f->j];
                    const uint64_t s = f->base + f->k + 1, off = f->k * cell, total = pmc_count_of(counts, block, peer);
                    const uint64_t len = total - off < cell ? total - off : cell;
                    pmc_chunk_copy_out(out + pmc_displ_of(displs, block, peer) + off,
                                       n->seg.data + (uint64_t)peer * region + CELL(s) * cell, len, total,
                                       n->stream_min);
                }
            }
            pmc_node_post(n, PMC_FLAG_ACK, f->base + f->k + 1);
        }
    }
    n->step = f->base + (known ? f->n : PMC_STEP_STRIDE);
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
#undef CELL
}

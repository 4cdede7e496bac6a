/* Bcast within a node: the root copies chunks into a ring of cells, the
 * others copy them out; the root runs up to `ncells` chunks ahead, across
 * consecutive broadcasts too (cells are indexed by step).
 *
 * Messages of 1.5-8 KiB go through a ring of page-sized cells instead of
 * the pipeline's chunk-sized ones: then consecutive broadcasts write one
 * run of memory, which the hardware prefetchers follow, instead of the
 * first pages of cells a chunk apart. Measured on 2 ranks, both rings side
 * by side in one run: back to back, 4 KiB 2.35 -> 1.07 us per call and
 * 8 KiB 4.4 -> 1.5; with a Barrier before each call, 2 KiB 1.47 -> 1.15,
 * 4 KiB 2.58 -> 1.22, 8 KiB 4.09 -> 1.74. Below 1.5 KiB (one line per
 * cell) the page-sized cells were slower (1 KiB 0.95 -> 1.02 us), and from
 * 16 KiB the chunk-sized ones are as fast or faster. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_bcast_node_cico(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    uint64_t cell = n->chunk;
    int layout = PMC_LAYOUT_CELLS;
    if (bytes >= PMC_BCAST_PAGE_CELLS_MIN && bytes <= PMC_BCAST_PAGE_CELLS_MAX && cell > PMC_BCAST_PAGE_CELL) {
        cell = PMC_BCAST_PAGE_CELL;
        layout = PMC_LAYOUT_PAGE_CELLS;
    }
    if (cell > n->seg.data_bytes / 2) cell = (n->seg.data_bytes / 2) & ~(uint64_t)63;
    if (cell < 64) cell = 64; /* no segment (a node of one rank): nothing is copied */
    const uint64_t ncells = n->seg.data_bytes / cell;
    unsigned char *p = buf;
    PMC_CO_BEGIN(f);
    if (n->local_size == 1 || bytes == 0) {
        f->pc = 0;
        return PMC_OK;
    }
    f->n = (bytes + cell - 1) / cell;
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, layout, f->base);
    for (f->k = 0; f->k < f->n; ++f->k) {
        if (n->local_rank == root) {
            /* The cell is free once every rank finished reading its previous
             * use (any rank may have read it, whoever was root then). */
            f->aux = pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep);
            PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, n->local_size - 1, f->aux));
        } else {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, &root, 1, f->base + f->k + 1));
        }
        {
            const uint64_t s = f->base + f->k + 1, off = f->k * cell;
            const uint64_t len = bytes - off < cell ? bytes - off : cell;
            unsigned char *slot = n->seg.data + pmc_cell_of(s, ncells, f->lstep) * cell;
            if (n->local_rank == root) {
                pmc_cell_store(slot, p + off, len, n->movsb_min);
                pmc_node_post(n, PMC_FLAG_SEQ, s);
            } else {
                pmc_chunk_copy_out(p + off, slot, len, bytes, n->stream_min);
                pmc_node_post(n, PMC_FLAG_ACK, s);
            }
        }
    }
    n->step = f->base + f->n;
    if (n->local_rank == root) pmc_node_post(n, PMC_FLAG_ACK, n->step); /* the others did with their last chunk */
    PMC_CO_END(f);
}

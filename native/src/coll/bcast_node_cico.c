/* Bcast within a node: the root copies chunks into a ring of cells, the
 * others copy them out; the root runs up to `ncells` chunks ahead, across
 * consecutive broadcasts too (cells are indexed by step). */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

int pmc_bcast_node_cico(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    uint64_t cell = n->chunk;
    if (cell > n->seg.data_bytes / 2) cell = (n->seg.data_bytes / 2) & ~(uint64_t)63;
    if (cell < 64) cell = 64; /* no segment (a node of one rank): nothing is copied */
    const uint64_t ncells = n->seg.data_bytes / cell;
    unsigned char *p = buf;
    /* f->aux: every other rank acknowledged at least this step (f->j = 1: known). */
    PMC_CO_BEGIN(f);
    if (n->local_size == 1 || bytes == 0) {
        f->pc = 0;
        return PMC_OK;
    }
    f->n = (bytes + cell - 1) / cell;
    f->base = n->step;
    f->lstep = pmc_node_use_layout(n, PMC_LAYOUT_CELLS, f->base);
    f->j = 0;
    for (f->k = 0; f->k < f->n; ++f->k) {
        if (n->local_rank == root) {
            /* The cell is free once every rank finished reading its previous
             * use (any rank may have read it, whoever was root then). */
            if (!f->j || !pmc_step_geq(f->aux, pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep))) {
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1,
                                         pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep)));
                f->aux = pmc_cell_free_step(f->base + f->k + 1, ncells, f->lstep);
                f->j = 1;
            }
        } else {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, &root, 1, f->base + f->k + 1));
        }
        {
            const uint64_t s = f->base + f->k + 1, off = f->k * cell;
            const uint64_t len = bytes - off < cell ? bytes - off : cell;
            unsigned char *slot = n->seg.data + pmc_cell_of(s, ncells, f->lstep) * cell;
            if (n->local_rank == root) {
                memcpy(slot, p + off, len);
                pmc_node_post(n, PMC_FLAG_SEQ, s);
            } else {
                memcpy(p + off, slot, len);
                pmc_node_post(n, PMC_FLAG_ACK, s);
            }
        }
    }
    n->step = f->base + f->n;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

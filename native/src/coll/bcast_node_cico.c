/* Bcast within a node: the root copies chunks into a ring of cells, the
 * others copy them out; the root runs up to `ncells` chunks ahead, across
 * consecutive broadcasts too (cells are indexed by step). */
#include <string.h>

#include "node_algos.h"
#include "pymcoll.h"

int pmc_bcast_node_cico(pmc_node *n, void *buf, uint64_t bytes, int root)
{
    if (n->local_size == 1 || bytes == 0) return PMC_OK;
    uint64_t cell = n->chunk;
    if (cell > n->seg.data_bytes / 2) cell = (n->seg.data_bytes / 2) & ~(uint64_t)63;
    const uint64_t ncells = n->seg.data_bytes / cell;
    const uint64_t nchunks = (bytes + cell - 1) / cell;
    const uint64_t base = n->step;
    const uint64_t layout_step = pmc_node_use_layout(n, PMC_LAYOUT_CELLS, base);
    int have_confirmed = 0;
    uint64_t confirmed = 0; /* every other rank acknowledged at least this step */
    unsigned char *p = buf;
    int rc = PMC_OK;

    for (uint64_t k = 0; k < nchunks; ++k) {
        const uint64_t s = base + k + 1;
        const uint64_t off = k * cell;
        const uint64_t len = bytes - off < cell ? bytes - off : cell;
        unsigned char *slot = n->seg.data + pmc_cell_of(s, ncells, layout_step) * cell;
        if (n->local_rank == root) {
            /* The cell is free once every rank finished reading its previous
             * use (any rank may have read it, whoever was root then). */
            const uint64_t need = pmc_cell_free_step(s, ncells, layout_step);
            if (!have_confirmed || !pmc_step_geq(confirmed, need)) {
                rc = pmc_node_wait(n, PMC_FLAG_ACK, n->others, n->local_size - 1, need);
                if (rc != PMC_OK) return rc;
                confirmed = need;
                have_confirmed = 1;
            }
            memcpy(slot, p + off, len);
            pmc_node_post(n, PMC_FLAG_SEQ, s);
        } else {
            rc = pmc_node_wait(n, PMC_FLAG_SEQ, &root, 1, s);
            if (rc != PMC_OK) return rc;
            memcpy(p + off, slot, len);
            pmc_node_post(n, PMC_FLAG_ACK, s);
        }
    }
    n->step = base + nchunks;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    return PMC_OK;
}

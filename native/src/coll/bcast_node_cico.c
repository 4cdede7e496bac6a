/* Bcast within a node: the root copies chunks into a ring of cells, the
 * others copy them out; the root runs up to `ncells` chunks ahead. */
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
    unsigned char *p = buf;
    int rc = PMC_OK;

    for (uint64_t k = 0; k < nchunks; ++k) {
        const uint64_t s = base + k + 1;
        const uint64_t off = k * cell;
        const uint64_t len = bytes - off < cell ? bytes - off : cell;
        unsigned char *slot = n->seg.data + (k % ncells) * cell;
        if (n->local_rank == root) {
            /* The cell is free once every reader finished the chunk that
             * used it before (or the previous collective, for the first lap). */
            if (k == 0 || k >= ncells) {
                uint64_t need = k >= ncells ? s - ncells : base;
                rc = pmc_node_wait(n, PMC_FLAG_ACK, n->others, n->local_size - 1, need);
                if (rc != PMC_OK) return rc;
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

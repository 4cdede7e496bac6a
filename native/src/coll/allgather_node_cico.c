/* Allgather (and gather) within a node: each rank owns a region of the data
 * area split into cells; it copies its block in chunk by chunk while the
 * readers copy earlier chunks out, so any block size streams through. */
#include <string.h>

#include "node_algos.h"
#include "pymcoll.h"

#define MAX_CELL ((uint64_t)1 << 20)

int pmc_allgather_node_cico(pmc_node *n, const void *send, void *recv, uint64_t block, int root)
{
    const int me = n->local_rank, L = n->local_size;
    const int i_read = root < 0 || me == root;
    const int i_write = root < 0 || me != root;
    unsigned char *out = recv;

    if (i_read && block > 0 && send != out + (uint64_t)me * block)
        memcpy(out + (uint64_t)me * block, send, block);
    if (L == 1 || block == 0) return PMC_OK;

    const uint64_t region = (n->seg.data_bytes / (uint64_t)L) & ~(uint64_t)63;
    uint64_t cell = (region / 2) & ~(uint64_t)63;
    if (cell > MAX_CELL) cell = MAX_CELL;
    const uint64_t ncells = region / cell;
    const uint64_t nchunks = (block + cell - 1) / cell;
    const uint64_t base = n->step;
    const uint64_t layout_step = pmc_node_use_layout(n, PMC_LAYOUT_REGIONS, base);
    const int *readers = root < 0 ? n->others : &root;
    const int nreaders = root < 0 ? L - 1 : 1;
    const unsigned char *in = send;
    int rc;

    for (uint64_t k = 0; k < nchunks; ++k) {
        const uint64_t s = base + k + 1;
        const uint64_t off = k * cell;
        const uint64_t len = block - off < cell ? block - off : cell;
        const uint64_t cell_off = pmc_cell_of(s, ncells, layout_step) * cell;
        if (i_write) {
            /* The cell's previous use was in an earlier collective, read by
             * any rank (all have acknowledged their whole collective by now
             * or will), or in this one, read by this collective's readers. */
            const uint64_t need = pmc_cell_free_step(s, ncells, layout_step);
            if (pmc_step_geq(base, need)) {
                rc = pmc_node_wait(n, PMC_FLAG_ACK, n->others, L - 1, need);
            } else {
                rc = pmc_node_wait(n, PMC_FLAG_ACK, readers, nreaders, need);
            }
            if (rc != PMC_OK) return rc;
            memcpy(n->seg.data + (uint64_t)me * region + cell_off, in + off, len);
            pmc_node_post(n, PMC_FLAG_SEQ, s);
        }
        if (i_read) {
            for (int j = 0; j < L - 1; ++j) {
                const int peer = n->others[j];
                rc = pmc_node_wait(n, PMC_FLAG_SEQ, &peer, 1, s);
                if (rc != PMC_OK) return rc;
                memcpy(out + (uint64_t)peer * block + off,
                       n->seg.data + (uint64_t)peer * region + cell_off, len);
            }
            pmc_node_post(n, PMC_FLAG_ACK, s);
        }
    }
    n->step = base + nchunks;
    pmc_node_post(n, PMC_FLAG_ACK, n->step);
    return PMC_OK;
}

/* Gather and allgather (and their v forms) within a node by single copy:
 * every sender exposes its block, every receiver copies each peer's block
 * straight into place, starting at its right neighbour so that the readers
 * of one block are spread out in time. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

int pmc_gather_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                        const uint64_t *counts, const uint64_t *displs, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int i_read = root < 0 || me == root;
    const int i_write = root < 0 || me != root;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    if (i_write) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, pmc_count_of(counts, block, me)));
    }
    if (i_read) {
        if (pmc_count_of(counts, block, me) > 0 && send != out + pmc_displ_of(displs, block, me))
            memcpy(out + pmc_displ_of(displs, block, me), send, pmc_count_of(counts, block, me));
        for (f->j = 0; f->j < L - 1; ++f->j) {
            if (pmc_count_of(counts, block, n->others[f->j]) == 0) continue;
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &n->others[f->j], 1, f->aux));
            {
                const int peer = n->others[f->j];
                int rc = pmc_cma_fetch_from(op, peer, f->aux, 0, out + pmc_displ_of(displs, block, peer),
                                            pmc_count_of(counts, block, peer));
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
        }
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    if (i_write) {
        f->peers[0] = root;
        PMC_AWAIT(f, root < 0 ? pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux)
                              : pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
    }
    n->step = f->aux;
    PMC_CO_END(f);
}

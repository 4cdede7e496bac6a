/* Gather and allgather (and their v forms) within a node by single copy.
 * Allgather: every sender exposes its block, every receiver copies each
 * peer's block straight into place, starting at its right neighbour so that
 * the readers of one block are spread out in time. Gather: the root exposes
 * its receive buffer and every sender writes its own block into it, so the
 * senders' copies and the root's copy of its own block run at once instead
 * of one after another on the root. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

static int gather_push(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                       const uint64_t *counts, const uint64_t *displs, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->peers[0] = root;
    if (me == root) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, recv,
                                    counts == NULL ? block * (uint64_t)L : pmc_v_extent(counts, displs, L)));
        if (pmc_count_of(counts, block, me) > 0 && send != out + pmc_displ_of(displs, block, me))
            pmc_bulk_copy(out + pmc_displ_of(displs, block, me), send, pmc_count_of(counts, block, me), n->stream_min);
        /* A sender acknowledges once its block is in place. */
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, f->peers, 1, f->aux));
        {
            int rc = pmc_cma_store_to(op, root, f->aux, pmc_displ_of(displs, block, me), send,
                                      pmc_count_of(counts, block, me));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        /* The root's line carries its exposure until every sender has written. */
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
    }
    n->step = f->aux;
    PMC_CO_END(f);
}

int pmc_gather_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block,
                        const uint64_t *counts, const uint64_t *displs, int root)
{
    if (root >= 0) return gather_push(op, f, send, recv, block, counts, displs, root);
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, pmc_count_of(counts, block, me)));
    if (pmc_count_of(counts, block, me) > 0 && send != out + pmc_displ_of(displs, block, me))
        pmc_bulk_copy(out + pmc_displ_of(displs, block, me), send, pmc_count_of(counts, block, me), n->stream_min);
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
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    n->step = f->aux;
    PMC_CO_END(f);
}

/* Gatherv within a node, each block on its own path: the root fetches a
 * block big enough for single copy straight from its writer's send buffer;
 * the others stream through the gather cells. A pair's path depends only on
 * its count, which both its ends know, so the writers need not know each
 * other's counts.
 *
 * The cells then run with the single-copy blocks counted as empty. Their
 * first step s also carries the single-copy writers' exposures (in their
 * inline lines); the root fetches those first, so once it acknowledges s
 * the writers may return. Sharing the step keeps the cell rotation of the
 * cells' calls (one stride per call), so consecutive calls pipeline. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

int pmc_gatherv_node_split(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count,
                           const uint64_t *rcounts, const uint64_t *rdispls, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->p = NULL;
    if (L > 1) { /* a node of one rank has no segment: the cells copy its block */
        if (me == root) {
            for (f->j = 0; f->j < L - 1; ++f->j) {
                if (!pmc_single_copy(c, PMC_COLL_GATHERV, rcounts[n->others[f->j]])) continue;
                if (f->p == NULL) {
                    uint64_t *cells = pmc_scratch(c, (size_t)L * sizeof(uint64_t));
                    if (cells == NULL) {
                        f->pc = 0;
                        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
                    }
                    memcpy(cells, rcounts, (size_t)L * sizeof(uint64_t));
                    f->p = cells;
                }
                ((uint64_t *)f->p)[n->others[f->j]] = 0;
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &n->others[f->j], 1, f->aux));
                {
                    const int peer = n->others[f->j];
                    int rc = pmc_cma_fetch_from(op, peer, f->aux, 0, out + rdispls[peer], rcounts[peer]);
                    if (rc != PMC_OK) {
                        f->pc = 0;
                        return rc;
                    }
                }
            }
        } else if (pmc_single_copy(c, PMC_COLL_GATHERV, count)) {
            f[1].aux = f->aux;
            PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, count));
        }
    }
    if (me == root) {
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, 0, f->p ? (const uint64_t *)f->p : rcounts,
                                          rdispls, root, 0));
    } else {
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, pmc_single_copy(c, PMC_COLL_GATHERV, count) ? 0 : count, NULL, NULL,
                                          root, 0));
        if (pmc_single_copy(c, PMC_COLL_GATHERV, count)) {
            /* The root has my block: my send buffer may change again. */
            f->peers[0] = root;
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
        }
    }
    PMC_CO_END(f);
}

/* Scatterv within a node, each block on its own path: a block big enough
 * for single copy is fetched by its reader straight from the root's send
 * buffer; the others stream through the pairs cells. A pair's path depends
 * only on its count, which both its ends know, so the readers need not know
 * each other's counts.
 *
 * Step s (one past the node's step) carries the root's exposure: its send
 * buffer and its displacement array, which a reader reads its own
 * displacement from. Every rank acknowledges s before the cells run (a
 * layout switch makes the cells' writer wait for that); the single-copy
 * readers once they have their block, the others at once, so the throttle
 * (at most PMC_CMA_READERS readers on the root at a time) never waits for
 * them. The cells then run with the single-copy blocks counted as empty. */
#include <string.h>

#include "../comm.h"
#include "../node/cma.h"
#include "node_algos.h"

static inline int single_copy(const pmc_comm *c, uint64_t bytes)
{
    return bytes > 0 && pmc_node_path(c, bytes, 0, 1) == PMC_PATH_CMA;
}

int pmc_scatterv_node_split(pmc_op *op, pmc_frame *f, const void *send, const uint64_t *scounts,
                            const uint64_t *sdispls, void *recv, uint64_t count, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int pos = (me - root - 1 + L) % L; /* order among the readers */
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->p = NULL;
    if (L > 1) { /* a node of one rank has no segment: the cells copy its block */
        if (me == root) {
            uint64_t *cells = NULL, extent = 0;
            for (int i = 0; i < L; ++i) {
                if (scounts[i] > 0 && sdispls[i] + scounts[i] > extent) extent = sdispls[i] + scounts[i];
                if (i == me || !single_copy(c, scounts[i])) continue;
                if (cells == NULL) {
                    cells = pmc_scratch(c, (size_t)L * sizeof(uint64_t));
                    if (cells == NULL) {
                        f->pc = 0;
                        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
                    }
                    memcpy(cells, scounts, (size_t)L * sizeof(uint64_t));
                }
                cells[i] = 0;
            }
            f->p = cells; /* NULL: every block goes through the cells */
            f->n = extent;
            if (f->p != NULL) {
                pmc_desc d[2];
                pmc_desc_make(c->heap, send, f->n, &d[0]);
                pmc_desc_make(c->heap, sdispls, (uint64_t)L * sizeof(uint64_t), &d[1]);
                f[1].aux = f->aux;
                /* The descriptors are rebuilt on a resume and copied out when published. */
                PMC_AWAIT(f, pmc_inline_publish(op, f + 1, d, sizeof(d)));
            }
            pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        } else if (single_copy(c, count)) {
            if (pos >= PMC_CMA_READERS) {
                f->peers[0] = (root + 1 + pos - PMC_CMA_READERS) % L;
                PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
            }
            f->peers[1] = root;
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &f->peers[1], 1, f->aux));
            {
                pmc_desc d[2];
                uint64_t displ = 0;
                memcpy(d, pmc_inline_payload(pmc_inline_line(n, root, f->aux)), sizeof(d));
                int rc = pmc_fetch(n, root, &d[1], (uint64_t)me * sizeof(uint64_t), &displ, sizeof(displ));
                if (rc == PMC_OK) rc = pmc_fetch(n, root, &d[0], displ, recv, count);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        } else {
            pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        }
        n->step = f->aux;
    }
    if (me == root) {
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, send, f->p ? (const uint64_t *)f->p : scounts, sdispls, recv,
                                         NULL, NULL, 0, root, 0));
        /* The single-copy readers are done with the send buffer. */
        if (f->p != NULL) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    } else {
        PMC_AWAIT(f, pmc_pairs_node_cico(op, f + 1, send, NULL, NULL, recv, NULL, NULL,
                                         single_copy(c, count) ? 0 : count, root, 0));
    }
    PMC_CO_END(f);
}

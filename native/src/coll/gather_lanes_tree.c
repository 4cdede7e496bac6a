/* Gather across nodes on the lanes, for any root: the Scatter tree run
 * backwards. Every rank writes its block into its node buffer (own node
 * first), the node's lanes receive their children's ranges behind it, all
 * at once, and the lane that hangs below the parent sends the whole range
 * up; the root copies the result out into rank order. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_gather_lanes_tree(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int N = c->nnodes, R = c->lanes + 1, lane = pmc_lane_of(c), me = n->local_rank;
    const int root_node = c->node_of[root], root_local = c->local_of[root];
    const int v = (c->node - root_node + N) % N, shared = n->local_size > 1;
    /* f->peers[0]: the local rank that sends the range up (root's node: the root). */
    PMC_CO_BEGIN(f);
    f->p = pmc_node_buffer(c, (uint64_t)c->size * block);
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for the node buffer", n->coll);
    }
    f->base = n->step;
    pmc_node_use_layout(n, PMC_LAYOUT_NODEBUF, f->base);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    memcpy((unsigned char *)f->p + (uint64_t)me * block, send, block);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    if (lane >= 0) {
        {
            const long limit = pmc_tree_limit(v, R, N), end = v + pmc_tree_span(v, R, N);
            for (long e = 1; e < limit; e *= R) {
                const long child = v + (long)(lane + 1) * e;
                if (child >= end) continue;
                const int cnode = (int)((root_node + child) % N);
                int rc = pmc_lane_recv(op, (unsigned char *)f->p + pmc_nodes_bytes(c, c->node, (int)(child - v), block),
                                       pmc_nodes_bytes(c, cnode, pmc_tree_span((int)child, R, N), block), cnode);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
        }
        PMC_AWAIT(f, pmc_lane_wait(op));
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 2);
    }
    f->peers[0] = root_local;
    if (v != 0) {
        long d;
        int k;
        pmc_tree_parent(v, R, &d, &k);
        f->peers[0] = k - 1;
    }
    if (me == f->peers[0]) {
        /* Everything of the subtree is in the buffer once every local rank
         * wrote its block and every lane received its children's ranges. */
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 1));
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + 2));
        if (v == 0) {
            pmc_nodes_reorder(c, f->p, recv, block, root_node, 1);
        } else {
            long d;
            int k;
            pmc_tree_parent(v, R, &d, &k);
            int rc = pmc_lane_send(op, f->p, pmc_nodes_bytes(c, c->node, pmc_tree_span(v, R, N), block),
                                   (int)((root_node + v - (long)k * d) % N));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
        }
    }
    n->step = f->base + 2;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

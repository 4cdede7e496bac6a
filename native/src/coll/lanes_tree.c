/* The lanes' (L+1)-ary tree over nodes (PiP-MColl's Scatter tree, for any
 * root), down for Bcast and Scatter, up for Gather. Subtrees are contiguous
 * node ranges numbered from the root's node, so one message carries a whole
 * subtree: the broadcast message, or the blocks of the subtree's nodes.
 *
 * Down: the root fills its node buffer (Scatter: all blocks in node order
 * from its own node), other nodes receive theirs from the parent's lane;
 * the node's lanes then send every child on their lane its message at once,
 * while each rank copies its part out. Up: every rank writes its block into
 * the node buffer (own node first), the lanes receive their children's
 * ranges behind it, and the lane below the parent sends the whole range up;
 * the root copies the result out into rank order. A node's depth is
 * log_{L+1} of its distance from the root's node, against log_2 for one
 * leader per node.
 *
 * Calls whose node buffer fits a slot of the node's ring take the next slot
 * (pmc_node_ring_claim): a rank waits only until its node is done with that
 * slot's previous call, so in a loop the ranks run calls ahead of each other
 * instead of meeting at every call. Measured back to back across test-bed
 * hosts (1 CPU per host, 2 ranks each, 8 B): 3 hosts, Bcast 30 -> 20 us per
 * call, Scatter 30 -> 20-22, Gather 30 -> 17; 2 hosts 11-17 -> 10. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* The (L+1)-ary tree over nodes numbered from the root's node (v = node -
 * root_node, mod N), written in base L+1. Node v > 0 hangs below v - k*d,
 * where d is the place of v's lowest non-zero digit and k that digit, on
 * lane k-1, and owns the subtree [v, v + d) (cut at N): subtrees are
 * contiguous node ranges. A node's children: for each distance e = 1, L+1,
 * (L+1)^2, ... below its d (below N at the root), lane j's child is
 * v + (j+1)*e when inside the subtree. */
static void tree_parent(int v, int radix, long *d, int *k)
{
    long e = 1;
    while (v % (e * radix) == 0) e *= radix;
    *d = e;
    *k = (int)((v / e) % radix);
}
static int tree_span(int v, int radix, int nnodes)
{
    if (v == 0) return nnodes;
    long d;
    int k;
    tree_parent(v, radix, &d, &k);
    return (int)(d < nnodes - v ? d : nnodes - v);
}
/* Distances below which node v has children: its d, or N at the root. */
static long tree_limit(int v, int radix, int nnodes)
{
    if (v == 0) return nnodes;
    long d;
    int k;
    tree_parent(v, radix, &d, &k);
    return d;
}

/* Where a tree step starts: the node geometry shared by both directions. */
typedef struct tree {
    int N, R, root_node, v;  /* v: this node counted from the root's node */
    long limit, end;         /* children below distance limit, inside [v, end) */
    int up_lane;             /* the lane below the parent (-1 at the root's node) */
    int parent;              /* the parent node (-1 at the root's node) */
} tree;

static tree tree_of(const pmc_comm *c, int root)
{
    tree t;
    t.N = c->nnodes;
    t.R = c->lanes + 1;
    t.root_node = c->node_of[root];
    t.v = (c->node - t.root_node + t.N) % t.N;
    t.limit = tree_limit(t.v, t.R, t.N);
    t.end = t.v + tree_span(t.v, t.R, t.N);
    t.up_lane = t.parent = -1;
    if (t.v != 0) {
        long d;
        int k;
        tree_parent(t.v, t.R, &d, &k);
        t.up_lane = k - 1;
        t.parent = (int)((t.root_node + t.v - (long)k * d) % t.N);
    }
    return t;
}

/* Bytes the subtree of node w (counted from the root's node) carries, and
 * where its part lies in the buffer of node v (an ancestor or itself). */
static uint64_t subtree_bytes(const pmc_comm *c, const tree *t, long w, uint64_t block, int blocks)
{
    if (!blocks) return block;
    return pmc_nodes_bytes(c, (int)((t->root_node + w) % t->N), tree_span((int)w, t->R, t->N), block);
}
static uint64_t subtree_offset(const pmc_comm *c, const tree *t, long w, uint64_t block, int blocks)
{
    return blocks ? pmc_nodes_bytes(c, c->node, (int)(w - t->v), block) : 0;
}

/* Starts this lane's messages to (down) or from (up) its children. */
static int children_start(pmc_op *op, const tree *t, unsigned char *buf, uint64_t block, int blocks, int down)
{
    pmc_comm *c = op->c;
    const int lane = pmc_lane_of(c);
    for (long e = 1; lane >= 0 && e < t->limit; e *= t->R) {
        const long child = t->v + (long)(lane + 1) * e;
        if (child >= t->end) continue;
        unsigned char *at = buf + subtree_offset(c, t, child, block, blocks);
        const uint64_t len = subtree_bytes(c, t, child, block, blocks);
        const int node = (int)((t->root_node + child) % t->N);
        int rc = down ? pmc_lane_send(op, at, len, node) : pmc_lane_recv(op, at, len, node);
        if (rc != PMC_OK) return rc;
    }
    return PMC_OK;
}

int pmc_lanes_tree_fits(const pmc_comm *c, uint64_t block)
{
    return (uint64_t)c->size * block <= c->data_bytes;
}

int pmc_lanes_tree_down(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root, int blocks)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, shared = n->local_size > 1, root_local = c->local_of[root];
    const tree t = tree_of(c, root);
    /* f->peers[0]: the local rank that fills the node buffer. */
    PMC_CO_BEGIN(f);
    {
        int rc = pmc_node_ring_claim(op, f, blocks ? (uint64_t)c->size * block : block, 1);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, n->local_size - 1, f->aux));
    f->peers[0] = t.v == 0 ? root_local : t.up_lane;
    if (t.v == 0 && me == root_local) {
        if (blocks) pmc_nodes_reorder(c, f->p, (unsigned char *)(uintptr_t)send, block, t.root_node, 0);
        else memcpy(f->p, send, block);
    } else if (t.v != 0 && pmc_lane_of(c) == t.up_lane) {
        int rc = pmc_lane_recv(op, f->p, subtree_bytes(c, &t, t.v, block, blocks), t.parent);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    if (me == f->peers[0]) {
        PMC_AWAIT(f, pmc_lane_wait(op));
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, f->peers, 1, f->base + 1));
    }
    {
        int rc = children_start(op, &t, f->p, block, blocks, 1);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    /* Scatter: every rank takes its block (recv NULL: the root in place);
     * Bcast: every rank but the root takes the message. */
    if (blocks && recv != NULL) memcpy(recv, (unsigned char *)f->p + (uint64_t)me * block, block);
    if (!blocks && (t.v != 0 || me != root_local)) memcpy(recv, f->p, block);
    PMC_AWAIT(f, pmc_lane_wait(op));
    n->step = f->base + 1;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

int pmc_lanes_tree_up(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, shared = n->local_size > 1;
    const tree t = tree_of(c, root);
    /* f->peers[0]: the local rank that sends the range up (root's node: the root). */
    PMC_CO_BEGIN(f);
    {
        int rc = pmc_node_ring_claim(op, f, (uint64_t)c->size * block, 2);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_wait_acked(op, n->others, n->local_size - 1, f->aux));
    memcpy((unsigned char *)f->p + (uint64_t)me * block, send, block);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    if (pmc_lane_of(c) >= 0) {
        {
            int rc = children_start(op, &t, f->p, block, 1, 0);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        PMC_AWAIT(f, pmc_lane_wait(op));
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 2);
    }
    f->peers[0] = t.v == 0 ? c->local_of[root] : t.up_lane;
    if (me == f->peers[0]) {
        /* Everything of the subtree is in the buffer once every local rank
         * wrote its block and every lane received its children's ranges. */
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 1));
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + 2));
        if (t.v == 0) {
            pmc_nodes_reorder(c, f->p, recv, block, t.root_node, 1);
        } else {
            {
                int rc = pmc_lane_send(op, f->p, subtree_bytes(c, &t, t.v, block, 1), t.parent);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
        }
    }
    n->step = f->base + 2;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

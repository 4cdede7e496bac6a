/* Allgather across nodes for large payloads (PiP-MColl's large-message
 * algorithm): the node's blocks are gathered into every rank's buffer, then
 * an L-lane ring runs over nodes, lane k carrying part k (1/L) of every node
 * block. The node block that arrived in a ring step is shared among the
 * node's ranks (every lane holds one part of it) while the lanes' next step
 * is already in flight. Nodes that are not consecutive rank ranges assemble
 * in node order and reorder at the end. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* Part k of node m's block: [lo, hi) bytes from the block's start. */
static void part_of(const pmc_comm *c, int m, int k, uint64_t block, uint64_t *lo, uint64_t *hi)
{
    const uint64_t bytes = (uint64_t)c->node_count[m] * block;
    *lo = bytes * (uint64_t)k / (uint64_t)c->lanes;
    *hi = bytes * (uint64_t)(k + 1) / (uint64_t)c->lanes;
}

/* Ring step t of lane k: part k of node (n - t) goes to the next node, part
 * k of node (n - t - 1) comes from the previous one. */
static int step_start(pmc_op *op, unsigned char *buf, uint64_t block, int lane, int t)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes;
    const int out_m = ((c->node - t) % N + N) % N, in_m = ((c->node - t - 1) % N + N) % N;
    uint64_t lo, hi;
    part_of(c, in_m, lane, block, &lo, &hi);
    int rc = pmc_lane_recv(op, buf + (uint64_t)c->member_start[in_m] * block + lo, hi - lo, (c->node + N - 1) % N);
    if (rc != PMC_OK) return rc;
    part_of(c, out_m, lane, block, &lo, &hi);
    return pmc_lane_send(op, buf + (uint64_t)c->member_start[out_m] * block + lo, hi - lo, (c->node + 1) % N);
}

/* Every lane's part of node m, for pmc_lane_share. */
static void share_plan(pmc_comm *c, int m, uint64_t block)
{
    for (int i = 0; i < c->node_ctx.local_size; ++i) {
        uint64_t lo = 0, hi = 0;
        if (i < c->lanes) part_of(c, m, i, block, &lo, &hi);
        c->lcounts[i] = hi - lo;
        c->ldispls[i] = lo;
    }
}

int pmc_allgather_lanes_ring(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes, lane = pmc_lane_of(c);
    const uint64_t total = (uint64_t)c->size * block;
    /* f->p: the assembly buffer (recv when nodes are consecutive ranges);
     * f->j: ring step. */
    PMC_CO_BEGIN(f);
    f->p = recv;
    if (!c->consecutive) {
        f->p = pmc_scratch(c, (size_t)total);
        if (f->p == NULL) {
            f->pc = 0;
            return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for %llu bytes", c->node_ctx.coll,
                            (unsigned long long)total);
        }
    }
    PMC_AWAIT(f, pmc_allgather_node(op, f + 1, send, (unsigned char *)f->p + (uint64_t)c->member_start[c->node] * block,
                                    block));
    if (lane >= 0) {
        int rc = step_start(op, f->p, block, lane, 0);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    for (f->j = 0; f->j < N - 1; ++f->j) {
        if (lane >= 0) {
            PMC_AWAIT(f, pmc_lane_wait(op));
            if (f->j + 1 < N - 1) {
                int rc = step_start(op, f->p, block, lane, f->j + 1);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
        }
        {
            const int m = ((c->node - f->j - 1) % N + N) % N;
            share_plan(c, m, block);
        }
        PMC_AWAIT(f, pmc_lane_share(op, f + 1,
                                    (unsigned char *)f->p +
                                        (uint64_t)c->member_start[((c->node - f->j - 1) % N + N) % N] * block));
    }
    if (!c->consecutive) {
        const unsigned char *tmp = f->p;
        for (int i = 0; i < c->size; ++i) memcpy((unsigned char *)recv + (uint64_t)c->members[i] * block, tmp + (uint64_t)i * block, block);
    }
    PMC_CO_END(f);
}

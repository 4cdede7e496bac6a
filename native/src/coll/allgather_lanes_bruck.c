/* Allgather across nodes for small payloads (PiP-MColl's small-message
 * algorithm): every rank writes its block into the node buffer, then a Bruck
 * exchange with radix L+1 runs over nodes. In a round where the node holds
 * the `cur` node blocks starting at its own, lane k sends them to the node
 * (k+1)*cur before it and receives the `cur` blocks of the node (k+1)*cur
 * after it straight into the shared buffer, so each round multiplies what a
 * node holds by L+1. The buffer keeps node blocks rotated (this node first);
 * after the last round every rank copies the result out into rank order. */
#include <string.h>

#include "lanes.h"
#include "node_algos.h"

/* Starts lane k's messages of the round where every node holds `cur` nodes. */
static int round_start(pmc_op *op, unsigned char *buf, uint64_t block, int lane, int cur)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes;
    const long dist = (long)(lane + 1) * cur;
    if (dist >= N) return PMC_OK;
    const int cnt = cur < N - dist ? cur : (int)(N - dist);
    const int from = (int)((c->node + dist) % N), to = (int)((c->node - dist % N + N) % N);
    int rc = pmc_lane_recv(op, buf + pmc_nodes_bytes(c, c->node, (int)dist, block),
                           pmc_nodes_bytes(c, from, cnt, block), from);
    if (rc == PMC_OK) rc = pmc_lane_send(op, buf, pmc_nodes_bytes(c, c->node, cnt, block), to);
    return rc;
}

int pmc_allgather_lanes_bruck(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, lane = pmc_lane_of(c), shared = n->local_size > 1;
    /* f->k: nodes held; f->n: rounds; f->j: rounds done. */
    PMC_CO_BEGIN(f);
    {
        int rc = pmc_node_buffer_claim(op, f, (uint64_t)c->size * block);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    f->n = (uint64_t)pmc_lane_rounds(c->nnodes, c->lanes + 1);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    memcpy((unsigned char *)f->p + (uint64_t)me * block, send, block);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    if (lane >= 0) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 1));
        for (f->j = 0, f->k = 1; (uint64_t)f->j < f->n; ++f->j) {
            {
                int rc = round_start(op, f->p, block, lane, (int)f->k);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
            /* The next round sends what the other lanes received. */
            PMC_AWAIT(f, pmc_lane_barrier(op, f->base + 2 + f->j));
            f->k *= (uint64_t)c->lanes + 1;
            if (f->k > (uint64_t)c->nnodes) f->k = (uint64_t)c->nnodes;
        }
    } else {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + 1 + f->n));
    }
    pmc_nodes_reorder(c, f->p, recv, block, c->node, 1);
    n->step = f->base + 1 + f->n;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

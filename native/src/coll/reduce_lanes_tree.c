/* Reduce across nodes for small vectors, for any root: the Bcast tree run
 * backwards with a reduction. The node's ranks copy their inputs into the
 * node buffer and reduce them slice by slice into the node's partial; the
 * lanes have already posted the receives of their children's results into
 * the buffer; once those are in, the lanes combine the partial and the
 * children's results (in tree order), one slice each, and the lane that
 * hangs below the parent sends the node's result up. Each node sends one
 * vector and its depth is log_{L+1} of its distance from the root's node.
 *
 * Node buffer, in slots of the vector rounded to 64 bytes: [max_local
 * inputs | partial | L slots per tree level for the children | result]. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

static uint64_t slot_bytes(uint64_t bytes) { return (bytes + 63) & ~(uint64_t)63; }

static int levels(const pmc_comm *c)
{
    int r = 0;
    for (long e = 1; e < c->nnodes; e *= c->lanes + 1) ++r;
    return r;
}

int pmc_reduce_lanes_fits(const pmc_comm *c, uint64_t bytes)
{
    return bytes <= c->lanes_small_max &&
           ((uint64_t)c->max_local + 2u + (uint64_t)c->lanes * (uint64_t)levels(c)) * slot_bytes(bytes) <= c->data_bytes;
}

int pmc_reduce_lanes_tree(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                          int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int N = c->nnodes, R = c->lanes + 1, L = c->lanes, me = n->local_rank, lane = pmc_lane_of(c);
    const int root_node = c->node_of[root], root_local = c->local_of[root];
    const int v = (c->node - root_node + N) % N, shared = n->local_size > 1;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype), bytes = count * esize, vp = slot_bytes(bytes);
    const int P = c->max_local, CH = P + 1, RES = P + 1 + L * levels(c);
    const long limit = pmc_tree_limit(v, R, N), end = v + pmc_tree_span(v, R, N);
    unsigned char *buf = f->p;
    /* f->peers[0]: the local rank that sends the result up (the root at the root's node). */
    PMC_CO_BEGIN(f);
    f->p = pmc_node_buffer(c, (uint64_t)(RES + 1) * vp);
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for the node buffer", n->coll);
    }
    buf = f->p;
    f->base = n->step;
    pmc_node_use_layout(n, PMC_LAYOUT_NODEBUF, f->base);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, n->local_size - 1, f->base));
    if (lane >= 0) {
        /* The children's results may arrive while the node reduces its own. */
        int level = 0;
        for (long e = 1; e < limit; e *= R, ++level) {
            const long child = v + (long)(lane + 1) * e;
            if (child >= end) continue;
            int rc = pmc_lane_recv(op, buf + (uint64_t)(CH + level * L + lane) * vp, bytes, (int)((root_node + child) % N));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    memcpy(buf + (uint64_t)me * vp, send, bytes);
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 1);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 1));
    {
        const uint64_t lo = count * (uint64_t)me / (uint64_t)n->local_size;
        const uint64_t hi = count * (uint64_t)(me + 1) / (uint64_t)n->local_size;
        if (hi > lo) {
            memcpy(buf + (uint64_t)P * vp + lo * esize, buf + lo * esize, (hi - lo) * esize);
            for (int i = 1; i < n->local_size; ++i)
                pmc_reduce_into(buf + (uint64_t)P * vp + lo * esize, buf + (uint64_t)i * vp + lo * esize, hi - lo, dtype,
                                rop);
        }
    }
    if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 2);
    f->peers[0] = root_local;
    if (v != 0) {
        long d;
        int k;
        pmc_tree_parent(v, R, &d, &k);
        f->peers[0] = k - 1;
    }
    if (lane >= 0) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->base + 2));
        PMC_AWAIT(f, pmc_lane_wait(op));
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 3);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + 3));
        {
            /* Partial first, then the children level by level, lane by lane. */
            const uint64_t lo = count * (uint64_t)lane / (uint64_t)L, hi = count * (uint64_t)(lane + 1) / (uint64_t)L;
            unsigned char *out = buf + (uint64_t)RES * vp + lo * esize;
            if (hi > lo) {
                memcpy(out, buf + (uint64_t)P * vp + lo * esize, (hi - lo) * esize);
                int level = 0;
                for (long e = 1; e < limit; e *= R, ++level)
                    for (int j = 0; j < L; ++j)
                        if (v + (long)(j + 1) * e < end)
                            pmc_reduce_into(out, buf + (uint64_t)(CH + level * L + j) * vp + lo * esize, hi - lo,
                                            dtype, rop);
            }
        }
        if (shared) pmc_node_post(n, PMC_FLAG_SEQ, f->base + 4);
    }
    if (me == f->peers[0]) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, c->lane_others, c->nlane_others, f->base + 4));
        if (v == 0) {
            memcpy(recv, buf + (uint64_t)RES * vp, bytes);
        } else {
            long d;
            int k;
            pmc_tree_parent(v, R, &d, &k);
            int rc = pmc_lane_send(op, buf + (uint64_t)RES * vp, bytes, (int)((root_node + v - (long)k * d) % N));
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
        }
    }
    n->step = f->base + 4;
    if (shared) pmc_node_post(n, PMC_FLAG_ACK, n->step);
    PMC_CO_END(f);
}

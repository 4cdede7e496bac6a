/* Allreduce (and Reduce) across nodes for large vectors (PiP-MColl's
 * large-message algorithm): the vector is cut into L parts; the node's ranks reduce-
 * scatter their inputs so that lane k holds part k of the node's sum (all
 * local ranks reduce in parallel); lane k then runs a ring reduce-scatter
 * and a ring allgather over nodes on part k, so the L lanes carry the
 * traffic together; finally the node's ranks share the L parts. For Reduce
 * the reduced chunks go to the root's node instead of round the ring, and
 * its lanes hand their parts to the root. Each chunk
 * is reduced once, by one node, so every node ends with the same bits. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

/* Chunk i (of N) of a part of `elems` elements: [lo, hi). */
static void chunk_of(uint64_t elems, int N, int i, uint64_t *lo, uint64_t *hi)
{
    *lo = elems * (uint64_t)i / (uint64_t)N;
    *hi = elems * (uint64_t)(i + 1) / (uint64_t)N;
}

static int mod(int a, int N) { return ((a % N) + N) % N; }

/* Ring step t: reduce-scatter (t < N-1) then allgather, over part `part`
 * of `elems` elements; tmp receives the reduce-scatter's chunks. */
static int step_start(pmc_op *op, unsigned char *part, unsigned char *tmp, uint64_t elems, uint64_t esize, int t)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes, n = c->node, next = mod(n + 1, N), prev = mod(n - 1, N);
    uint64_t slo, shi, rlo, rhi;
    if (t < N - 1) {
        chunk_of(elems, N, mod(n - t, N), &slo, &shi);
        chunk_of(elems, N, mod(n - t - 1, N), &rlo, &rhi);
        int rc = pmc_lane_recv(op, tmp, (rhi - rlo) * esize, prev);
        return rc == PMC_OK ? pmc_lane_send(op, part + slo * esize, (shi - slo) * esize, next) : rc;
    }
    t -= N - 1;
    chunk_of(elems, N, mod(n + 1 - t, N), &slo, &shi);
    chunk_of(elems, N, mod(n - t, N), &rlo, &rhi);
    int rc = pmc_lane_recv(op, part + rlo * esize, (rhi - rlo) * esize, prev);
    return rc == PMC_OK ? pmc_lane_send(op, part + slo * esize, (shi - slo) * esize, next) : rc;
}

/* Reduce's end of the ring: every node sends the chunk it reduced to the
 * root's node, whose lane receives it into its part. */
static int to_root_start(pmc_op *op, unsigned char *part, uint64_t elems, uint64_t esize, int root_node)
{
    pmc_comm *c = op->c;
    const int N = c->nnodes;
    uint64_t clo, chi;
    if (c->node != root_node) {
        chunk_of(elems, N, mod(c->node + 1, N), &clo, &chi);
        return pmc_lane_send(op, part + clo * esize, (chi - clo) * esize, root_node);
    }
    for (int m = 0; m < N; ++m) {
        if (m == root_node) continue;
        chunk_of(elems, N, mod(m + 1, N), &clo, &chi);
        int rc = pmc_lane_recv(op, part + clo * esize, (chi - clo) * esize, m);
        if (rc != PMC_OK) return rc;
    }
    return PMC_OK;
}

int pmc_allreduce_lanes_ring(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype,
                             int rop, int root)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int N = c->nnodes, lane = pmc_lane_of(c), L = c->lanes;
    const int root_node = root >= 0 ? c->node_of[root] : -1;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const uint64_t lo = lane >= 0 ? count * (uint64_t)lane / (uint64_t)L : 0;
    const uint64_t hi = lane >= 0 ? count * (uint64_t)(lane + 1) / (uint64_t)L : 0;
    const uint64_t elems = hi - lo, part_bytes = (elems * esize + 63) & ~(uint64_t)63;
    const uint64_t tmp_bytes = ((elems / (uint64_t)N + 1) * esize + 63) & ~(uint64_t)63;
    /* Ring steps: reduce-scatter, then the allgather (Allreduce) or the
     * chunks' way to the root's node (Reduce). */
    const int steps = root < 0 ? 2 * (N - 1) : N - 1;
    /* f->p: this lane's part, then room for one received chunk; f->j: ring step. */
    PMC_CO_BEGIN(f);
    f->p = pmc_scratch_lane(c, (size_t)(part_bytes + tmp_bytes));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    for (int i = 0; i < n->local_size; ++i)
        c->lcounts[i] = i < L ? count * (uint64_t)(i + 1) / (uint64_t)L - count * (uint64_t)i / (uint64_t)L : 0;
    if (pmc_node_path(c, PMC_COLL_REDUCE_SCATTER_BLOCK, count * esize / (uint64_t)n->local_size, 0, 1) == PMC_PATH_CMA) {
        PMC_AWAIT(f, pmc_reduce_scatter_node_cma(op, f + 1, send, f->p, 0, c->lcounts, dtype, rop));
    } else {
        PMC_AWAIT(f, pmc_reduce_scatter_node_slices(op, f + 1, send, f->p, 0, c->lcounts, dtype, rop));
    }
    if (lane >= 0) {
        for (f->j = 0; f->j < steps; ++f->j) {
            {
                unsigned char *part = f->p;
                int rc = step_start(op, part, part + part_bytes, elems, esize, f->j);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
            if (f->j < N - 1) {
                uint64_t rlo, rhi;
                unsigned char *part = f->p;
                chunk_of(elems, N, mod(c->node - f->j - 1, N), &rlo, &rhi);
                pmc_reduce_into(part + rlo * esize, part + part_bytes, rhi - rlo, dtype, rop);
            }
        }
        if (root >= 0) {
            {
                int rc = to_root_start(op, f->p, elems, esize, root_node);
                if (rc != PMC_OK) {
                    f->pc = 0;
                    return rc;
                }
            }
            PMC_AWAIT(f, pmc_lane_wait(op));
        } else if (elems > 0) {
            memcpy((unsigned char *)recv + lo * esize, f->p, elems * esize);
        }
    }
    for (int i = 0; i < n->local_size; ++i) {
        c->ldispls[i] = i < L ? count * (uint64_t)i / (uint64_t)L * esize : 0;
        c->lcounts[i] = i < L ? count * (uint64_t)(i + 1) / (uint64_t)L * esize - c->ldispls[i] : 0;
    }
    if (root < 0) {
        PMC_AWAIT(f, pmc_lane_share(op, f + 1, recv));
    } else if (c->node == root_node) {
        /* The lanes' parts to the root. */
        if (pmc_single_copy(c, PMC_COLL_GATHER, c->lcounts[0])) {
            PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, f->p, recv, 0, c->lcounts, c->ldispls, c->local_of[root]));
        } else {
            PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, f->p, recv, 0, c->lcounts, c->ldispls, c->local_of[root], 1));
        }
    }
    PMC_CO_END(f);
}

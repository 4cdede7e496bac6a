/* Allreduce and Reduce: algorithm choice. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_allreduce_across(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop)
{
    pmc_comm *c = op->c;
    if (!pmc_use_lanes(c, op->a.coll)) return pmc_allreduce_hier(op, f, send, recv, count, dtype, rop);
    if (pmc_allreduce_lanes_fits(c, count * (uint64_t)pmc_dtype_size(dtype)))
        return pmc_allreduce_lanes_exchange(op, f, send, recv, count, dtype, rop);
    return pmc_allreduce_lanes_ring(op, f, send, recv, count, dtype, rop, -1);
}

/* Whether a Reduce across nodes goes up the single leader: when asked to,
 * and by default for vectors up to PMC_REDUCE_LEADER_MAX whose lanes'
 * exchange would be one round over every node (N <= L+1, no fold). Both then
 * combine the node partials in node order, so the bits are Allreduce's; the
 * leaders' gather sends N-1 partials where the exchange sends N(N-1), and its
 * senders go on once theirs is out (across test-bed hosts over TCP: 1.4-2x
 * faster up to 2 KiB, level at 8-32 KiB; perf/studies/lanes_hosts.md). */
static int reduce_by_leader(const pmc_comm *c, const pmc_args *a)
{
    if (!pmc_use_lanes(c, a->coll)) return 1;
    const uint64_t bytes = a->count * (uint64_t)pmc_dtype_size(a->dtype);
    return c->algorithm[a->coll] == PMC_ALGO_AUTO && bytes <= PMC_REDUCE_LEADER_MAX && c->nnodes <= c->lanes + 1 &&
           pmc_allreduce_lanes_fits(c, bytes);
}

/* Whether a Reduce across nodes gathers every input at the root instead
 * (pmc_reduce_gather_nodes): by default, while every rank's input together
 * is small and Allreduce would take the lanes' exchange, whose order the
 * root then follows. The ranks of a node then do not meet on every call. */
static int reduce_by_gather(const pmc_comm *c, const pmc_args *a)
{
    const uint64_t bytes = a->count * (uint64_t)pmc_dtype_size(a->dtype);
    return c->algorithm[a->coll] == PMC_ALGO_AUTO && bytes <= PMC_REDUCE_GATHER_MAX &&
           bytes * (uint64_t)c->size <= PMC_REDUCE_GATHER_TOTAL_MAX && pmc_allreduce_lanes_fits(c, bytes);
}

/* Reduce across nodes: small vectors by the single leader (above) or the
 * lanes' exchange (the result lands on every node; ranks other than the root
 * keep it aside), large ones by the lane ring ending at the root's node. */
static int reduce_across(pmc_op *op, pmc_frame *f, const void *send, void *recv)
{
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const uint64_t bytes = a->count * (uint64_t)pmc_dtype_size(a->dtype);
    if (reduce_by_gather(c, a)) return pmc_reduce_gather_nodes(op, f, send, recv);
    if (reduce_by_leader(c, a)) return pmc_reduce_hier(op, f, send, recv, a->count, a->dtype, a->op, a->root);
    if (!pmc_allreduce_lanes_fits(c, bytes))
        return pmc_allreduce_lanes_ring(op, f, send, recv, a->count, a->dtype, a->op, a->root);
    void *out = c->rank == a->root ? recv : pmc_scratch_lane(c, (size_t)bytes);
    if (out == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", c->node_ctx.coll);
    return pmc_allreduce_lanes_exchange(op, f, send, out, a->count, a->dtype, a->op);
}

int pmc_allreduce_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const void *send = a->in_place ? a->recvbuf : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (c->size == 1) {
        pmc_took(c, PMC_TRACE_ALGO_SELF);
        if (send != a->recvbuf) memmove(a->recvbuf, send, a->count * (uint64_t)pmc_dtype_size(a->dtype));
    } else if (pmc_use_mpi(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_reduce_mpi_gather(op, f + 1, send, a->recvbuf));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, a->count * (uint64_t)pmc_dtype_size(a->dtype), 1, 0) == PMC_PATH_INLINE) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_inline(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, -1, PMC_INLINE_ALL));
    } else if (c->nnodes == 1 && a->count * (uint64_t)pmc_dtype_size(a->dtype) <= c->flat_max) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_flat(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, c->size));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, a->count * (uint64_t)pmc_dtype_size(a->dtype), 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_allreduce_node_cma(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_allreduce_node_slices(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, -1));
    } else {
        pmc_took(c, pmc_use_lanes(c, a->coll) ? PMC_TRACE_ALGO_LANES : PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_allreduce_across(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op));
    }
    PMC_CO_END(f);
}

int pmc_reduce_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const void *send = a->in_place ? a->recvbuf : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (c->size == 1) {
        pmc_took(c, PMC_TRACE_ALGO_SELF);
        if (send != a->recvbuf) memmove(a->recvbuf, send, a->count * (uint64_t)pmc_dtype_size(a->dtype));
    } else if (pmc_use_mpi(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_reduce_mpi_gather(op, f + 1, send, a->recvbuf));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, a->count * (uint64_t)pmc_dtype_size(a->dtype), 1, 0) == PMC_PATH_INLINE) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_inline(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, a->root,
                                            PMC_INLINE_ALL));
    } else if (c->nnodes == 1 && a->count * (uint64_t)pmc_dtype_size(a->dtype) <= c->flat_max) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_flat(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op,
                                          c->rank == a->root ? c->size : 0));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, a->count * (uint64_t)pmc_dtype_size(a->dtype), 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_cma(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, a->root));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_allreduce_node_slices(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, a->root));
    } else {
        pmc_took(c, reduce_by_gather(c, a)   ? PMC_TRACE_ALGO_MPI
                    : reduce_by_leader(c, a) ? PMC_TRACE_ALGO_LEADER
                                             : PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, reduce_across(op, f + 1, send, a->recvbuf));
    }
    PMC_CO_END(f);
}

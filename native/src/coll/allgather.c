/* Allgather and Allgatherv: algorithm choice. */
#include <string.h>

#include "hier.h"
#include "lanes.h"
#include "node_algos.h"

int pmc_allgather_node(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block)
{
    pmc_comm *c = op->c;
    if (pmc_node_path(c, PMC_COLL_ALLGATHER, block, 1, 0) == PMC_PATH_INLINE) return pmc_gather_node_inline(op, f, send, recv, block, -1);
    if (pmc_node_path(c, PMC_COLL_ALLGATHER, block, 1, 1) == PMC_PATH_CMA)
        return pmc_gather_node_cma(op, f, send, recv, block, NULL, NULL, -1);
    return pmc_gather_node_cico(op, f, send, recv, block, NULL, NULL, -1, 1);
}

int pmc_allgather_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    unsigned char *recv = a->recvbuf;
    const void *send = a->in_place ? recv + (uint64_t)c->rank * a->count : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (c->size == 1) {
        pmc_took(c, PMC_TRACE_ALGO_SELF);
        if (send != recv) memmove(recv, send, a->count);
    } else if (pmc_use_mpi(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_allgather_node(op, f + 1, send, recv, a->count));
    } else if (pmc_use_lanes(c, a->coll) && (uint64_t)c->max_local * a->count <= c->lanes_small_max &&
               (uint64_t)c->size * a->count <= c->data_bytes) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_allgather_lanes_bruck(op, f + 1, send, recv, a->count));
    } else if (pmc_use_lanes(c, a->coll)) {
        pmc_took(c, PMC_TRACE_ALGO_LANES);
        PMC_AWAIT(f, pmc_allgather_lanes_ring(op, f + 1, send, recv, a->count));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_allgather_hier(op, f + 1, send, recv, a->count));
    }
    PMC_CO_END(f);
}

/* Largest block: every rank knows the counts, so all take the same path. */
static uint64_t largest(const uint64_t *counts, int n)
{
    uint64_t m = 0;
    for (int i = 0; i < n; ++i)
        if (counts[i] > m) m = counts[i];
    return m;
}

int pmc_allgatherv_run(pmc_op *op)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    unsigned char *recv = a->recvbuf;
    const void *send = a->in_place ? recv + a->rdispls[c->rank] : a->sendbuf;
    PMC_CO_BEGIN(f);
    if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1 && pmc_node_path(c, a->coll, largest(a->recvcounts, c->size), 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gather_node_cma(op, f + 1, send, recv, a->count, a->recvcounts, a->rdispls, -1));
    } else if (!pmc_use_mpi(c, a->coll) && c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_gather_node_cico(op, f + 1, send, recv, a->count, a->recvcounts, a->rdispls, -1, 1));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_coll_mpi_flat(op, f + 1));
    }
    PMC_CO_END(f);
}

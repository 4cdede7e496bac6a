/* Scan and Exscan: algorithm choice. */
#include <string.h>

#include "hier.h"
#include "node_algos.h"

static int scan_run(pmc_op *op, int exclusive)
{
    pmc_frame *f = &op->f[1];
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const void *send = a->in_place ? a->recvbuf : a->sendbuf;
    const uint64_t bytes = a->count * (uint64_t)pmc_dtype_size(a->dtype);
    PMC_CO_BEGIN(f);
    if (a->count == 0) {
        pmc_took(c, PMC_TRACE_ALGO_SELF); /* nothing crosses ranks */
        f->pc = 0;
        return PMC_OK;
    }
    if (c->size == 1) {
        pmc_took(c, PMC_TRACE_ALGO_SELF);
        if (!exclusive && send != a->recvbuf)
            memmove(a->recvbuf, send, bytes);
    } else if (pmc_use_mpi(c, a->coll) || (c->nnodes > 1 && !c->consecutive)) {
        /* Rank order is not node order: prefixes do not follow the nodes. */
        pmc_took(c, PMC_TRACE_ALGO_MPI);
        PMC_AWAIT(f, pmc_reduce_mpi_gather(op, f + 1, send, a->recvbuf));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, bytes, 1, 0) == PMC_PATH_INLINE) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_reduce_node_inline(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, -1,
                                            exclusive ? PMC_INLINE_EXSCAN : PMC_INLINE_SCAN));
    } else if (c->nnodes == 1 && pmc_node_path(c, a->coll, bytes, 0, 1) == PMC_PATH_CMA) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_scan_node_cma(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, exclusive));
    } else if (c->nnodes == 1) {
        pmc_took(c, PMC_TRACE_ALGO_NODE);
        PMC_AWAIT(f, pmc_scan_node(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, exclusive));
    } else {
        pmc_took(c, PMC_TRACE_ALGO_LEADER);
        PMC_AWAIT(f, pmc_scan_hier(op, f + 1, send, a->recvbuf, a->count, a->dtype, a->op, exclusive));
    }
    PMC_CO_END(f);
}

int pmc_scan_run(pmc_op *op) { return scan_run(op, 0); }
int pmc_exscan_run(pmc_op *op) { return scan_run(op, 1); }

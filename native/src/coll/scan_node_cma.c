/* Scan and Exscan within a node by single copy: every rank exposes its
 * input and combines, chunk by chunk through a small buffer, the inputs of
 * the ranks before it (and, for Scan, its own) straight from their
 * buffers. The data cross between cores once, instead of into the cells
 * and out again, and there is one synchronisation per call: a rank waits
 * for the exposures of the ranks before it, and before returning for the
 * ranks after it, which read its input; in place the result waits aside
 * until they are done. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"

int pmc_scan_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t count, int dtype, int rop,
                      int exclusive)
{
    pmc_comm *c = op->c;
    pmc_node *n = &c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const uint64_t esize = (uint64_t)pmc_dtype_size(dtype);
    const int in_place = send == recv;
    /* others lists the ranks after this one first, then those before it. */
    int *const after = n->others, *const before = n->others + (L - 1 - me);
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, count * esize));
    f->p = pmc_scratch(c, (size_t)(PMC_CMA_REDUCE_CHUNK + (in_place ? count * esize : 0)));
    if (f->p == NULL) {
        f->pc = 0;
        return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory", n->coll);
    }
    if (me > 0) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, before, me, f->aux));
    {
        const int upto = exclusive ? me : me + 1;
        unsigned char *tmp = f->p;
        int rc = PMC_OK;
        if (upto > 0)
            rc = pmc_cma_reduce_from(op, f->aux, upto, send, 0, count, in_place ? tmp + PMC_CMA_REDUCE_CHUNK : recv,
                                     tmp, dtype, rop, 0);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    if (me < L - 1) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, after, L - 1 - me, f->aux));
    /* Exscan leaves rank 0's receive buffer as it was. */
    if (in_place && (exclusive ? me : me + 1) > 0)
        memcpy(recv, (unsigned char *)f->p + PMC_CMA_REDUCE_CHUNK, count * esize);
    n->step = f->aux;
    PMC_CO_END(f);
}

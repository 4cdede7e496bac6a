/* Alltoall within a node by single copy: every rank exposes its send
 * buffer and copies its block out of each peer's, starting at its right
 * neighbour, so each buffer has about one reader at a time. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_alltoall_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const unsigned char *in = send;
    unsigned char *out = recv;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f[1].aux = f->aux;
    PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, (uint64_t)L * block));
    if (in + (uint64_t)me * block != out + (uint64_t)me * block)
        pmc_bulk_copy(out + (uint64_t)me * block, in + (uint64_t)me * block, block, n->stream_min);
    for (f->j = 0; f->j < L - 1; ++f->j) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &n->others[f->j], 1, f->aux));
        {
            const int peer = n->others[f->j];
            int rc = pmc_cma_fetch_from(op, peer, f->aux, (uint64_t)me * block, out + (uint64_t)peer * block, block);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    n->step = f->aux;
    PMC_CO_END(f);
}

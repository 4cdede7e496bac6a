/* Scatter within a node by single copy: the root exposes its send buffer
 * and every other rank copies its own block out of it. At most
 * pmc_cma_readers() readers work on the root at a time: a reader starts
 * once the reader that many places before it is done. */
#include <string.h>

#include "../comm.h"
#include "node_algos.h"
#include "../node/bulk_copy.h"

int pmc_scatter_node_cma(pmc_op *op, pmc_frame *f, const void *send, void *recv, uint64_t block, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int me = n->local_rank, L = n->local_size;
    const int pos = (me - root - 1 + L) % L; /* order among the readers */
    const unsigned char *in = send;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    if (me == root) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, send, (uint64_t)L * block));
        if (recv != NULL && recv != in + (uint64_t)me * block) pmc_bulk_copy(recv, in + (uint64_t)me * block, block, n->stream_min);
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, n->others, L - 1, f->aux));
    } else {
        if (pos >= pmc_cma_readers(n)) {
            f->peers[0] = (root + 1 + pos - pmc_cma_readers(n)) % L;
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, 1, f->aux));
        }
        f->peers[1] = root;
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &f->peers[1], 1, f->aux));
        {
            int rc = pmc_cma_fetch_from(op, root, f->aux, (uint64_t)me * block, recv, block);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    }
    n->step = f->aux;
    PMC_CO_END(f);
}

/* Bcast within a node by single copy down a binary tree rooted at the
 * root: each rank copies the whole message from its parent's buffer, then
 * exposes its own copy to its children. No buffer has more than two
 * readers at a time, and every byte is copied once per receiver. */
#include "../comm.h"
#include "node_algos.h"

int pmc_bcast_node_cma(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int L = n->local_size;
    const int v = (n->local_rank - root + L) % L; /* position in the tree */
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->j = 0; /* children, in peers[0..j) */
    for (int k = 1; k <= 2; ++k)
        if (2 * v + k < L) f->peers[f->j++] = (2 * v + k + root) % L;
    f->peers[2] = ((v - 1) / 2 + root) % L; /* parent */
    if (v != 0) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &f->peers[2], 1, f->aux));
        {
            int rc = pmc_cma_fetch_from(op, f->peers[2], f->aux, 0, buf, bytes);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    if (f->j > 0) {
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, buf, bytes));
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    /* The buffer stays as it is until the children have their copy. */
    if (f->j > 0) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, f->j, f->aux));
    n->step = f->aux;
    PMC_CO_END(f);
}

/* Bcast within a node by single copy down a binary tree rooted at the
 * root: each rank copies the whole message from its parent's buffer, then
 * exposes its own copy to its children. No buffer has more than two
 * readers at a time, and every byte is copied once per receiver.
 *
 * Between 2 ranks the root would otherwise wait idle while the receiver
 * copies: there the two split the copy. The receiver exposes its buffer as
 * well, reads the first half from the root while the root writes the
 * second half into it, and returns once the root says (its done flag) that
 * its half is in. Not when the two share one CPU: the halves would only
 * take turns. (Deeper trees keep one reader per copy: a parent there has
 * its own parent's copy to wait for and up to two children.) */
#include "../comm.h"
#include "node_algos.h"

/* Where a split copy's second half starts (whole pages; 0: too small to split). */
static uint64_t split_at(uint64_t bytes) { return (bytes / 2) & ~(uint64_t)4095; }

int pmc_bcast_node_cma(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int L = n->local_size;
    const int v = (n->local_rank - root + L) % L; /* position in the tree */
    const int split = L == 2 && !n->yield_now && split_at(bytes) > 0;
    const int split_up = split && v == 1;   /* the root writes my second half */
    const int split_down = split && v == 0; /* I write the receiver's */
    const uint64_t half = split_at(bytes);
    unsigned char *data = buf;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->j = 0; /* children, in peers[0..j) */
    for (int k = 1; k <= 2; ++k)
        if (2 * v + k < L) f->peers[f->j++] = (2 * v + k + root) % L;
    f->peers[2] = ((v - 1) / 2 + root) % L; /* parent */
    if (split_up) {
        /* The parent writes into my buffer: it needs my descriptor first. */
        f[1].aux = f->aux;
        PMC_AWAIT(f, pmc_cma_expose(op, f + 1, buf, bytes));
    }
    if (v != 0) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, &f->peers[2], 1, f->aux));
        {
            /* A split copy reads and writes within both sizes: compare them. */
            int rc = split_up ? pmc_cma_expect_len(op, f->peers[2], f->aux, bytes) : PMC_OK;
            if (rc == PMC_OK) rc = pmc_cma_fetch_from(op, f->peers[2], f->aux, 0, buf, split_up ? half : bytes);
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
    if (split_down) {
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_LINE, f->peers, 1, f->aux));
        {
            int rc = pmc_cma_expect_len(op, f->peers[0], f->aux, bytes);
            if (rc == PMC_OK) rc = pmc_cma_store_to(op, f->peers[0], f->aux, half, data + half, bytes - half);
            if (rc != PMC_OK) {
                f->pc = 0;
                return rc;
            }
        }
    }
    pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    /* My second half is in once my parent is done. */
    if (split_up) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, &f->peers[2], 1, f->aux));
    /* The buffer stays as it is until the children have their copy. */
    if (f->j > 0) PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_ACK, f->peers, f->j, f->aux));
    n->step = f->aux;
    PMC_CO_END(f);
}

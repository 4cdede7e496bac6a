/* Bcast within a node by single copy down a binary tree rooted at the
 * root: each rank copies the whole message from its parent's buffer, then
 * exposes its own copy to its children. No buffer has more than two
 * readers at a time, and every byte is copied once per receiver.
 *
 * A parent with a single child that is a leaf (2 ranks: the root and its
 * receiver) would otherwise wait idle while the child copies: there the
 * two split the copy. The child exposes its buffer as well, reads the first
 * half from the parent while the parent writes the second half into it,
 * and returns once the parent says (its done flag) that its half is in.
 * Not when the node's ranks outnumber its CPUs: the parent's half would
 * only take turns with the child's. */
#include "../comm.h"
#include "node_algos.h"

/* Tree position v of L ranks (0 is the root). */
static int children_of(int v, int L) { return (2 * v + 1 < L) + (2 * v + 2 < L); }
static int parent_of(int v) { return (v - 1) / 2; }

/* Where a split copy's second half starts (whole pages; 0: too small to split). */
static uint64_t split_at(uint64_t bytes) { return (bytes / 2) & ~(uint64_t)4095; }

/* Whether the pair (v's parent, v) splits the copy of `bytes`. */
static int pair_splits(const pmc_node *n, int v, int L, uint64_t bytes)
{
    return v != 0 && !n->yield_now && children_of(v, L) == 0 && children_of(parent_of(v), L) == 1 &&
           split_at(bytes) > 0;
}

int pmc_bcast_node_cma(pmc_op *op, pmc_frame *f, void *buf, uint64_t bytes, int root)
{
    pmc_node *n = &op->c->node_ctx;
    const int L = n->local_size;
    const int v = (n->local_rank - root + L) % L; /* position in the tree */
    const int split_up = pair_splits(n, v, L, bytes);             /* my parent writes my second half */
    const int split_down = children_of(v, L) == 1 && pair_splits(n, 2 * v + 1, L, bytes); /* I write it */
    const uint64_t half = split_at(bytes);
    unsigned char *data = buf;
    PMC_CO_BEGIN(f);
    f->aux = n->step + 1;
    f->j = 0; /* children, in peers[0..j) */
    for (int k = 1; k <= 2; ++k)
        if (2 * v + k < L) f->peers[f->j++] = (2 * v + k + root) % L;
    f->peers[2] = (parent_of(v) + root) % L;
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

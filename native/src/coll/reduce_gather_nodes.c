/* Reduce of small vectors across nodes: every input goes to the root in one
 * gather through the wrapped communicator, and the root combines them in
 * the order the nodes would (see hier.h). The node reduction, the leaders'
 * gather and the hand-off inside the root's node each make a node's ranks
 * meet on every call; here a rank waits only for its subtree of MPI's
 * gather (a leaf not at all), so in a loop ranks run ahead as MPI's eager
 * sends let them. */
#include <string.h>

#include "../reduce/reduce_ops.h"
#include "hier.h"
#include "lanes.h"

int pmc_reduce_gather_nodes(pmc_op *op, pmc_frame *f, const void *send, void *recv)
{
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const uint64_t bytes = a->count * (uint64_t)pmc_dtype_size(a->dtype);
    const int root = c->rank == a->root;
    PMC_CO_BEGIN(f);
    {
        /* The root's scratch: [every rank's input, rank order | every node's partial, node order] */
        int rc = pmc_reduce_inputs_start(op, f, send, bytes, root, bytes * (uint64_t)c->nnodes);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Igather"));
    if (root) {
        const unsigned char *all = f->p;
        unsigned char *partials = (unsigned char *)f->p + (uint64_t)c->size * bytes;
        for (int j = 0; j < c->nnodes; ++j) {
            /* Node j's partial: its inputs by local rank, as its node reduction folds them. */
            const int *member = c->members + c->member_start[j];
            unsigned char *into = partials + (uint64_t)j * bytes;
            if (c->node_count[j] == 1) {
                memcpy(into, all + (uint64_t)member[0] * bytes, bytes);
                continue;
            }
            pmc_reduce_to(into, all + (uint64_t)member[0] * bytes, all + (uint64_t)member[1] * bytes, a->count,
                          a->dtype, a->op);
            for (int i = 2; i < c->node_count[j]; ++i)
                pmc_reduce_into(into, all + (uint64_t)member[i] * bytes, a->count, a->dtype, a->op);
        }
        /* The partials as Allreduce's exchange combines them (on at most
         * L+1 nodes: in node order, as the single leader does too). */
        pmc_allreduce_lanes_exchange_order(c, partials, a->count, a->dtype, a->op);
        memcpy(recv, partials, bytes);
    }
    PMC_CO_END(f);
}

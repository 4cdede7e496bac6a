/* Barrier within a node: one flag per rank, every rank reads every flag.
 * One cache-line transfer deep, the shortest possible for small nodes. */
#include "../comm.h"
#include "node_algos.h"

int pmc_barrier_node_flags(pmc_op *op, pmc_frame *f)
{
    pmc_node *n = &op->c->node_ctx;
    PMC_CO_BEGIN(f);
    if (n->local_size > 1) {
        f->aux = n->step + 1;
        pmc_node_post(n, PMC_FLAG_SEQ, f->aux);
        PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->aux));
        n->step = f->aux;
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    }
    PMC_CO_END(f);
}

int pmc_barrier_node_fanin(pmc_op *op, pmc_frame *f)
{
    pmc_node *n = &op->c->node_ctx;
    PMC_CO_BEGIN(f);
    if (n->local_size > 1) {
        f->aux = n->step + 1;
        if (n->local_rank == 0) {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, n->others, n->local_size - 1, f->aux));
        } else {
            pmc_node_post(n, PMC_FLAG_SEQ, f->aux);
        }
        n->step = f->aux;
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    }
    PMC_CO_END(f);
}

int pmc_barrier_node_fanout(pmc_op *op, pmc_frame *f)
{
    static const int leader = 0;
    pmc_node *n = &op->c->node_ctx;
    PMC_CO_BEGIN(f);
    if (n->local_size > 1) {
        f->aux = n->step + 1;
        if (n->local_rank == 0) {
            pmc_node_post(n, PMC_FLAG_SEQ, f->aux);
        } else {
            PMC_AWAIT(f, pmc_op_wait(op, PMC_FLAG_SEQ, &leader, 1, f->aux));
        }
        n->step = f->aux;
        pmc_node_post(n, PMC_FLAG_ACK, f->aux);
    }
    PMC_CO_END(f);
}

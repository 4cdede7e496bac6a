/* Barrier within a node: one flag per rank, every rank reads every flag.
 * One cache-line transfer deep, the shortest possible for small nodes. */
#include "node_algos.h"
#include "pymcoll.h"

int pmc_barrier_node_flags(pmc_node *n)
{
    if (n->local_size == 1) return PMC_OK;
    uint64_t s = n->step + 1;
    pmc_node_post(n, PMC_FLAG_SEQ, s);
    int rc = pmc_node_wait(n, PMC_FLAG_SEQ, n->others, n->local_size - 1, s);
    if (rc != PMC_OK) return rc;
    n->step = s;
    pmc_node_post(n, PMC_FLAG_ACK, s);
    return PMC_OK;
}

int pmc_barrier_node_fanin(pmc_node *n)
{
    if (n->local_size == 1) return PMC_OK;
    uint64_t s = n->step + 1;
    if (n->local_rank == 0) {
        int rc = pmc_node_wait(n, PMC_FLAG_SEQ, n->others, n->local_size - 1, s);
        if (rc != PMC_OK) return rc;
    } else {
        pmc_node_post(n, PMC_FLAG_SEQ, s);
    }
    n->step = s;
    pmc_node_post(n, PMC_FLAG_ACK, s);
    return PMC_OK;
}

int pmc_barrier_node_fanout(pmc_node *n)
{
    if (n->local_size == 1) return PMC_OK;
    uint64_t s = n->step + 1;
    if (n->local_rank == 0) {
        pmc_node_post(n, PMC_FLAG_SEQ, s);
    } else {
        static const int leader = 0;
        int rc = pmc_node_wait(n, PMC_FLAG_SEQ, &leader, 1, s);
        if (rc != PMC_OK) return rc;
    }
    n->step = s;
    pmc_node_post(n, PMC_FLAG_ACK, s);
    return PMC_OK;
}

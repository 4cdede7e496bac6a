/* Hierarchical compositions: node algorithms inside each node, MPI among
 * the nodes' leaders (local rank 0, i.e. lane 0, ranked by node index). */
#ifndef PMC_COLL_HIER_H
#define PMC_COLL_HIER_H

#include "../comm.h"

int pmc_barrier_hier(pmc_comm *c);
int pmc_bcast_hier(pmc_comm *c, void *buf, uint64_t bytes, int root);
int pmc_allgather_hier(pmc_comm *c, const void *send, void *recv, uint64_t block);

#endif

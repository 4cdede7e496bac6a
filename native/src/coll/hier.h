/* Hierarchical compositions: node algorithms inside each node, MPI among
 * the nodes' leaders (local rank 0, i.e. lane 0, ranked by node index). */
#ifndef PMC_COLL_HIER_H
#define PMC_COLL_HIER_H

#include "../comm.h"

int pmc_barrier_hier(pmc_comm *c);
int pmc_bcast_hier(pmc_comm *c, void *buf, uint64_t bytes, int root);
int pmc_allgather_hier(pmc_comm *c, const void *send, void *recv, uint64_t block);

int pmc_allreduce_hier(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op);
int pmc_reduce_hier(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op, int root);

/* Without a segment: gather every rank's input (to `root`, or to all when
 * root < 0) through the wrapped MPI communicator and combine in rank order,
 * which works for every element type, bfloat16 included. */
int pmc_reduce_mpi_gather(pmc_comm *c, const void *send, void *recv, uint64_t count, int dtype, int op, int root);

/* Combines nblocks consecutive blocks of `count` elements in block order into out. */
void pmc_combine_blocks(void *out, const unsigned char *blocks, int nblocks, uint64_t count, int dtype, int op);

#endif

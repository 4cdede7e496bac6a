/* Argument checks shared by Reduce and Allreduce. */
#ifndef PMC_COLL_REDUCE_ENTRY_H
#define PMC_COLL_REDUCE_ENTRY_H

#include "../comm.h"

/* Checks type, op, size and buffer; sets *bytes to the message size. */
int pmc_reduce_check(pmc_comm *c, const char *name, const void *recvbuf, uint64_t count, int dtype, int op,
                     int needs_recv, uint64_t *bytes);

#endif

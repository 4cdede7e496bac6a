/* Shortcut entry points of the most used collectives: argument lists
 * instead of a pmc_args, for C callers and Python's fast paths. Each fills
 * a pmc_args and goes through pmc_run like every other call. */
#include <string.h>

#include "hier.h"

static inline pmc_args args_of(int coll)
{
    pmc_args a;
    memset(&a, 0, sizeof(a));
    a.coll = coll;
    return a;
}

int pmc_barrier(pmc_comm *c)
{
    pmc_args a = args_of(PMC_COLL_BARRIER);
    return pmc_run(c, &a);
}

int pmc_bcast(pmc_comm *c, void *buf, uint64_t bytes, int root)
{
    pmc_args a = args_of(PMC_COLL_BCAST);
    a.recvbuf = buf;
    a.count = bytes;
    a.root = root;
    return pmc_run(c, &a);
}

int pmc_allgather(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t block_bytes)
{
    pmc_args a = args_of(PMC_COLL_ALLGATHER);
    a.in_place = sendbuf == NULL && block_bytes > 0; /* (empty buffers may have NULL pointers) */
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = block_bytes;
    return pmc_run(c, &a);
}

int pmc_allreduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    pmc_args a = args_of(PMC_COLL_ALLREDUCE);
    a.in_place = sendbuf == NULL && count > 0; /* (empty buffers may have NULL pointers) */
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    return pmc_run(c, &a);
}

int pmc_reduce(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op, int root)
{
    pmc_args a = args_of(PMC_COLL_REDUCE);
    a.in_place = sendbuf == NULL && count > 0; /* (empty buffers may have NULL pointers) */
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    a.root = root;
    return pmc_run(c, &a);
}

int pmc_gather(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes, int root)
{
    pmc_args a = args_of(PMC_COLL_GATHER);
    a.in_place = sendbuf == NULL && bytes > 0;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = bytes;
    a.root = root;
    return pmc_run(c, &a);
}

int pmc_scatter(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes, int root)
{
    pmc_args a = args_of(PMC_COLL_SCATTER);
    a.in_place = recvbuf == NULL && bytes > 0 && c != NULL && c->rank == root;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = bytes;
    a.root = root;
    return pmc_run(c, &a);
}

int pmc_alltoall(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t bytes)
{
    pmc_args a = args_of(PMC_COLL_ALLTOALL);
    a.in_place = sendbuf == NULL && bytes > 0;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = bytes;
    return pmc_run(c, &a);
}

static int reduction(pmc_comm *c, int coll, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    pmc_args a = args_of(coll);
    a.in_place = sendbuf == NULL && count > 0;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = count;
    a.dtype = dtype;
    a.op = op;
    return pmc_run(c, &a);
}

int pmc_reduce_scatter_block(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    return reduction(c, PMC_COLL_REDUCE_SCATTER_BLOCK, sendbuf, recvbuf, count, dtype, op);
}

int pmc_scan(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    return reduction(c, PMC_COLL_SCAN, sendbuf, recvbuf, count, dtype, op);
}

int pmc_exscan(pmc_comm *c, const void *sendbuf, void *recvbuf, uint64_t count, int dtype, int op)
{
    return reduction(c, PMC_COLL_EXSCAN, sendbuf, recvbuf, count, dtype, op);
}

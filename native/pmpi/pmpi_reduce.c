/* MPI_Allreduce, MPI_Reduce, MPI_Reduce_scatter_block, MPI_Reduce_scatter,
 * MPI_Scan and MPI_Exscan (and their _c forms) through the core: a
 * predefined op on a datatype the core has a kernel for. MPI makes every
 * rank pass the same datatype and op, so every rank takes the same path. */
#include <string.h>

#include "pmpi.h"

/* Where a reduction goes, with the core's element type and op in a. Reduce
 * passes its root (others -1) and send buffer: a root out of range, or
 * MPI_IN_PLACE on a rank other than the root, are MPI's errors to report. */
static pmpi_comm *settle(MPI_Comm comm, int coll, int large, MPI_Datatype type, MPI_Op op, int bad, int root,
                         const void *sbuf, pmc_args *a)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    memset(a, 0, sizeof(*a));
    a->coll = coll;
    if (s != NULL && root >= 0) bad = bad || root >= s->size || (sbuf == MPI_IN_PLACE && s->rank != root);
    if (s != NULL && root < -1) bad = 1;
    if (s != NULL) {
        a->op = pmpi_reduce_op(op);
        a->dtype = pmpi_reduce_dtype(type, a->op);
        if (a->op < 0 || a->dtype < 0) {
            route = a->op < 0 ? PMPI_ROUTE_USER_OP : PMPI_ROUTE_TYPE;
            s = NULL;
        }
    }
    return pmpi_settle(s, route, s != NULL && bad, coll, large);
}

static int run(pmpi_comm *s, pmc_args *a, const void *sbuf, void *rbuf, int large)
{
    a->in_place = sbuf == MPI_IN_PLACE;
    a->sendbuf = a->in_place ? NULL : sbuf;
    a->recvbuf = rbuf;
    return pmpi_status(s, a->coll, large, pmc_run(s->core, a));
}

static int allreduce(const void *sbuf, void *rbuf, MPI_Count count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                     int large)
{
    pmc_args a;
    pmpi_comm *s = settle(comm, PMC_COLL_ALLREDUCE, large, type, op, count < 0, -1, sbuf, &a);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Allreduce(sbuf, rbuf, (int)count, type, op, comm),
                         PMPI_Allreduce_c(sbuf, rbuf, count, type, op, comm));
    a.count = (uint64_t)count;
    return run(s, &a, sbuf, rbuf, large);
}

static int reduce(const void *sbuf, void *rbuf, MPI_Count count, MPI_Datatype type, MPI_Op op, int root,
                  MPI_Comm comm, int large)
{
    pmc_args a;
    pmpi_comm *s = settle(comm, PMC_COLL_REDUCE, large, type, op, count < 0 || root < 0, root < 0 ? -2 : root, sbuf, &a);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Reduce(sbuf, rbuf, (int)count, type, op, root, comm),
                         PMPI_Reduce_c(sbuf, rbuf, count, type, op, root, comm));
    a.count = (uint64_t)count;
    a.root = root;
    return run(s, &a, sbuf, rbuf, large);
}

static int reduce_scatter_block(const void *sbuf, void *rbuf, MPI_Count count, MPI_Datatype type, MPI_Op op,
                                MPI_Comm comm, int large)
{
    pmc_args a;
    pmpi_comm *s = settle(comm, PMC_COLL_REDUCE_SCATTER_BLOCK, large, type, op, count < 0, -1, sbuf, &a);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Reduce_scatter_block(sbuf, rbuf, (int)count, type, op, comm),
                         PMPI_Reduce_scatter_block_c(sbuf, rbuf, count, type, op, comm));
    a.count = (uint64_t)count;
    return run(s, &a, sbuf, rbuf, large);
}

static int reduce_scatter(const void *sbuf, void *rbuf, const void *counts, MPI_Datatype type, MPI_Op op,
                          MPI_Comm comm, int large)
{
    pmc_args a;
    int size = 0, bad = counts == NULL;
    if (!bad && comm != MPI_COMM_NULL && PMPI_Comm_size(comm, &size) != MPI_SUCCESS) bad = 1;
    for (int i = 0; !bad && i < size; ++i) bad = pmpi_at((pmpi_array){counts, large, 0}, i) < 0;
    pmpi_comm *s = settle(comm, PMC_COLL_REDUCE_SCATTER, large, type, op, bad, -1, sbuf, &a);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Reduce_scatter(sbuf, rbuf, counts, type, op, comm),
                         PMPI_Reduce_scatter_c(sbuf, rbuf, counts, type, op, comm));
    /* Receive counts in elements, as the core takes them. */
    uint64_t *rc = s->v + 2 * s->size;
    for (int i = 0; i < s->size; ++i) rc[i] = (uint64_t)pmpi_at((pmpi_array){counts, large, 0}, i);
    a.recvcounts = rc;
    return run(s, &a, sbuf, rbuf, large);
}

static int scan(int coll, const void *sbuf, void *rbuf, MPI_Count count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                int large)
{
    pmc_args a;
    pmpi_comm *s = settle(comm, coll, large, type, op, count < 0, -1, sbuf, &a);
    if (s == NULL) {
        if (coll == PMC_COLL_SCAN)
            return PMPI_PASS(large, PMPI_Scan(sbuf, rbuf, (int)count, type, op, comm),
                             PMPI_Scan_c(sbuf, rbuf, count, type, op, comm));
        return PMPI_PASS(large, PMPI_Exscan(sbuf, rbuf, (int)count, type, op, comm),
                         PMPI_Exscan_c(sbuf, rbuf, count, type, op, comm));
    }
    a.count = (uint64_t)count;
    return run(s, &a, sbuf, rbuf, large);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return allreduce(sendbuf, recvbuf, count, datatype, op, comm, 0);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
               MPI_Comm comm)
{
    return reduce(sendbuf, recvbuf, count, datatype, op, root, comm, 0);
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm)
{
    return reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, 0);
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op,
                       MPI_Comm comm)
{
    return reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, 0);
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return scan(PMC_COLL_SCAN, sendbuf, recvbuf, count, datatype, op, comm, 0);
}

int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return scan(PMC_COLL_EXSCAN, sendbuf, recvbuf, count, datatype, op, comm, 0);
}

#if PMPI_HAS_LARGE
int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                    MPI_Comm comm)
{
    return allreduce(sendbuf, recvbuf, count, datatype, op, comm, 1);
}

int MPI_Reduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, int root,
                 MPI_Comm comm)
{
    return reduce(sendbuf, recvbuf, count, datatype, op, root, comm, 1);
}

int MPI_Reduce_scatter_block_c(const void *sendbuf, void *recvbuf, MPI_Count recvcount, MPI_Datatype datatype,
                               MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, 1);
}

int MPI_Reduce_scatter_c(const void *sendbuf, void *recvbuf, const MPI_Count recvcounts[], MPI_Datatype datatype,
                         MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, 1);
}

int MPI_Scan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    return scan(PMC_COLL_SCAN, sendbuf, recvbuf, count, datatype, op, comm, 1);
}

int MPI_Exscan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                 MPI_Comm comm)
{
    return scan(PMC_COLL_EXSCAN, sendbuf, recvbuf, count, datatype, op, comm, 1);
}
#endif

/* MPI_Barrier, MPI_Bcast, MPI_Gather, MPI_Scatter, MPI_Allgather and
 * MPI_Alltoall (and their _c forms) through the core, which moves the same
 * number of bytes for every rank. */
#include <string.h>

#include "pmpi.h"

static pmc_args args_of(int coll)
{
    pmc_args a;
    memset(&a, 0, sizeof(a));
    a.coll = coll;
    return a;
}

int MPI_Barrier(MPI_Comm comm)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    s = pmpi_settle(s, route, 0, PMC_COLL_BARRIER, 0);
    if (s == NULL) return PMPI_Barrier(comm);
    return pmpi_status(s, PMC_COLL_BARRIER, 0, pmc_barrier(s->core));
}

static int bcast(void *buf, MPI_Count count, MPI_Datatype type, int root, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    pmpi_type t;
    const int bad = s != NULL && (count < 0 || root < 0 || root >= s->size || pmpi_type_of(type, &t));
    s = pmpi_settle(s, route, bad, PMC_COLL_BCAST, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Bcast(buf, (int)count, type, root, comm),
                         PMPI_Bcast_c(buf, count, type, root, comm));
    void *view = NULL;
    const int me = s->rank == root;
    int rc = pmpi_view(s, 1, &t, buf, (uint64_t)count, me, &view);
    if (rc == PMC_OK) rc = pmc_bcast(s->core, view, (uint64_t)count * t.size, root);
    if (rc == PMC_OK && !me) rc = pmpi_unview(&t, view, (uint64_t)count, buf);
    return pmpi_status(s, PMC_COLL_BCAST, large, rc);
}

/* One side of a rooted or all-to-all call: the caller's buffer of `elems`
 * elements of a datatype. */
typedef struct side {
    pmpi_type t;
    const void *buf;
    uint64_t elems;
} side;

static int run_uniform(pmpi_comm *s, int coll, int large, pmc_args *a, const side *snd, side *rcv, int load_recv,
                       int unload_recv)
{
    void *sv = NULL, *rv = NULL;
    int rc = PMC_OK;
    if (snd != NULL) rc = pmpi_view(s, 0, &snd->t, snd->buf, snd->elems, 1, &sv);
    if (rc == PMC_OK && rcv != NULL) rc = pmpi_view(s, 1, &rcv->t, rcv->buf, rcv->elems, load_recv, &rv);
    if (rc == PMC_OK) {
        a->sendbuf = sv;
        a->recvbuf = rv;
        rc = pmc_run(s->core, a);
    }
    if (rc == PMC_OK && rcv != NULL && unload_recv) rc = pmpi_unview(&rcv->t, rv, rcv->elems, (void *)(uintptr_t)rcv->buf);
    return pmpi_status(s, coll, large, rc);
}

static int gather(const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, MPI_Count rcount,
                  MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    side snd = {.buf = sbuf, .elems = (uint64_t)scount}, rcv = {.buf = rbuf};
    const int in_place = sbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = pmpi_rooted_bad(s, root, in_place, scount, stype, &snd.t);
        if (!bad && s->rank == root) bad = rcount < 0 || pmpi_type_of(rtype, &rcv.t);
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_GATHER, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Gather(sbuf, (int)scount, stype, rbuf, (int)rcount, rtype, root, comm),
                         PMPI_Gather_c(sbuf, scount, stype, rbuf, rcount, rtype, root, comm));
    const int me = s->rank == root;
    pmc_args a = args_of(PMC_COLL_GATHER);
    a.root = root;
    a.in_place = in_place;
    a.count = in_place ? (uint64_t)rcount * rcv.t.size : (uint64_t)scount * snd.t.size;
    rcv.elems = (uint64_t)rcount * (uint64_t)s->size;
    return run_uniform(s, PMC_COLL_GATHER, large, &a, in_place ? NULL : &snd, me ? &rcv : NULL, in_place, 1);
}

static int scatter(const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, MPI_Count rcount,
                   MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    side snd = {.buf = sbuf}, rcv = {.buf = rbuf, .elems = (uint64_t)rcount};
    const int in_place = rbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = pmpi_rooted_bad(s, root, in_place, rcount, rtype, &rcv.t);
        if (!bad && s->rank == root) bad = scount < 0 || pmpi_type_of(stype, &snd.t);
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_SCATTER, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Scatter(sbuf, (int)scount, stype, rbuf, (int)rcount, rtype, root, comm),
                         PMPI_Scatter_c(sbuf, scount, stype, rbuf, rcount, rtype, root, comm));
    const int me = s->rank == root;
    pmc_args a = args_of(PMC_COLL_SCATTER);
    a.root = root;
    a.in_place = in_place;
    a.count = in_place ? (uint64_t)scount * snd.t.size : (uint64_t)rcount * rcv.t.size;
    snd.elems = (uint64_t)scount * (uint64_t)s->size;
    return run_uniform(s, PMC_COLL_SCATTER, large, &a, me ? &snd : NULL, in_place ? NULL : &rcv, 0, 1);
}

/* Allgather and Alltoall: every rank sends and receives. */
static int everyone(int coll, const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, MPI_Count rcount,
                    MPI_Datatype rtype, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    side snd = {.buf = sbuf}, rcv = {.buf = rbuf};
    const int in_place = sbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = rcount < 0 || pmpi_type_of(rtype, &rcv.t);
        if (!bad && !in_place) bad = scount < 0 || pmpi_type_of(stype, &snd.t);
    }
    s = pmpi_settle(s, route, bad, coll, large);
    if (s == NULL) {
        if (coll == PMC_COLL_ALLGATHER)
            return PMPI_PASS(large, PMPI_Allgather(sbuf, (int)scount, stype, rbuf, (int)rcount, rtype, comm),
                             PMPI_Allgather_c(sbuf, scount, stype, rbuf, rcount, rtype, comm));
        return PMPI_PASS(large, PMPI_Alltoall(sbuf, (int)scount, stype, rbuf, (int)rcount, rtype, comm),
                         PMPI_Alltoall_c(sbuf, scount, stype, rbuf, rcount, rtype, comm));
    }
    pmc_args a = args_of(coll);
    a.in_place = in_place;
    a.count = in_place ? (uint64_t)rcount * rcv.t.size : (uint64_t)scount * snd.t.size;
    /* Allgather sends one block, Alltoall one per rank. */
    snd.elems = (uint64_t)scount * (coll == PMC_COLL_ALLTOALL ? (uint64_t)s->size : 1u);
    rcv.elems = (uint64_t)rcount * (uint64_t)s->size;
    return run_uniform(s, coll, large, &a, in_place ? NULL : &snd, &rcv, in_place, 1);
}

int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return bcast(buffer, count, datatype, root, comm, 0);
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, 0);
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, 0);
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm)
{
    return everyone(PMC_COLL_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 0);
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,
                 MPI_Datatype recvtype, MPI_Comm comm)
{
    return everyone(PMC_COLL_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 0);
}

#if PMPI_HAS_LARGE
int MPI_Bcast_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    return bcast(buffer, count, datatype, root, comm, 1);
}

int MPI_Gather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,
                 MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, 1);
}

int MPI_Scatter_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,
                  MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, 1);
}

int MPI_Allgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                    MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return everyone(PMC_COLL_ALLGATHER, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 1);
}

int MPI_Alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                   MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return everyone(PMC_COLL_ALLTOALL, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, 1);
}
#endif

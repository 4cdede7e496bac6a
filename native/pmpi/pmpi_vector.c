/* MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv and MPI_Alltoallv (and their
 * _c forms) through the core, which takes counts and displacements in
 * bytes. */
#include <string.h>

#include "pmpi.h"

/* Array views of the entry's arguments. */
#define COUNTS(p) ((pmpi_array){(p), large, 0})
#define DISPLS(p) ((pmpi_array){(p), large, 1})

/* The core's arrays of this communicator: send counts, send displacements,
 * receive counts, receive displacements. */
#define SC(s) ((s)->v)
#define SD(s) ((s)->v + (s)->size)
#define RC(s) ((s)->v + 2 * (s)->size)
#define RD(s) ((s)->v + 3 * (s)->size)

static pmc_args args_of(int coll, int root)
{
    pmc_args a;
    memset(&a, 0, sizeof(a));
    a.coll = coll;
    a.root = root;
    return a;
}

static int gatherv(const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, const void *rcounts,
                   const void *displs, MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    pmpi_type st, rt;
    const int in_place = sbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = pmpi_rooted_bad(s, root, in_place, scount, stype, &st);
        if (!bad && s->rank == root) bad = rcounts == NULL || displs == NULL || pmpi_type_of(rtype, &rt) ||
                              pmpi_any_negative(s, COUNTS(rcounts));
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_GATHERV, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Gatherv(sbuf, (int)scount, stype, rbuf, rcounts, displs, rtype, root, comm),
                         PMPI_Gatherv_c(sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm));
    const int me = s->rank == root;
    pmc_args a = args_of(PMC_COLL_GATHERV, root);
    a.in_place = in_place;
    void *rv = NULL, *sv = NULL;
    int rc = PMC_OK;
    if (me) {
        rc = pmpi_vview(s, 1, &rt, rbuf, COUNTS(rcounts), DISPLS(displs), in_place, RC(s), RD(s), &rv);
        a.recvcounts = RC(s);
        a.rdispls = RD(s);
    }
    if (rc == PMC_OK && !in_place) rc = pmpi_view(s, 0, &st, sbuf, (uint64_t)scount, 1, &sv);
    if (rc == PMC_OK) {
        a.count = in_place ? RC(s)[root] : (uint64_t)scount * st.size;
        a.sendbuf = sv;
        a.recvbuf = rv;
        rc = pmc_run(s->core, &a);
    }
    if (rc == PMC_OK && me) rc = pmpi_vunview(s, &rt, rv, COUNTS(rcounts), DISPLS(displs), RD(s), rbuf);
    return pmpi_status(s, PMC_COLL_GATHERV, large, rc);
}

static int scatterv(const void *sbuf, const void *scounts, const void *displs, MPI_Datatype stype, void *rbuf,
                    MPI_Count rcount, MPI_Datatype rtype, int root, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    pmpi_type st, rt;
    const int in_place = rbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = pmpi_rooted_bad(s, root, in_place, rcount, rtype, &rt);
        if (!bad && s->rank == root) bad = scounts == NULL || displs == NULL || pmpi_type_of(stype, &st) ||
                              pmpi_any_negative(s, COUNTS(scounts));
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_SCATTERV, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Scatterv(sbuf, scounts, displs, stype, rbuf, (int)rcount, rtype, root, comm),
                         PMPI_Scatterv_c(sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm));
    const int me = s->rank == root;
    pmc_args a = args_of(PMC_COLL_SCATTERV, root);
    a.in_place = in_place;
    void *rv = NULL, *sv = NULL;
    int rc = PMC_OK;
    if (me) {
        rc = pmpi_vview(s, 0, &st, sbuf, COUNTS(scounts), DISPLS(displs), 1, SC(s), SD(s), &sv);
        a.sendcounts = SC(s);
        a.sdispls = SD(s);
    }
    if (rc == PMC_OK && !in_place) rc = pmpi_view(s, 1, &rt, rbuf, (uint64_t)rcount, 0, &rv);
    if (rc == PMC_OK) {
        a.count = in_place ? SC(s)[root] : (uint64_t)rcount * rt.size;
        a.sendbuf = sv;
        a.recvbuf = rv;
        rc = pmc_run(s->core, &a);
    }
    if (rc == PMC_OK && !in_place) rc = pmpi_unview(&rt, rv, (uint64_t)rcount, rbuf);
    return pmpi_status(s, PMC_COLL_SCATTERV, large, rc);
}

static int allgatherv(const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, const void *rcounts,
                      const void *displs, MPI_Datatype rtype, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    pmpi_type st, rt;
    const int in_place = sbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = rcounts == NULL || displs == NULL || pmpi_type_of(rtype, &rt) || pmpi_any_negative(s, COUNTS(rcounts));
        if (!bad && !in_place) bad = scount < 0 || pmpi_type_of(stype, &st);
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_ALLGATHERV, large);
    if (s == NULL)
        return PMPI_PASS(large, PMPI_Allgatherv(sbuf, (int)scount, stype, rbuf, rcounts, displs, rtype, comm),
                         PMPI_Allgatherv_c(sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm));
    pmc_args a = args_of(PMC_COLL_ALLGATHERV, 0);
    a.in_place = in_place;
    void *rv = NULL, *sv = NULL;
    int rc = pmpi_vview(s, 1, &rt, rbuf, COUNTS(rcounts), DISPLS(displs), in_place, RC(s), RD(s), &rv);
    a.recvcounts = RC(s);
    a.rdispls = RD(s);
    if (rc == PMC_OK && !in_place) rc = pmpi_view(s, 0, &st, sbuf, (uint64_t)scount, 1, &sv);
    if (rc == PMC_OK) {
        a.count = in_place ? RC(s)[s->rank] : (uint64_t)scount * st.size;
        a.sendbuf = sv;
        a.recvbuf = rv;
        rc = pmc_run(s->core, &a);
    }
    if (rc == PMC_OK) rc = pmpi_vunview(s, &rt, rv, COUNTS(rcounts), DISPLS(displs), RD(s), rbuf);
    return pmpi_status(s, PMC_COLL_ALLGATHERV, large, rc);
}

static int alltoallv(const void *sbuf, const void *scounts, const void *sdispls, MPI_Datatype stype, void *rbuf,
                     const void *rcounts, const void *rdispls, MPI_Datatype rtype, MPI_Comm comm, int large)
{
    int route;
    pmpi_comm *s = pmpi_state(comm, &route);
    pmpi_type st, rt;
    const int in_place = sbuf == MPI_IN_PLACE;
    int bad = 0;
    if (s != NULL) {
        bad = rcounts == NULL || rdispls == NULL || pmpi_type_of(rtype, &rt) || pmpi_any_negative(s, COUNTS(rcounts));
        if (!bad && !in_place)
            bad = scounts == NULL || sdispls == NULL || pmpi_type_of(stype, &st) ||
                  pmpi_any_negative(s, COUNTS(scounts));
    }
    s = pmpi_settle(s, route, bad, PMC_COLL_ALLTOALLV, large);
    if (s == NULL)
        return PMPI_PASS(large,
                         PMPI_Alltoallv(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm),
                         PMPI_Alltoallv_c(sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm));
    pmc_args a = args_of(PMC_COLL_ALLTOALLV, 0);
    a.in_place = in_place;
    void *rv = NULL, *sv = NULL;
    int rc = pmpi_vview(s, 1, &rt, rbuf, COUNTS(rcounts), DISPLS(rdispls), in_place, RC(s), RD(s), &rv);
    a.recvcounts = RC(s);
    a.rdispls = RD(s);
    if (rc == PMC_OK && !in_place) {
        rc = pmpi_vview(s, 0, &st, sbuf, COUNTS(scounts), DISPLS(sdispls), 1, SC(s), SD(s), &sv);
        a.sendcounts = SC(s);
        a.sdispls = SD(s);
    }
    if (rc == PMC_OK) {
        a.sendbuf = sv;
        a.recvbuf = rv;
        rc = pmc_run(s->core, &a);
    }
    if (rc == PMC_OK) rc = pmpi_vunview(s, &rt, rv, COUNTS(rcounts), DISPLS(rdispls), RD(s), rbuf);
    return pmpi_status(s, PMC_COLL_ALLTOALLV, large, rc);
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, 0);
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, 0);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, 0);
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype,
                  void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, 0);
}

#if PMPI_HAS_LARGE
int MPI_Gatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype, int root,
                  MPI_Comm comm)
{
    return gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, 1);
}

int MPI_Scatterv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint displs[],
                   MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int root,
                   MPI_Comm comm)
{
    return scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, 1);
}

int MPI_Allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                     const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, 1);
}

int MPI_Alltoallv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                    MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                    MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, 1);
}
#endif

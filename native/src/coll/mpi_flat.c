/* A whole collective through the wrapped communicator's non-blocking MPI
 * collective on bytes: the path without a segment, and for personalised
 * data movement across nodes until lane algorithms take it over. */
#include <string.h>

#include "hier.h"

#if MPI_VERSION >= 4
#define LARGE(fn) fn##_c /* large-count entry points */
#else
#define LARGE(fn) fn
#endif

/* The v arrays in the MPI's count and displacement types (arrays kept with
 * the communicator: ops run one at a time). */
static int mpi_array(pmc_comm *c, const uint64_t *src, int which, int displs, void **out)
{
    const size_t width = sizeof(pmc_mpi_count) > sizeof(pmc_mpi_displ) ? sizeof(pmc_mpi_count) : sizeof(pmc_mpi_displ);
    unsigned char *base = (unsigned char *)c->vcounts + (size_t)which * (size_t)c->size * width;
    *out = base;
    if (src == NULL) return PMC_OK;
    for (int i = 0; i < c->size; ++i) {
        pmc_mpi_count v;
        int rc = pmc_mpi_count_of(c, src[i], &v);
        if (rc != PMC_OK) return rc;
        if (displs) ((pmc_mpi_displ *)(void *)base)[i] = (pmc_mpi_displ)v;
        else ((pmc_mpi_count *)(void *)base)[i] = v;
    }
    return PMC_OK;
}

static int start(pmc_op *op)
{
    pmc_comm *c = op->c;
    const pmc_args *a = &op->a;
    const int root = c->rank == a->root;
    const void *send = a->in_place ? MPI_IN_PLACE : a->sendbuf;
    void *sc = NULL, *sd = NULL, *rc_ = NULL, *rd = NULL;
    pmc_mpi_count n = 0;
    int rc = pmc_mpi_count_of(c, a->count, &n);
    const int vform = a->coll == PMC_COLL_GATHERV || a->coll == PMC_COLL_SCATTERV ||
                      a->coll == PMC_COLL_ALLGATHERV || a->coll == PMC_COLL_ALLTOALLV;
    if (rc == PMC_OK && vform) rc = mpi_array(c, a->sendcounts, 0, 0, &sc);
    if (rc == PMC_OK && vform) rc = mpi_array(c, a->sdispls, 1, 1, &sd);
    if (rc == PMC_OK && vform) rc = mpi_array(c, a->recvcounts, 2, 0, &rc_);
    if (rc == PMC_OK && vform) rc = mpi_array(c, a->rdispls, 3, 1, &rd);
    if (rc != PMC_OK) return rc;
    if (a->in_place && (a->coll == PMC_COLL_ALLTOALL || a->coll == PMC_COLL_ALLTOALLV)) {
        /* In-place alltoallv through Open MPI 5 put blocks in the wrong
         * place in our tests; sending from a copy costs one memcpy and
         * behaves the same on every MPI. */
        const uint64_t bytes = a->coll == PMC_COLL_ALLTOALL ? a->count * (uint64_t)c->size
                                                            : pmc_v_extent(a->recvcounts, a->rdispls, c->size);
        void *copy = pmc_scratch_outer(c, (size_t)(bytes ? bytes : 1));
        if (copy == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "%s: out of memory for %llu bytes", c->node_ctx.coll,
                                          (unsigned long long)bytes);
        if (bytes) memcpy(copy, a->recvbuf, bytes);
        send = copy;
    }
    MPI_Comm m = c->comm;
    MPI_Request *r = &op->mreq;
    int mrc;
    switch (a->coll) {
    case PMC_COLL_BARRIER: mrc = MPI_Ibarrier(m, r); break;
    case PMC_COLL_BCAST: mrc = LARGE(MPI_Ibcast)(a->recvbuf, n, MPI_BYTE, a->root, m, r); break;
    case PMC_COLL_GATHER:
        mrc = LARGE(MPI_Igather)(send, n, MPI_BYTE, a->recvbuf, n, MPI_BYTE, a->root, m, r);
        break;
    case PMC_COLL_GATHERV:
        mrc = LARGE(MPI_Igatherv)(send, n, MPI_BYTE, a->recvbuf, root ? rc_ : NULL, root ? rd : NULL, MPI_BYTE,
                                  a->root, m, r);
        break;
    case PMC_COLL_SCATTER:
        mrc = LARGE(MPI_Iscatter)(a->sendbuf, n, MPI_BYTE, a->in_place ? MPI_IN_PLACE : a->recvbuf, n, MPI_BYTE,
                                  a->root, m, r);
        break;
    case PMC_COLL_SCATTERV:
        mrc = LARGE(MPI_Iscatterv)(a->sendbuf, root ? sc : NULL, root ? sd : NULL, MPI_BYTE,
                                   a->in_place ? MPI_IN_PLACE : a->recvbuf, n, MPI_BYTE, a->root, m, r);
        break;
    case PMC_COLL_ALLGATHER:
        mrc = LARGE(MPI_Iallgather)(send, n, MPI_BYTE, a->recvbuf, n, MPI_BYTE, m, r);
        break;
    case PMC_COLL_ALLGATHERV:
        mrc = LARGE(MPI_Iallgatherv)(send, n, MPI_BYTE, a->recvbuf, rc_, rd, MPI_BYTE, m, r);
        break;
    case PMC_COLL_ALLTOALL:
        mrc = LARGE(MPI_Ialltoall)(send, n, MPI_BYTE, a->recvbuf, n, MPI_BYTE, m, r);
        break;
    case PMC_COLL_ALLTOALLV:
        mrc = LARGE(MPI_Ialltoallv)(send, sc, sd, MPI_BYTE, a->recvbuf, rc_, rd, MPI_BYTE, m, r);
        break;
    default: return pmc_fail(c, PMC_ERR_ARG, "%s has no byte-wise MPI path", c->node_ctx.coll);
    }
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(c, mrc, c->node_ctx.coll);
}

int pmc_coll_mpi_flat(pmc_op *op, pmc_frame *f)
{
    PMC_CO_BEGIN(f);
    {
        int rc = start(op);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_mpi(op, op->c->node_ctx.coll));
    PMC_CO_END(f);
}

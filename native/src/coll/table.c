/* The table of collectives (name, argument check, algorithm) and the
 * argument checks. The checks run before any data moves and before the
 * call is numbered for agreement, so a failed check leaves the
 * communicator usable. Python checks buffers first with messages in its
 * own terms; these keep C callers (and the preload library) safe. */
#include <limits.h>

#include "hier.h"

#define ENTRY(code, label, fn) [code] = {label, pmc_##fn##_check, pmc_##fn##_run}

static const pmc_coll_entry table[PMC_COLL_COUNT] = {
    ENTRY(PMC_COLL_BARRIER, "Barrier", barrier),
    ENTRY(PMC_COLL_BCAST, "Bcast", bcast),
    ENTRY(PMC_COLL_GATHER, "Gather", gather),
    ENTRY(PMC_COLL_GATHERV, "Gatherv", gatherv),
    ENTRY(PMC_COLL_SCATTER, "Scatter", scatter),
    ENTRY(PMC_COLL_SCATTERV, "Scatterv", scatterv),
    ENTRY(PMC_COLL_ALLGATHER, "Allgather", allgather),
    ENTRY(PMC_COLL_ALLGATHERV, "Allgatherv", allgatherv),
    ENTRY(PMC_COLL_ALLTOALL, "Alltoall", alltoall),
    ENTRY(PMC_COLL_ALLTOALLV, "Alltoallv", alltoallv),
    ENTRY(PMC_COLL_ALLREDUCE, "Allreduce", allreduce),
    ENTRY(PMC_COLL_REDUCE, "Reduce", reduce),
    ENTRY(PMC_COLL_REDUCE_SCATTER_BLOCK, "Reduce_scatter_block", reduce_scatter_block),
    ENTRY(PMC_COLL_REDUCE_SCATTER, "Reduce_scatter", reduce_scatter),
    ENTRY(PMC_COLL_SCAN, "Scan", scan),
    ENTRY(PMC_COLL_EXSCAN, "Exscan", exscan),
};

const pmc_coll_entry *pmc_coll_table(int coll)
{
    if (coll <= 0 || coll >= PMC_COLL_COUNT) return NULL;
    return &table[coll];
}

static const char *name_of(const pmc_args *a) { return table[a->coll].name; }

int pmc_check_root(pmc_comm *c, const pmc_args *a)
{
    if (a->root < 0 || a->root >= c->size)
        return pmc_fail(c, PMC_ERR_ARG, "%s: root=%d is not a rank of this communicator (expected 0 <= root < %d)",
                        name_of(a), a->root, c->size);
    return PMC_OK;
}

int pmc_check_buf(pmc_comm *c, const pmc_args *a, const char *what, const void *buf, uint64_t bytes)
{
    if (bytes > 0 && buf == NULL)
        return pmc_fail(c, PMC_ERR_ARG, "%s: %s is NULL but %llu bytes are to move", name_of(a), what,
                        (unsigned long long)bytes);
    return PMC_OK;
}

int pmc_check_reduction(pmc_comm *c, const pmc_args *a, uint64_t total_count)
{
    const int esize = pmc_dtype_size(a->dtype);
    if (esize == 0) return pmc_fail(c, PMC_ERR_ARG, "%s: unknown element type code %d", name_of(a), a->dtype);
    if (!pmc_op_valid(a->dtype, a->op))
        return pmc_fail(c, PMC_ERR_ARG, "%s: op code %d is not defined on element type code %d "
                        "(MPI allows SUM/PROD on numbers, MIN/MAX on real numbers, logical ops on "
                        "integers and bool, bitwise ops on integers)", name_of(a), a->op, a->dtype);
    if (total_count > UINT64_MAX / (uint64_t)esize / (uint64_t)c->size)
        return pmc_fail(c, PMC_ERR_ARG, "%s: %llu elements overflow the message size", name_of(a),
                        (unsigned long long)total_count);
    return PMC_OK;
}

int pmc_check_varrays(pmc_comm *c, const pmc_args *a, const char *which, const uint64_t *counts,
                      const uint64_t *displs, const void *buf)
{
    if (counts == NULL || displs == NULL)
        return pmc_fail(c, PMC_ERR_ARG, "%s: the %s counts and displacements are required", name_of(a), which);
    for (int i = 0; i < c->size; ++i) {
        if (counts[i] > UINT64_MAX - displs[i])
            return pmc_fail(c, PMC_ERR_ARG, "%s: %s block %d (displacement %llu, %llu bytes) overflows",
                            name_of(a), which, i, (unsigned long long)displs[i], (unsigned long long)counts[i]);
        if (counts[i] > 0 && buf == NULL)
            return pmc_fail(c, PMC_ERR_ARG, "%s: the %s buffer is NULL but block %d has %llu bytes", name_of(a),
                            which, i, (unsigned long long)counts[i]);
    }
    return PMC_OK;
}

int pmc_check_in_place_root(pmc_comm *c, const pmc_args *a)
{
    if (a->in_place && c->rank != a->root)
        return pmc_fail(c, PMC_ERR_ARG, "%s: only the root may pass MPI.IN_PLACE", name_of(a));
    return PMC_OK;
}

static int overflows(uint64_t count, int size) { return count > UINT64_MAX / (uint64_t)(size > 0 ? size : 1); }

int pmc_barrier_check(pmc_comm *c, pmc_args *a)
{
    (void)c;
    (void)a;
    return PMC_OK;
}

int pmc_bcast_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    return rc != PMC_OK ? rc : pmc_check_buf(c, a, "buf", a->recvbuf, a->count);
}

int pmc_gather_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_in_place_root(c, a);
    if (rc == PMC_OK && overflows(a->count, c->size))
        rc = pmc_fail(c, PMC_ERR_ARG, "Gather: %llu bytes per rank overflow the receive size", (unsigned long long)a->count);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
    if (rc == PMC_OK && c->rank == a->root) rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, a->count);
    return rc;
}

int pmc_gatherv_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_in_place_root(c, a);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
    if (rc == PMC_OK && c->rank == a->root) {
        rc = pmc_check_varrays(c, a, "receive", a->recvcounts, a->rdispls, a->recvbuf);
        if (rc == PMC_OK && !a->in_place && a->recvcounts[c->rank] != a->count)
            rc = pmc_fail(c, PMC_ERR_ARG, "Gatherv: the root sends %llu bytes to itself but expects %llu "
                          "(recvcounts[root])", (unsigned long long)a->count,
                          (unsigned long long)a->recvcounts[c->rank]);
    }
    return rc;
}

int pmc_scatter_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_in_place_root(c, a);
    if (rc == PMC_OK && overflows(a->count, c->size))
        rc = pmc_fail(c, PMC_ERR_ARG, "Scatter: %llu bytes per rank overflow the send size", (unsigned long long)a->count);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, a->count);
    if (rc == PMC_OK && c->rank == a->root) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
    return rc;
}

int pmc_scatterv_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_in_place_root(c, a);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, a->count);
    if (rc == PMC_OK && c->rank == a->root) {
        rc = pmc_check_varrays(c, a, "send", a->sendcounts, a->sdispls, a->sendbuf);
        if (rc == PMC_OK && !a->in_place && a->sendcounts[c->rank] != a->count)
            rc = pmc_fail(c, PMC_ERR_ARG, "Scatterv: the root sends %llu bytes to itself (sendcounts[root]) "
                          "but receives %llu", (unsigned long long)a->sendcounts[c->rank],
                          (unsigned long long)a->count);
    }
    return rc;
}

int pmc_allgather_check(pmc_comm *c, pmc_args *a)
{
    if (overflows(a->count, c->size))
        return pmc_fail(c, PMC_ERR_ARG, "Allgather: block of %llu bytes overflows the receive size",
                        (unsigned long long)a->count);
    int rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, a->count);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
    return rc;
}

int pmc_allgatherv_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_varrays(c, a, "receive", a->recvcounts, a->rdispls, a->recvbuf);
    if (rc != PMC_OK) return rc;
    if (a->in_place) a->count = a->recvcounts[c->rank];
    if (a->count != a->recvcounts[c->rank])
        return pmc_fail(c, PMC_ERR_ARG, "Allgatherv: this rank sends %llu bytes but recvcounts[%d] is %llu",
                        (unsigned long long)a->count, c->rank, (unsigned long long)a->recvcounts[c->rank]);
    return a->in_place ? PMC_OK : pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
}

int pmc_alltoall_check(pmc_comm *c, pmc_args *a)
{
    if (overflows(a->count, c->size))
        return pmc_fail(c, PMC_ERR_ARG, "Alltoall: block of %llu bytes overflows the message size",
                        (unsigned long long)a->count);
    int rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, a->count);
    if (rc == PMC_OK && !a->in_place) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, a->count);
    return rc;
}

int pmc_alltoallv_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_varrays(c, a, "receive", a->recvcounts, a->rdispls, a->recvbuf);
    if (rc != PMC_OK) return rc;
    if (a->in_place) {
        a->sendcounts = a->recvcounts;
        a->sdispls = a->rdispls;
        return PMC_OK;
    }
    return pmc_check_varrays(c, a, "send", a->sendcounts, a->sdispls, a->sendbuf);
}

static int reduction_buffers(pmc_comm *c, pmc_args *a, uint64_t in_count, uint64_t out_count, int receives)
{
    const uint64_t esize = (uint64_t)pmc_dtype_size(a->dtype);
    int rc = PMC_OK;
    if (!a->in_place) rc = pmc_check_buf(c, a, "sendbuf", a->sendbuf, in_count * esize);
    if (rc == PMC_OK && receives)
        rc = pmc_check_buf(c, a, "recvbuf", a->recvbuf, (a->in_place ? in_count : out_count) * esize);
    return rc;
}

int pmc_allreduce_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_reduction(c, a, a->count);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, a->count, a->count, 1);
}

int pmc_reduce_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_in_place_root(c, a);
    if (rc == PMC_OK) rc = pmc_check_reduction(c, a, a->count);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, a->count, a->count, c->rank == a->root);
}

int pmc_reduce_scatter_block_check(pmc_comm *c, pmc_args *a)
{
    if (overflows(a->count, c->size))
        return pmc_fail(c, PMC_ERR_ARG, "Reduce_scatter_block: %llu elements per rank overflow the message size",
                        (unsigned long long)a->count);
    int rc = pmc_check_reduction(c, a, a->count);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, a->count * (uint64_t)c->size, a->count, 1);
}

int pmc_reduce_scatter_check(pmc_comm *c, pmc_args *a)
{
    if (a->recvcounts == NULL) return pmc_fail(c, PMC_ERR_ARG, "Reduce_scatter: recvcounts is required");
    uint64_t total = 0;
    for (int i = 0; i < c->size; ++i) {
        if (a->recvcounts[i] > UINT64_MAX - total)
            return pmc_fail(c, PMC_ERR_ARG, "Reduce_scatter: the recvcounts overflow");
        total += a->recvcounts[i];
    }
    int rc = pmc_check_reduction(c, a, total / (uint64_t)c->size + 1);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, total, a->recvcounts[c->rank], 1);
}

int pmc_scan_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_reduction(c, a, a->count);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, a->count, a->count, 1);
}

int pmc_exscan_check(pmc_comm *c, pmc_args *a)
{
    int rc = pmc_check_reduction(c, a, a->count);
    return rc != PMC_OK ? rc : reduction_buffers(c, a, a->count, a->count, c->rank > 0);
}

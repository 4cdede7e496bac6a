/* Every collective through the single entry path (pmc_run) and through
 * persistent requests started repeatedly (Test loops and Wait), with
 * buffers on the heap of the process and in the node's shared heap, under
 * each data path; plus the shared heap allocator. Only pymcoll.h is used.
 *
 * Run: mpiexec -n 1..4 test_requests_mpi
 * Prints one line per failed check; exit status non-zero on any failure. */
#include <inttypes.h>
#include <mpi.h>
#include <stdlib.h>

#include "pymcoll.h"
#include "testutil.h"

static int g_rank, g_size;

/* Input element i of `rank` at pass `it`: distinct everywhere. */
static int32_t val(int rank, uint64_t i, int it) { return (int32_t)(rank * 100003 + (int)i * 7 + it * 13); }

typedef struct bufs {
    int32_t *send, *recv;
    uint64_t scounts[64], sdispls[64], rcounts[64], rdispls[64]; /* bytes */
} bufs_t;

/* Fills args and buffers of collective `coll` with n elements per block
 * (rank r's v-form block: n + r elements). Returns elements to check. */
static uint64_t setup(int coll, uint64_t n, int it, bufs_t *b, pmc_args *a, pmc_heap *heap)
{
    const int P = g_size, me = g_rank;
    uint64_t total = 0;
    for (int r = 0; r < P; ++r) total += n + (uint64_t)r;
    const uint64_t cap = (total + n * (uint64_t)P + 16) * 4;
    void *s = NULL, *r_ = NULL;
    if (heap != NULL && pmc_heap_alloc(heap, cap, &s) == PMC_OK && pmc_heap_alloc(heap, cap, &r_) == PMC_OK) {
        b->send = s;
        b->recv = r_;
    } else {
        if (s) pmc_heap_free(heap, s);
        b->send = malloc(cap);
        b->recv = malloc(cap);
    }
    memset(b->recv, 0xab, cap);
    memset(a, 0, sizeof(*a));
    a->coll = coll;
    a->sendbuf = b->send;
    a->recvbuf = b->recv;
    a->dtype = PMC_DT_INT32;
    a->op = PMC_OP_SUM;
    a->root = P - 1;
    const int vform = coll == PMC_COLL_GATHERV || coll == PMC_COLL_SCATTERV || coll == PMC_COLL_ALLGATHERV ||
                      coll == PMC_COLL_ALLTOALLV || coll == PMC_COLL_REDUCE_SCATTER;
    uint64_t off = 0;
    for (int r = 0; r < P; ++r) {
        b->rcounts[r] = (n + (uint64_t)r) * 4;
        b->rdispls[r] = off * 4;
        off += n + (uint64_t)r;
    }
    uint64_t in = n;
    switch (coll) {
    case PMC_COLL_SCATTER: case PMC_COLL_ALLTOALL: case PMC_COLL_REDUCE_SCATTER_BLOCK: in = n * (uint64_t)P; break;
    case PMC_COLL_SCATTERV: case PMC_COLL_REDUCE_SCATTER: in = total; break;
    case PMC_COLL_GATHERV: case PMC_COLL_ALLGATHERV: in = n + (uint64_t)me; break;
    case PMC_COLL_ALLTOALLV: in = (n + (uint64_t)me) * (uint64_t)P; break;
    default: break;
    }
    for (uint64_t i = 0; i < in; ++i) b->send[i] = val(me, i, it);
    if (coll == PMC_COLL_ALLTOALLV) {
        for (int r = 0; r < P; ++r) {
            b->scounts[r] = (n + (uint64_t)me) * 4;
            b->sdispls[r] = (uint64_t)r * (n + (uint64_t)me) * 4;
            b->rcounts[r] = (n + (uint64_t)r) * 4;
        }
        off = 0;
        for (int r = 0; r < P; ++r) {
            b->rdispls[r] = off;
            off += b->rcounts[r];
        }
    }
    if (coll == PMC_COLL_SCATTERV) {
        memcpy(b->scounts, b->rcounts, sizeof(b->scounts));
        memcpy(b->sdispls, b->rdispls, sizeof(b->sdispls));
    }
    if (vform) {
        a->sendcounts = b->scounts;
        a->sdispls = b->sdispls;
        a->recvcounts = b->rcounts;
        a->rdispls = b->rdispls;
    }
    switch (coll) {
    case PMC_COLL_BCAST: a->count = n * 4; a->recvbuf = b->send; break;
    case PMC_COLL_GATHER: case PMC_COLL_SCATTER: case PMC_COLL_ALLGATHER: case PMC_COLL_ALLTOALL: a->count = n * 4; break;
    case PMC_COLL_GATHERV: case PMC_COLL_ALLGATHERV: case PMC_COLL_SCATTERV: a->count = (n + (uint64_t)me) * 4; break;
    case PMC_COLL_REDUCE_SCATTER:
        for (int r = 0; r < P; ++r) b->rcounts[r] = n + (uint64_t)r; /* elements */
        a->count = 0;
        break;
    default: a->count = n; break;
    }
    if (coll == PMC_COLL_BCAST && me != a->root) memset(b->send, 0, n * 4);
    return in;
}

/* Number of wrong elements in this rank's result (0 where it has none). */
static int check(int coll, uint64_t n, int it, const bufs_t *b, const pmc_args *a)
{
    const int P = g_size, me = g_rank, root = a->root;
    int bad = 0;
    uint64_t count;
    const int32_t *out = b->recv;
    switch (coll) {
    case PMC_COLL_BCAST:
        for (uint64_t i = 0; i < n; ++i) bad += b->send[i] != val(root, i, it);
        return bad;
    case PMC_COLL_GATHER: case PMC_COLL_GATHERV:
        if (me != root) return 0;
        /* fallthrough */
    case PMC_COLL_ALLGATHER: case PMC_COLL_ALLGATHERV: {
        const int v = coll == PMC_COLL_GATHERV || coll == PMC_COLL_ALLGATHERV;
        uint64_t k = 0;
        for (int r = 0; r < P; ++r)
            for (uint64_t i = 0; i < n + (v ? (uint64_t)r : 0); ++i, ++k) bad += out[k] != val(r, i, it);
        return bad;
    }
    case PMC_COLL_SCATTER: case PMC_COLL_SCATTERV: {
        uint64_t base = 0;
        const int v = coll == PMC_COLL_SCATTERV;
        for (int r = 0; r < me; ++r) base += n + (v ? (uint64_t)r : 0);
        for (uint64_t i = 0; i < n + (v ? (uint64_t)me : 0); ++i) bad += out[i] != val(root, base + i, it);
        return bad;
    }
    case PMC_COLL_ALLTOALL:
        for (int r = 0; r < P; ++r)
            for (uint64_t i = 0; i < n; ++i) bad += out[(uint64_t)r * n + i] != val(r, (uint64_t)me * n + i, it);
        return bad;
    case PMC_COLL_ALLTOALLV: {
        uint64_t k = 0;
        for (int r = 0; r < P; ++r)
            for (uint64_t i = 0; i < n + (uint64_t)r; ++i, ++k)
                bad += out[k] != val(r, (uint64_t)me * (n + (uint64_t)r) + i, it);
        return bad;
    }
    default: break;
    }
    /* Reductions of int32 SUM (wrap-around as MPI's). */
    uint64_t first = 0;
    int lo = 0, hi = P;
    count = n;
    if (coll == PMC_COLL_REDUCE && me != root) return 0;
    if (coll == PMC_COLL_SCAN) hi = me + 1;
    if (coll == PMC_COLL_EXSCAN) {
        if (me == 0) return 0;
        hi = me;
    }
    if (coll == PMC_COLL_REDUCE_SCATTER_BLOCK) first = (uint64_t)me * n;
    if (coll == PMC_COLL_REDUCE_SCATTER) {
        for (int r = 0; r < me; ++r) first += n + (uint64_t)r;
        count = n + (uint64_t)me;
    }
    for (uint64_t i = 0; i < count; ++i) {
        uint32_t e = 0;
        for (int r = lo; r < hi; ++r) e += (uint32_t)val(r, first + i, it);
        bad += (uint32_t)out[i] != e;
    }
    return bad;
}

static void release(bufs_t *b, pmc_heap *heap)
{
    if (heap != NULL && pmc_heap_free(heap, b->send) == PMC_OK) {
        pmc_heap_free(heap, b->recv);
        return;
    }
    free(b->send);
    free(b->recv);
}

static void test_collectives(pmc_comm *c, const char *name, int use_heap)
{
    pmc_heap *heap = use_heap ? pmc_comm_heap(c) : NULL;
    const uint64_t sizes[] = {0, 3, 700, 9000};
    for (int coll = 1; coll < PMC_COLL_COUNT; ++coll) {
        if (coll == PMC_COLL_BARRIER) continue;
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
            bufs_t b;
            pmc_args a;
            /* Blocking. */
            setup(coll, sizes[k], 0, &b, &a, heap);
            int rc = pmc_run(c, &a);
            CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
            int bad = rc == PMC_OK ? check(coll, sizes[k], 0, &b, &a) : 0;
            CHECK(bad == 0, "%s %s n=%" PRIu64 ": %d wrong elements", name, pmc_coll_name(coll), sizes[k], bad);
            release(&b, heap);
            /* Persistent, started three times with new data: Wait, Test loop, Wait. */
            setup(coll, sizes[k], 1, &b, &a, heap);
            pmc_request *r = NULL;
            rc = pmc_request_create(c, &a, 1, &r);
            CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
            for (int it = 1; rc == PMC_OK && it <= 3; ++it) {
                if (it > 1) {
                    bufs_t fresh;
                    pmc_args unused;
                    /* Same sizes, new inputs, copied into the request's buffers. */
                    const uint64_t in = setup(coll, sizes[k], it, &fresh, &unused, NULL);
                    memcpy(b.send, fresh.send, in * 4);
                    release(&fresh, NULL);
                }
                rc = pmc_request_start(r);
                CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
                if (rc != PMC_OK) break;
                if (it == 2) {
                    int done = 0;
                    const double t0 = MPI_Wtime();
                    while (rc == PMC_OK && !done && MPI_Wtime() - t0 < 60) rc = pmc_request_test(r, &done);
                    CHECK(done, "%s %s: Test never completed", name, pmc_coll_name(coll));
                } else {
                    rc = pmc_request_wait(r);
                }
                CHECK_RC(rc, PMC_OK, pmc_request_errmsg(r));
                bad = rc == PMC_OK ? check(coll, sizes[k], it, &b, &a) : 0;
                CHECK(bad == 0, "%s persistent %s n=%" PRIu64 " start %d: %d wrong elements", name,
                      pmc_coll_name(coll), sizes[k], it, bad);
            }
            CHECK(pmc_request_free(r) == PMC_OK, "request free");
            release(&b, heap);
        }
    }
}

static void test_heap(pmc_comm *c)
{
    pmc_heap *h = pmc_comm_heap(c);
    pmc_layout l;
    pmc_comm_layout(c, &l);
    if (h == NULL) {
        CHECK(l.local_size == 1 || !l.shm_active, "no heap on a node of %d ranks", l.local_size);
        return;
    }
    uint64_t arena, used, largest;
    pmc_heap_stats(h, &arena, &used, &largest);
    CHECK(used == 0 && largest == arena && arena > 0, "fresh heap: arena %" PRIu64 " used %" PRIu64, arena, used);
    void *blocks[4096];
    int nb = 0;
    while (nb < 4096 && pmc_heap_alloc(h, 1000 + (uint64_t)nb * 64, &blocks[nb]) == PMC_OK) {
        memset(blocks[nb], nb & 0xff, 1000);
        ++nb;
    }
    CHECK(nb > 0 && nb < 4096, "%d blocks before exhaustion", nb);
    void *p = NULL;
    CHECK(pmc_heap_alloc(h, arena + 1, &p) == PMC_ERR_NOMEM && p == NULL, "oversized block accepted");
    for (int i = 0; i < nb; i += 2) CHECK(pmc_heap_free(h, blocks[i]) == PMC_OK, "free");
    for (int i = 1; i < nb; i += 2) CHECK(pmc_heap_free(h, blocks[i]) == PMC_OK, "free");
    CHECK(pmc_heap_free(h, blocks[0]) == PMC_ERR_ARG, "double free accepted");
    pmc_heap_stats(h, &arena, &used, &largest);
    CHECK(used == 0 && largest == arena, "after freeing: used %" PRIu64 " largest %" PRIu64 " of %" PRIu64, used,
          largest, arena);
}

int main(int argc, char **argv)
{
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL MPI_Init\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const double t0 = MPI_Wtime();
    static const struct {
        const char *name;
        int copy, node_size, shm_off, progress, heap;
        uint64_t lanes_small_max; /* 1: the lanes' rings, sliced Bcast and rank-to-rank Alltoall at every size */
    } configs[] = {
        {"auto", PMC_COPY_AUTO, 0, 0, 0, 0, 0},       {"cico", PMC_COPY_CICO, 0, 0, 0, 0, 0},
        {"cma", PMC_COPY_CMA, 0, 0, 0, 0, 0},         {"direct", PMC_COPY_DIRECT, 0, 0, 0, 1, 0},
        {"inline", PMC_COPY_INLINE, 0, 0, 0, 0, 0},   {"node_size=2", PMC_COPY_AUTO, 2, 0, 0, 0, 0},
        {"node_size=1", PMC_COPY_AUTO, 1, 0, 0, 0, 0}, {"node_size=2 rings", PMC_COPY_AUTO, 2, 0, 0, 0, 1},
        {"shm off", PMC_COPY_AUTO, 0, 1, 0, 0, 0},    {"progress thread", PMC_COPY_AUTO, 0, 0, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); ++i) {
        snprintf(t_who, sizeof(t_who), "rank %d/%d %s", g_rank, g_size, configs[i].name);
        pmc_config cfg;
        pmc_config_defaults(&cfg);
        cfg.timeout = 60;
        cfg.shm_bytes = 64u << 10;
        cfg.chunk_bytes = 4u << 10;
        cfg.heap_bytes = 4u << 20;
        cfg.copy = configs[i].copy;
        cfg.node_size = configs[i].node_size;
        cfg.shm_mode = configs[i].shm_off ? PMC_SHM_OFF : PMC_SHM_AUTO;
        cfg.progress_thread = configs[i].progress && provided == MPI_THREAD_MULTIPLE;
        cfg.cma_min = 1024;
        if (configs[i].lanes_small_max)
            cfg.lanes_small_max = cfg.lanes_bcast_tree_max = cfg.lanes_direct_min = configs[i].lanes_small_max;
        pmc_comm *c = NULL;
        int rc = pmc_comm_create((uintptr_t)MPI_COMM_WORLD, &cfg, &c);
        CHECK_RC(rc, PMC_OK, "see stderr");
        if (rc != PMC_OK) continue;
        test_collectives(c, configs[i].name, configs[i].heap);
        if (i == 0) test_heap(c);
        CHECK(!pmc_comm_broken(c), "communicator broken: %s", pmc_comm_errmsg(c));
        CHECK(pmc_comm_free(c) == PMC_OK, "free");
    }
    int failures = 0;
    snprintf(t_who, sizeof(t_who), "rank %d/%d", g_rank, g_size);
    MPI_Allreduce(&t_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) {
        if (failures) fprintf(stderr, "test_requests_mpi -n %d: %d check(s) failed\n", g_size, failures);
        else printf("test_requests_mpi -n %d: all checks passed (%.1f s)\n", g_size, MPI_Wtime() - t0);
    }
    MPI_Finalize();
    return t_failures != 0;
}

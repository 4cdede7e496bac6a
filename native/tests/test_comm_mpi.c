/* The public API under MPI: communicator layout against what MPI itself
 * says, Barrier/Bcast/Allgather results, argument errors, cleanup.
 * Only pymcoll.h is used from the core.
 *
 * Run: mpiexec -n 1..4 test_comm_mpi
 * Prints one line per failed check; exit status non-zero on any failure. */
#include <inttypes.h>
#include <mpi.h>
#include <stdatomic.h>

#include "pymcoll.h"
#include "testutil.h"

#define GUARD 64
#define GUARD_BYTE 0xee

static int g_rank, g_size;

/* MPI_COMM_WORLD through the API's integer handle (works for int and
 * pointer handles alike). */
static uintptr_t world_handle(void) { return (uintptr_t)MPI_COMM_WORLD; }

#define CHECK_MPI(call)                                                          \
    do {                                                                         \
        int mrc_ = (call);                                                       \
        CHECK(mrc_ == MPI_SUCCESS, "%s returned %d", #call, mrc_);               \
    } while (0)

/* What the layout must be, computed with MPI calls only: the same split
 * (shared-memory node, then `node_size` consecutive ranks) done here. */
typedef struct expect {
    int local_rank, local_size, node, nnodes, min_local, max_local, consecutive;
    int *node_of, *local_of; /* [size] */
} expect_t;

static void expect_layout(int node_size, expect_t *e)
{
    MPI_Comm shared = MPI_COMM_NULL, node = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &shared));
    if (node_size > 0) {
        CHECK_MPI(MPI_Comm_split(shared, g_rank / node_size, g_rank, &node));
    } else {
        CHECK_MPI(MPI_Comm_dup(shared, &node));
    }
    CHECK_MPI(MPI_Comm_rank(node, &e->local_rank));
    CHECK_MPI(MPI_Comm_size(node, &e->local_size));
    int leader = g_rank;
    CHECK_MPI(MPI_Bcast(&leader, 1, MPI_INT, 0, node));
    /* Nodes are numbered by their first (leader) rank. */
    int *is_leader = calloc((size_t)g_size, sizeof(int));
    int mine = e->local_rank == 0;
    CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, is_leader, 1, MPI_INT, MPI_COMM_WORLD));
    e->node = 0;
    e->nnodes = 0;
    for (int r = 0; r < g_size; ++r) {
        e->nnodes += is_leader[r];
        if (r < leader) e->node += is_leader[r];
    }
    free(is_leader);
    CHECK_MPI(MPI_Allreduce(&e->local_size, &e->min_local, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&e->local_size, &e->max_local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    int consecutive = g_rank == leader + e->local_rank;
    CHECK_MPI(MPI_Allreduce(&consecutive, &e->consecutive, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
    int pair[2] = {e->node, e->local_rank};
    int *all = malloc(sizeof(int) * 2u * (size_t)g_size);
    e->node_of = malloc(sizeof(int) * (size_t)g_size);
    e->local_of = malloc(sizeof(int) * (size_t)g_size);
    CHECK_MPI(MPI_Allgather(pair, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < g_size; ++r) {
        e->node_of[r] = all[2 * r];
        e->local_of[r] = all[2 * r + 1];
    }
    free(all);
    CHECK_MPI(MPI_Comm_free(&node));
    CHECK_MPI(MPI_Comm_free(&shared));
}

static void check_layout(pmc_comm *c, const pmc_config *cfg)
{
    expect_t e;
    expect_layout(cfg->node_size, &e);
    pmc_layout l;
    int rc = pmc_comm_layout(c, &l);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    CHECK(l.rank == g_rank && l.size == g_size, "rank/size %d/%d, MPI says %d/%d", l.rank, l.size,
          g_rank, g_size);
    CHECK(l.local_rank == e.local_rank && l.local_size == e.local_size,
          "local rank/size %d/%d, expected %d/%d", l.local_rank, l.local_size, e.local_rank, e.local_size);
    CHECK(l.node == e.node && l.nnodes == e.nnodes, "node %d of %d, expected %d of %d", l.node, l.nnodes,
          e.node, e.nnodes);
    CHECK(l.min_local == e.min_local && l.max_local == e.max_local, "min/max local %d/%d, expected %d/%d",
          l.min_local, l.max_local, e.min_local, e.max_local);
    CHECK(l.consecutive == e.consecutive, "consecutive %d, expected %d", l.consecutive, e.consecutive);
    /* No lane cap asked: one lane per rank of the smallest node. */
    CHECK(l.lanes == e.min_local, "lanes %d, expected %d", l.lanes, e.min_local);
    CHECK(l.lane == (l.local_rank < l.lanes ? l.local_rank : -1), "lane %d", l.lane);
    CHECK(l.chunk_bytes == (cfg->chunk_bytes & ~(uint64_t)63), "chunk %" PRIu64, l.chunk_bytes);
    if (cfg->shm_mode == PMC_SHM_OFF) {
        CHECK(l.shm_active == 0, "segment active with shm_mode OFF");
        CHECK(strstr(pmc_comm_note(c), "PYMCOLL_SHM=off") != NULL, "note: %s", pmc_comm_note(c));
    } else {
        CHECK(l.shm_active == 1, "segment not active: %s", pmc_comm_note(c));
    }
    /* segment_bytes: this node's mapping (none on a node of one rank);
     * data_bytes: the data area of every node's segment, same everywhere. */
    if (!l.shm_active) {
        CHECK(l.segment_bytes == 0 && l.data_bytes == 0, "segment of %" PRIu64 " bytes (%" PRIu64
              " data) reported while inactive", l.segment_bytes, l.data_bytes);
    } else if (l.local_size > 1) {
        CHECK(l.data_bytes >= cfg->shm_bytes && l.segment_bytes > l.data_bytes,
              "segment %" PRIu64 " bytes, data %" PRIu64 ", asked %" PRIu64, l.segment_bytes, l.data_bytes,
              cfg->shm_bytes);
    } else {
        CHECK(l.segment_bytes == 0, "a node of one rank maps %" PRIu64 " bytes", l.segment_bytes);
    }
    uint64_t dmin = 0, dmax = 0;
    CHECK_MPI(MPI_Allreduce(&l.data_bytes, &dmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Allreduce(&l.data_bytes, &dmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
    CHECK(dmin == dmax, "data_bytes differs between ranks: %" PRIu64 " .. %" PRIu64, dmin, dmax);
    int *node_of = malloc(sizeof(int) * (size_t)g_size), *local_of = malloc(sizeof(int) * (size_t)g_size);
    rc = pmc_comm_rank_map(c, node_of, local_of);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    for (int r = 0; r < g_size && rc == PMC_OK; ++r)
        CHECK(node_of[r] == e.node_of[r] && local_of[r] == e.local_of[r],
              "rank map of rank %d: (%d, %d), expected (%d, %d)", r, node_of[r], local_of[r], e.node_of[r],
              e.local_of[r]);
    free(node_of);
    free(local_of);
    free(e.node_of);
    free(e.local_of);
}

/* Barrier checked with a counter in an MPI shared-memory window when the
 * whole job is on one host: after the k-th barrier every rank has arrived
 * k times, and none can have arrived k + 2 times. */
static void test_barrier(pmc_comm *c, int iters)
{
    MPI_Comm shared = MPI_COMM_NULL;
    CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &shared));
    int shared_size = 0, one_host = 0;
    CHECK_MPI(MPI_Comm_size(shared, &shared_size));
    int mine = shared_size == g_size;
    CHECK_MPI(MPI_Allreduce(&mine, &one_host, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
    MPI_Win win = MPI_WIN_NULL;
    _Atomic uint64_t *count = NULL;
    if (one_host) {
        void *base = NULL;
        CHECK_MPI(MPI_Win_allocate_shared(g_rank == 0 ? (MPI_Aint)sizeof(uint64_t) : 0, 1, MPI_INFO_NULL,
                                          shared, &base, &win));
        MPI_Aint sz = 0;
        int disp = 0;
        CHECK_MPI(MPI_Win_shared_query(win, 0, &sz, &disp, &base));
        count = base;
        CHECK_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
        if (g_rank == 0) atomic_store(count, 0);
        CHECK_MPI(MPI_Win_sync(win));
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    }
    const uint64_t n = (uint64_t)g_size;
    for (int k = 1; k <= iters; ++k) {
        if (count) atomic_fetch_add(count, 1);
        int rc = pmc_barrier(c);
        CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
        if (rc != PMC_OK) break;
        if (count) {
            uint64_t v = atomic_load(count);
            CHECK(v >= n * (uint64_t)k && v <= n * (uint64_t)k + n - 1,
                  "after barrier %d the count is %" PRIu64, k, v);
        }
    }
    if (one_host) {
        CHECK_MPI(MPI_Win_unlock_all(win));
        CHECK_MPI(MPI_Win_free(&win));
    }
    CHECK_MPI(MPI_Comm_free(&shared));
}

static int bcast_one(pmc_comm *c, uint64_t it, uint64_t bytes, int root)
{
    const uint64_t seed = t_seed(it, bytes, (uint64_t)root, 0xbc);
    unsigned char *buf = malloc(bytes + GUARD);
    CHECK(buf != NULL, "malloc");
    if (buf == NULL) return PMC_ERR_NOMEM;
    if (g_rank == root) t_fill(buf, bytes, seed);
    else memset(buf, (int)(0x5a ^ (it & 0xff)), bytes);
    memset(buf + bytes, GUARD_BYTE, GUARD);
    int rc = pmc_bcast(c, buf, bytes, root);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    if (rc == PMC_OK) {
        int64_t bad = t_verify(buf, bytes, seed);
        CHECK(bad < 0, "Bcast of %" PRIu64 " bytes from %d: byte %" PRId64 " wrong", bytes, root, bad);
        CHECK(t_verify_const(buf + bytes, GUARD, GUARD_BYTE) < 0, "Bcast wrote past %" PRIu64 " bytes", bytes);
    }
    free(buf);
    return rc;
}

static int allgather_one(pmc_comm *c, uint64_t it, uint64_t block, int inplace)
{
    const uint64_t total = (uint64_t)g_size * block;
    const uint64_t salt = 0xa9u + (uint64_t)inplace;
    unsigned char *recv = malloc(total + GUARD), *send = inplace ? NULL : malloc(block + GUARD);
    CHECK(recv != NULL && (inplace || send != NULL), "malloc");
    if (recv == NULL || (!inplace && send == NULL)) {
        free(recv);
        free(send);
        return PMC_ERR_NOMEM;
    }
    memset(recv, 0x33, total);
    memset(recv + total, GUARD_BYTE, GUARD);
    unsigned char *mine = inplace ? recv + (uint64_t)g_rank * block : send;
    t_fill(mine, block, t_seed(it, block, (uint64_t)g_rank, salt));
    if (!inplace) memset(send + block, GUARD_BYTE, GUARD);
    int rc = pmc_allgather(c, send, recv, block);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    if (rc == PMC_OK) {
        for (int r = 0; r < g_size; ++r) {
            int64_t bad = t_verify(recv + (uint64_t)r * block, block, t_seed(it, block, (uint64_t)r, salt));
            CHECK(bad < 0, "Allgather block=%" PRIu64 " inplace=%d: block of rank %d wrong at byte %" PRId64,
                  block, inplace, r, bad);
        }
        CHECK(t_verify_const(recv + total, GUARD, GUARD_BYTE) < 0, "Allgather wrote past recv");
        if (!inplace) {
            CHECK(t_verify(send, block, t_seed(it, block, (uint64_t)g_rank, salt)) < 0, "send buffer changed");
            CHECK(t_verify_const(send + block, GUARD, GUARD_BYTE) < 0, "guard after send changed");
        }
    }
    free(recv);
    free(send);
    return rc;
}

/* Argument errors: PMC_ERR_ARG with a message, the communicator intact. */
static void test_arg_errors(pmc_comm *c)
{
    unsigned char buf[8] = {0};
    const int bad_roots[2] = {g_size, -1};
    for (int i = 0; i < 2; ++i) {
        uint64_t seq = pmc_comm_seq(c);
        int rc = pmc_bcast(c, buf, sizeof(buf), bad_roots[i]);
        CHECK_RC(rc, PMC_ERR_ARG, pmc_comm_errmsg(c));
        char want[32];
        snprintf(want, sizeof(want), "root=%d", bad_roots[i]);
        CHECK(strstr(pmc_comm_errmsg(c), want) != NULL, "message does not name %s: %s", want,
              pmc_comm_errmsg(c));
        CHECK(pmc_comm_seq(c) == seq + 1, "sequence %" PRIu64 " after %" PRIu64, pmc_comm_seq(c), seq);
        CHECK(!pmc_comm_broken(c), "a bad root broke the communicator");
    }
    int rc = pmc_bcast(c, NULL, 16, 0);
    CHECK_RC(rc, PMC_ERR_ARG, pmc_comm_errmsg(c));
    CHECK(strstr(pmc_comm_errmsg(c), "buf") != NULL, "message: %s", pmc_comm_errmsg(c));
    rc = pmc_allgather(c, buf, NULL, 4);
    CHECK_RC(rc, PMC_ERR_ARG, pmc_comm_errmsg(c));
    CHECK(strstr(pmc_comm_errmsg(c), "recvbuf") != NULL, "message: %s", pmc_comm_errmsg(c));
    CHECK(!pmc_comm_broken(c), "an argument error broke the communicator");

    /* Still usable, and a success clears the message. */
    rc = pmc_barrier(c);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    CHECK(pmc_comm_errmsg(c)[0] == '\0', "message kept after a success: %s", pmc_comm_errmsg(c));
    CHECK(bcast_one(c, 99, 1000, g_size - 1) == PMC_OK, "Bcast after the errors");
    CHECK(allgather_one(c, 99, 100, 1) == PMC_OK, "Allgather after the errors");
}

static void run_config(const char *name, const pmc_config *cfg, int iters)
{
    snprintf(t_who, sizeof(t_who), "rank %d/%d %s", g_rank, g_size, name);
    pmc_comm *c = NULL;
    int rc = pmc_comm_create(world_handle(), cfg, &c);
    CHECK_RC(rc, PMC_OK, "see stderr");
    if (rc != PMC_OK) return;
    CHECK(c != NULL, "no communicator");
    CHECK(!pmc_comm_broken(c) && pmc_comm_seq(c) == 0, "fresh communicator broken or numbered");
    check_layout(c, cfg);

    pmc_layout l;
    rc = pmc_comm_layout(c, &l);
    CHECK_RC(rc, PMC_OK, pmc_comm_errmsg(c));
    const uint64_t data = l.data_bytes ? l.data_bytes : cfg->shm_bytes;
    const uint64_t ch = l.chunk_bytes;

    test_barrier(c, 50 * iters);

    const uint64_t bsizes[] = {0, 1, 7, 64, ch - 1, ch, ch + 1, 3 * data + 13};
    for (int it = 0; it < iters && rc == PMC_OK; ++it)
        for (size_t i = 0; i < sizeof(bsizes) / sizeof(bsizes[0]) && rc == PMC_OK; ++i)
            for (int root = 0; root < g_size && rc == PMC_OK; ++root)
                rc = bcast_one(c, (uint64_t)it, bsizes[i], root);

    const uint64_t gsizes[] = {0, 1, 7, 65, 4097, 3 * data / (uint64_t)g_size + 13};
    for (int it = 0; it < iters && rc == PMC_OK; ++it)
        for (size_t i = 0; i < sizeof(gsizes) / sizeof(gsizes[0]) && rc == PMC_OK; ++i)
            for (int inplace = 0; inplace < 2 && rc == PMC_OK; ++inplace)
                rc = allgather_one(c, (uint64_t)it, gsizes[i], inplace);

    if (rc == PMC_OK) test_arg_errors(c);
    CHECK(!pmc_comm_broken(c), "communicator broken at the end: %s", pmc_comm_errmsg(c));
    CHECK(pmc_comm_free(c) == PMC_OK, "free");
}

/* Checks that need no communicator. */
static void test_local_api(void)
{
    snprintf(t_who, sizeof(t_who), "rank %d/%d local", g_rank, g_size);
    pmc_comm *c = (pmc_comm *)&c; /* must be reset to NULL on failure */
    pmc_config bad;
    pmc_config_defaults(&bad);
    bad.node_size = -1;
    CHECK(pmc_comm_create(world_handle(), &bad, &c) == PMC_ERR_ARG && c == NULL, "node_size=-1 accepted");
    pmc_config_defaults(&bad);
    bad.chunk_bytes = 10;
    CHECK(pmc_comm_create(world_handle(), &bad, &c) == PMC_ERR_ARG && c == NULL, "chunk_bytes=10 accepted");
    CHECK(pmc_comm_create(world_handle(), NULL, NULL) == PMC_ERR_ARG, "NULL out accepted");
    pmc_layout l;
    CHECK(pmc_comm_layout(NULL, &l) == PMC_ERR_ARG, "layout of NULL");
    CHECK(pmc_comm_free(NULL) == PMC_OK, "free(NULL)");
    CHECK(pmc_barrier(NULL) == PMC_ERR_ARG, "barrier(NULL)");
    CHECK(pmc_comm_broken(NULL) == 1, "NULL is not broken");
    for (int s = PMC_OK; s <= PMC_ERR_MISMATCH; ++s)
        CHECK(strcmp(pmc_strerror(s), pmc_strerror(-1)) != 0, "no text for status %d", s);
    CHECK(strlen(pmc_mpi_build_vendor()) > 0, "no vendor string");
}

int main(int argc, char **argv)
{
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
        fprintf(stderr, "FAIL MPI_Init\n");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const double t0 = MPI_Wtime();

    test_local_api();

    /* Small data area and chunk: "> data area" stays cheap and the cells
     * wrap many times. A generous timeout turns a hang into a failure. */
    pmc_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.timeout = 60;
    cfg.shm_bytes = 64u << 10;
    cfg.chunk_bytes = 4u << 10;
    run_config("real nodes", &cfg, 2);
    cfg.node_size = 2;
    run_config("node_size=2", &cfg, 2);
    cfg.node_size = 3;
    cfg.chunk_bytes = 4000; /* rounded down to a multiple of 64 */
    run_config("node_size=3", &cfg, 2);
    cfg.node_size = 0;
    cfg.chunk_bytes = 4u << 10;
    cfg.shm_mode = PMC_SHM_OFF;
    run_config("shm off", &cfg, 1);
    cfg.node_size = 2;
    run_config("shm off node_size=2", &cfg, 1);

    /* The defaults (NULL config): one pass of each collective. */
    snprintf(t_who, sizeof(t_who), "rank %d/%d defaults", g_rank, g_size);
    pmc_comm *c = NULL;
    int rc = pmc_comm_create(world_handle(), NULL, &c);
    CHECK_RC(rc, PMC_OK, "see stderr");
    if (rc == PMC_OK) {
        pmc_layout l;
        CHECK(pmc_comm_layout(c, &l) == PMC_OK, "layout");
        CHECK(l.chunk_bytes == PMC_DEFAULT_CHUNK_BYTES, "default chunk %" PRIu64, l.chunk_bytes);
        if (l.shm_active && l.local_size > 1)
            CHECK(l.data_bytes >= PMC_DEFAULT_SHM_BYTES, "default data area %" PRIu64, l.data_bytes);
        CHECK_RC(pmc_barrier(c), PMC_OK, pmc_comm_errmsg(c));
        CHECK(bcast_one(c, 7, 5u << 20, g_size - 1) == PMC_OK, "Bcast with defaults");
        CHECK(allgather_one(c, 7, 100000, 0) == PMC_OK, "Allgather with defaults");
        CHECK(pmc_comm_free(c) == PMC_OK, "free");
    }

    int failures = 0;
    snprintf(t_who, sizeof(t_who), "rank %d/%d", g_rank, g_size);
    CHECK_MPI(MPI_Allreduce(&t_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (g_rank == 0) {
        if (failures) fprintf(stderr, "test_comm_mpi -n %d: %d check(s) failed\n", g_size, failures);
        else printf("test_comm_mpi -n %d: all checks passed (%.1f s)\n", g_size, MPI_Wtime() - t0);
    }
    MPI_Finalize();
    return t_failures != 0;
}

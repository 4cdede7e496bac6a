/* Communicator creation: node and lane communicators, rank map, segment. */
#include "comm.h"
#include "node/bulk_copy.h"
#include "node/heap.h"

#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHECK_MPI(c, call)                                   \
    do {                                                     \
        int mpi_rc_ = (call);                                \
        if (mpi_rc_ != MPI_SUCCESS) return pmc_mpi_fail((c), mpi_rc_, #call); \
    } while (0)

static void free_comm(MPI_Comm *m)
{
    if (*m != MPI_COMM_NULL) MPI_Comm_free(m);
    *m = MPI_COMM_NULL;
}

/* The trace ring, named alike on every member: the world rank of rank 0
 * and the number of communicators that process had made. */
static int setup_trace(pmc_comm *c, const int *world_ranks, uint32_t number0)
{
    char id[32];
#ifdef PMC_CALL_PMPI
    snprintf(id, sizeof(id), "p%d.%u", world_ranks[0], number0);
#else
    snprintf(id, sizeof(id), "%d.%u", world_ranks[0], number0);
#endif
    const pmc_node *n = &c->node_ctx;
    int *local_to_rank = malloc(sizeof(int) * (size_t)n->local_size);
    if (local_to_rank == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory for the trace");
    for (int l = 0; l < n->local_size; ++l) local_to_rank[l] = c->members[c->member_start[c->node] + l];
    c->trace = pmc_trace_ring_new(id, c->rank, c->size, world_ranks, c->node, c->nnodes, n->local_rank,
                                  n->local_size, local_to_rank, &n->wait, n->seg.base ? n->seg.pids : NULL);
    free(local_to_rank);
    if (c->trace == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory for the trace");
    return PMC_OK;
}

/* Rank map, plus what the trace needs of every rank (its world rank, and
 * rank 0's communicator count that names the communicator). */
static int build_rank_map(pmc_comm *c, int local_rank, int **world_ranks, uint32_t *number0)
{
    int world_rank = -1, world_size = -1;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, &world_size) != MPI_SUCCESS)
        world_rank = world_size = -1;
    pmc_trace_process_init(world_rank, world_size);
    int mine[4] = {c->node, local_rank, world_rank, (int)pmc_trace_next_comm_number()};
    int *all = malloc(sizeof(int) * 4u * (size_t)c->size);
    *world_ranks = malloc(sizeof(int) * (size_t)c->size);
    c->node_of = malloc(sizeof(int) * (size_t)c->size);
    c->local_of = malloc(sizeof(int) * (size_t)c->size);
    c->members = malloc(sizeof(int) * (size_t)c->size);
    if (!all || !c->node_of || !c->local_of || !c->members || !*world_ranks) {
        free(all);
        return pmc_fail(c, PMC_ERR_NOMEM, "out of memory building the rank map");
    }
    int rc = MPI_Allgather(mine, 4, MPI_INT, all, 4, MPI_INT, c->comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return pmc_mpi_fail(c, rc, "MPI_Allgather");
    }
    c->nnodes = 0;
    for (int r = 0; r < c->size; ++r) {
        c->node_of[r] = all[4 * r];
        c->local_of[r] = all[4 * r + 1];
        (*world_ranks)[r] = all[4 * r + 2];
        if (c->node_of[r] + 1 > c->nnodes) c->nnodes = c->node_of[r] + 1;
    }
    *number0 = (uint32_t)all[3];
    free(all);
    c->vcounts = calloc(4u * (size_t)c->size, sizeof(pmc_mpi_count) > sizeof(pmc_mpi_displ)
                                                    ? sizeof(pmc_mpi_count) : sizeof(pmc_mpi_displ));
    if (!c->vcounts) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory building the rank map");
    c->node_counts = calloc((size_t)c->nnodes, sizeof(pmc_mpi_count));
    c->node_displs = calloc((size_t)c->nnodes, sizeof(pmc_mpi_displ));
    if (!c->node_counts || !c->node_displs)
        return pmc_fail(c, PMC_ERR_NOMEM, "out of memory building the rank map");
    c->node_count = calloc((size_t)c->nnodes, sizeof(int));
    c->member_start = calloc((size_t)c->nnodes, sizeof(int));
    c->node_first = calloc((size_t)c->nnodes, sizeof(int));
    if (!c->node_count || !c->member_start || !c->node_first)
        return pmc_fail(c, PMC_ERR_NOMEM, "out of memory building the rank map");
    for (int r = 0; r < c->size; ++r) c->node_count[c->node_of[r]]++;
    int acc = 0;
    c->min_local = INT_MAX;
    c->max_local = 0;
    for (int k = 0; k < c->nnodes; ++k) {
        c->member_start[k] = acc;
        acc += c->node_count[k];
        if (c->node_count[k] < c->min_local) c->min_local = c->node_count[k];
        if (c->node_count[k] > c->max_local) c->max_local = c->node_count[k];
    }
    for (int r = 0; r < c->size; ++r) c->members[c->member_start[c->node_of[r]] + c->local_of[r]] = r;
    c->consecutive = 1;
    for (int i = 0; i < c->size; ++i)
        if (c->members[i] != i) c->consecutive = 0;
    for (int k = 0; k < c->nnodes; ++k) c->node_first[k] = c->members[c->member_start[k]];
    return PMC_OK;
}

/* Creates and maps the segment on this node; the choice to use it is made
 * by all ranks of the communicator together, so every rank takes the same
 * path in every later collective. */
static int setup_segment(pmc_comm *c, const pmc_config *cfg_in, int local_rank, int local_size)
{
    /* Every rank of the largest node, plus the reductions' result region,
     * needs a region of at least two cells of 64 bytes, and so does every
     * pair of ranks in an alltoall; the size is computed from agreed values
     * only. */
    pmc_config cfg_copy = *cfg_in;
    const pmc_config *cfg = &cfg_copy;
    const uint64_t L = (uint64_t)c->max_local;
    uint64_t min_data = 256u * (L + 1u);
    if (min_data < 128u * L * L) min_data = 128u * L * L; /* alltoall: two cells per pair */
    if (cfg_copy.shm_bytes < min_data) cfg_copy.shm_bytes = min_data;
    cfg_copy.shm_bytes = (cfg_copy.shm_bytes + 4095) / 4096 * 4096;
    const uint64_t heap = (cfg_copy.heap_bytes + 4095) / 4096 * 4096;
    char path[PMC_SEG_PATH_MAX];
    char err[PMC_ERRMSG_LEN];
    memset(path, 0, sizeof(path));
    err[0] = '\0';
    pmc_segment *seg = &c->node_ctx.seg;
    int ok = 1;
    int created = 0;

    if (cfg->shm_mode == PMC_SHM_OFF) {
        ok = 0;
        snprintf(err, sizeof(err), "PYMCOLL_SHM=off: the node segment is disabled");
    } else if (local_size > 1) {
        if (local_rank == 0) {
            int rc = pmc_segment_create(seg, cfg->shm_dir, local_size, cfg->shm_bytes + heap, heap,
                                        path, sizeof(path), err, sizeof(err));
            if (rc == PMC_OK && heap > 0) rc = pmc_segment_reserve_heap(seg, heap);
            if (rc != PMC_OK && seg->base != NULL) {
                pmc_segment_detach(seg);
                unlink(path);
            }
            ok = rc == PMC_OK;
            created = ok;
            if (!ok) path[0] = '\0';
        }
        int bc = MPI_Bcast(path, (int)sizeof(path), MPI_CHAR, 0, c->nodecomm);
        if (bc != MPI_SUCCESS) {
            if (created) unlink(path); /* never leave a name behind */
            return pmc_mpi_fail(c, bc, "MPI_Bcast");
        }
        if (path[0] == '\0') {
            ok = 0;
            if (local_rank != 0) snprintf(err, sizeof(err), "local rank 0 could not create the node segment");
        } else if (local_rank != 0) {
            ok = pmc_segment_attach(seg, path, local_size, err, sizeof(err)) == PMC_OK;
        }
        if (ok) seg->pids[local_rank] = (int32_t)getpid();
        int node_ok = 0;
        int mpi_rc = MPI_Allreduce(&ok, &node_ok, 1, MPI_INT, MPI_MIN, c->nodecomm);
        /* Every local rank has tried to map it: the name is no longer needed,
         * so nothing is left in the directory even if the job is killed. */
        if (created) unlink(path);
        if (mpi_rc != MPI_SUCCESS) return pmc_mpi_fail(c, mpi_rc, "MPI_Allreduce");
        if (ok && !node_ok) snprintf(err, sizeof(err), "another local rank could not map the node segment");
        ok = node_ok;
    }

    struct { int ok; int rank; } in = {ok, c->rank}, out;
    CHECK_MPI(c, MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, c->comm));
    if (out.ok) {
        c->shm_active = 1;
        c->data_bytes = cfg->shm_bytes;
        /* Map the cells' pages in this process now (the creator reserved them): else each
         * page's first use, which the ring's advance spreads over the first dozens of calls,
         * faults in every process, and the early calls (the cells' path trials among them) ran
         * 2-5x slower. Best effort: a kernel without it faults them as before. */
        if (seg->base != NULL) (void)pmc_segment_populate(seg->data, cfg->shm_bytes);
        if (seg->base != NULL && seg->heap_bytes > 0) {
            c->heap = pmc_heap_create(seg->base, seg->bytes, seg->heap, seg->heap_bytes, local_rank, local_size);
            if (c->heap == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory for the heap allocator");
        }
        return PMC_OK;
    }
    CHECK_MPI(c, MPI_Bcast(err, (int)sizeof(err), MPI_CHAR, out.rank, c->comm));
    err[sizeof(err) - 1] = '\0';
    /* The reason is cut to what fits after the preamble, so the note keeps
     * its closing parenthesis (and -Wformat-truncation stays quiet). */
    snprintf(c->note, sizeof(c->note),
             "node segment not used, collectives run through the wrapped MPI communicator "
             "(rank %d: %.600s)", out.rank, err);
    pmc_segment_detach(seg);
    c->shm_active = 0;
    return PMC_OK;
}

/* Whether the ranks of this host outnumber the CPUs they can run on
 * together (the union of their affinity masks). A rank bound to one core
 * still spins happily when its peers have cores of their own; ranks sharing
 * cores must yield instead. Counted over the host, not the (virtual) node:
 * virtual nodes on one host share its cores. The same on every rank of the
 * host, so every node agrees. */
static int host_oversubscribed(pmc_comm *c, MPI_Comm host, int *out)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int ranks = 1;
    CHECK_MPI(c, MPI_Comm_size(host, &ranks));
    int cpus = pmc_online_cpus();
    if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_ZERO(&set);
    CHECK_MPI(c, MPI_Allreduce(MPI_IN_PLACE, &set, (int)sizeof(set), MPI_BYTE, MPI_BOR, host));
    if (CPU_COUNT(&set) > 0) cpus = CPU_COUNT(&set);
    *out = ranks > cpus;
    return PMC_OK;
}

/* The tuning table decides every rank's path: ranks that disagree would
 * hang, so creation fails instead, naming the setting. */
static int agree_tuning(pmc_comm *c)
{
    enum { N = 8 + PMC_COLL_COUNT };
    int64_t v[2 * N];
    v[0] = (int64_t)c->inline_max;
    v[1] = (int64_t)c->cma_min;
    v[2] = c->copy;
    v[3] = (int64_t)c->flat_max;
    v[4] = (int64_t)c->lanes_small_max;
    v[5] = (int64_t)c->lanes_direct_min;
    v[6] = (int64_t)c->lanes_bcast_tree_max;
    v[7] = c->path_trials;
    for (int i = 0; i < PMC_COLL_COUNT; ++i) v[8 + i] = c->algorithm[i];
    for (int i = 0; i < N; ++i) v[N + i] = -v[i];
    CHECK_MPI(c, MPI_Allreduce(MPI_IN_PLACE, v, 2 * N, MPI_INT64_T, MPI_MAX, c->comm));
    for (int i = 0; i < N; ++i) {
        if (v[i] == -v[N + i]) continue;
        static const char *const names[] = {"PYMCOLL_INLINE_MAX", "PYMCOLL_CMA_MIN", "PYMCOLL_COPY",
                                             "PYMCOLL_REDUCE_FLAT_MAX", "PYMCOLL_LANES_SMALL_MAX",
                                             "PYMCOLL_LANES_DIRECT_MIN", "PYMCOLL_LANES_BCAST_TREE_MAX",
                                             "PYMCOLL_PATH_TRIALS"};
        const char *what = i < 8 ? names[i] : "PYMCOLL_<COLLECTIVE>_ALGORITHM";
        return pmc_fail(c, PMC_ERR_ARG, "%s differs across ranks (from %lld to %lld); every rank must use the "
                        "same tuning, or ranks would take different paths and hang", what,
                        (long long)-v[N + i], (long long)v[i]);
    }
    return PMC_OK;
}

/* Whether process_vm_readv works between the ranks of every node: each
 * rank reads a pattern from its node's local rank 0 (ptrace policy or
 * seccomp may refuse it); the verdict is agreed by all ranks. */
static int probe_cma(pmc_comm *c)
{
    static const char pattern[16] = "pymcoll-cma-ok!";
    char mine[16];
    memcpy(mine, pattern, sizeof(mine));
    uint64_t where = (uint64_t)(uintptr_t)mine;
    int ok = 1;
    if (c->shm_active && c->node_ctx.local_size > 1) {
        CHECK_MPI(c, MPI_Bcast(&where, 1, MPI_UINT64_T, 0, c->nodecomm));
        if (c->node_ctx.local_rank != 0) {
            char got[16] = {0};
            struct iovec local = {got, sizeof(got)};
            struct iovec remote = {(void *)(uintptr_t)where, sizeof(got)};
            ssize_t n = process_vm_readv((pid_t)c->node_ctx.seg.pids[0], &local, 1, &remote, 1, 0);
            ok = n == (ssize_t)sizeof(got) && memcmp(got, pattern, sizeof(got)) == 0;
        }
    }
    /* Also the point after which local rank 0 may let `mine` go. */
    CHECK_MPI(c, MPI_Allreduce(&ok, &c->cma_ok, 1, MPI_INT, MPI_MIN, c->comm));
    return PMC_OK;
}

static int create(pmc_comm *c, MPI_Comm user, const pmc_config *cfg)
{
    CHECK_MPI(c, MPI_Comm_dup(user, &c->comm));
    CHECK_MPI(c, MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
    CHECK_MPI(c, MPI_Comm_rank(c->comm, &c->rank));
    CHECK_MPI(c, MPI_Comm_size(c->comm, &c->size));

    MPI_Comm shared = MPI_COMM_NULL;
    CHECK_MPI(c, MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &shared));
    if (cfg->node_size > 0) {
        /* Blocks of consecutive ranks, or ranks dealt round-robin over as
         * many nodes (what a by-node placement of a real job looks like). */
        int srank = 0, ssize = 1;
        CHECK_MPI(c, MPI_Comm_rank(shared, &srank));
        CHECK_MPI(c, MPI_Comm_size(shared, &ssize));
        const int nvirtual = (ssize + cfg->node_size - 1) / cfg->node_size;
        const int color = cfg->node_cyclic ? srank % nvirtual : c->rank / cfg->node_size;
        int rc = MPI_Comm_split(shared, color, c->rank, &c->nodecomm);
        if (rc != MPI_SUCCESS) {
            free_comm(&shared);
            return pmc_mpi_fail(c, rc, "MPI_Comm_split");
        }
    } else {
        c->nodecomm = shared;
    }
    {
        int over = 0;
        int rc = host_oversubscribed(c, shared, &over);
        if (shared != c->nodecomm) free_comm(&shared);
        if (rc != PMC_OK) return rc;
        c->node_ctx.yield_now = over;
    }
    int local_rank, local_size;
    CHECK_MPI(c, MPI_Comm_rank(c->nodecomm, &local_rank));
    CHECK_MPI(c, MPI_Comm_size(c->nodecomm, &local_size));

    /* Nodes are numbered by the order of their first rank. */
    MPI_Comm leaders = MPI_COMM_NULL;
    CHECK_MPI(c, MPI_Comm_split(c->comm, local_rank == 0 ? 0 : MPI_UNDEFINED, c->rank, &leaders));
    c->node = 0;
    if (leaders != MPI_COMM_NULL) {
        int rc = MPI_Comm_rank(leaders, &c->node);
        free_comm(&leaders);
        if (rc != MPI_SUCCESS) return pmc_mpi_fail(c, rc, "MPI_Comm_rank");
    }
    CHECK_MPI(c, MPI_Bcast(&c->node, 1, MPI_INT, 0, c->nodecomm));
    int *world_ranks = NULL;
    uint32_t number0 = 0;
    int rc = build_rank_map(c, local_rank, &world_ranks, &number0);
    if (rc != PMC_OK) {
        free(world_ranks);
        return rc;
    }

    c->lanes = c->min_local;
    if (cfg->lanes > 0 && cfg->lanes < c->lanes) c->lanes = cfg->lanes;
    CHECK_MPI(c, MPI_Comm_split(c->comm, local_rank < c->lanes ? local_rank : MPI_UNDEFINED,
                                c->node, &c->lanecomm));
    if (c->lanecomm != MPI_COMM_NULL)
        CHECK_MPI(c, MPI_Comm_set_errhandler(c->lanecomm, MPI_ERRORS_RETURN));
    c->lane_others = malloc(sizeof(int) * (size_t)c->lanes);
    c->lcounts = calloc((size_t)local_size, sizeof(uint64_t));
    c->ldispls = calloc((size_t)local_size, sizeof(uint64_t));
    if (!c->lane_others || !c->lcounts || !c->ldispls) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory");
    for (int k = 0; k < c->lanes; ++k)
        if (k != local_rank) c->lane_others[c->nlane_others++] = k;
    CHECK_MPI(c, MPI_Comm_set_errhandler(c->nodecomm, MPI_ERRORS_RETURN));

    pmc_node *n = &c->node_ctx;
    n->local_rank = local_rank;
    n->local_size = local_size;
    n->timeout = cfg->timeout;
    n->wait_sleep = cfg->wait_sleep != 0;
    n->stream_min = cfg->stream_min != 0 ? cfg->stream_min : pmc_stream_min_default(local_size);
    n->movsb_min = cfg->movsb_min != 0 ? cfg->movsb_min : pmc_cell_movsb_min_default();
    n->chunk = cfg->chunk_bytes;
    n->errmsg = c->errmsg;
    n->errlen = sizeof(c->errmsg);
    n->signal_peers = pmc_trace_ctx.signals;
    n->others = malloc(sizeof(int) * (size_t)local_size);
    if (n->others == NULL) {
        free(world_ranks);
        return pmc_fail(c, PMC_ERR_NOMEM, "out of memory");
    }
    /* Start each rank's scan at its right neighbour to spread the reads. */
    for (int j = 1; j < local_size; ++j) n->others[j - 1] = (local_rank + j) % local_size;
    int rc3 = setup_segment(c, cfg, local_rank, local_size);
    if (rc3 == PMC_OK) rc3 = agree_tuning(c);
    if (rc3 == PMC_OK) rc3 = probe_cma(c);
    if (rc3 == PMC_OK) rc3 = setup_trace(c, world_ranks, number0);
    free(world_ranks);
    if (rc3 == PMC_OK) pmc_trace_install_handlers();
    return rc3;
}

/* A buffer kept for reuse, grown to at least bytes. */
static void *grow(void **buf, size_t *have, size_t bytes)
{
    if (bytes <= *have) return *buf;
    void *p = realloc(*buf, bytes);
    if (p == NULL) return NULL;
    *buf = p;
    *have = bytes;
    return p;
}

void *pmc_scratch(pmc_comm *c, size_t bytes) { return grow(&c->scratch, &c->scratch_bytes, bytes); }

void *pmc_scratch_outer(pmc_comm *c, size_t bytes) { return grow(&c->outer, &c->outer_bytes, bytes); }

void *pmc_scratch_lane(pmc_comm *c, size_t bytes) { return grow(&c->lane_scratch, &c->lane_scratch_bytes, bytes); }

void pmc_config_defaults(pmc_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->timeout = PMC_DEFAULT_TIMEOUT;
    cfg->shm_bytes = PMC_DEFAULT_SHM_BYTES;
    cfg->chunk_bytes = PMC_DEFAULT_CHUNK_BYTES;
    cfg->inline_max = PMC_DEFAULT_INLINE_MAX;
    cfg->heap_bytes = PMC_DEFAULT_HEAP_BYTES;
    cfg->flat_max = PMC_DEFAULT_FLAT_MAX;
    cfg->stream_min = PMC_DEFAULT_STREAM_MIN;
    cfg->cma_min = PMC_DEFAULT_CMA_MIN;
    cfg->lanes_small_max = PMC_DEFAULT_LANES_SMALL_MAX;
    cfg->lanes_direct_min = PMC_DEFAULT_LANES_DIRECT_MIN;
    cfg->lanes_bcast_tree_max = PMC_DEFAULT_LANES_BCAST_TREE_MAX;
    cfg->shm_dir = "/dev/shm";
}

int pmc_comm_create(uintptr_t mpi_comm, const pmc_config *cfg_in, pmc_comm **out)
{
    return pmc_comm_create_why(mpi_comm, cfg_in, out, NULL, 0);
}

int pmc_comm_create_why(uintptr_t mpi_comm, const pmc_config *cfg_in, pmc_comm **out, char *why, size_t whylen)
{
    if (why != NULL && whylen > 0) why[0] = '\0';
    if (out == NULL) return PMC_ERR_ARG;
    *out = NULL;
    pmc_config cfg, dflt;
    pmc_config_defaults(&dflt);
    memset(&cfg, 0, sizeof(cfg));
    if (cfg_in != NULL) cfg = *cfg_in;
    if (cfg.timeout < 0) cfg.timeout = dflt.timeout;
    if (cfg.shm_bytes == 0) cfg.shm_bytes = dflt.shm_bytes;
    if (cfg.chunk_bytes == 0) cfg.chunk_bytes = dflt.chunk_bytes;
    if (cfg.heap_bytes == 0) cfg.heap_bytes = dflt.heap_bytes;
    if (cfg.shm_dir == NULL || cfg.shm_dir[0] == '\0') cfg.shm_dir = dflt.shm_dir;
    if (cfg.inline_max == 0) cfg.inline_max = dflt.inline_max;
    if (cfg.flat_max == 0) cfg.flat_max = dflt.flat_max;
    if (cfg.lanes_small_max == 0) cfg.lanes_small_max = dflt.lanes_small_max;
    if (cfg.lanes_direct_min == 0) cfg.lanes_direct_min = dflt.lanes_direct_min;
    if (cfg.lanes_bcast_tree_max == 0) cfg.lanes_bcast_tree_max = dflt.lanes_bcast_tree_max;
    if (cfg.copy < PMC_COPY_AUTO || cfg.copy > PMC_COPY_DIRECT) return PMC_ERR_ARG;
    for (int i = 0; i < 16; ++i)
        if (cfg.algorithm[i] < PMC_ALGO_AUTO || cfg.algorithm[i] > PMC_ALGO_LANES) return PMC_ERR_ARG;
    if (cfg.node_size < 0 || cfg.lanes < 0 || cfg.chunk_bytes < 64) return PMC_ERR_ARG;
    cfg.chunk_bytes &= ~(uint64_t)63;

    pmc_comm *c = calloc(1, sizeof(*c));
    if (c == NULL) return PMC_ERR_NOMEM;
    if (pthread_mutex_init(&c->lock, NULL) != 0 || pthread_cond_init(&c->wake, NULL) != 0) {
        free(c);
        return PMC_ERR_SYS;
    }
    c->progress_wanted = cfg.progress_thread != 0;
    c->comm = c->nodecomm = c->lanecomm = MPI_COMM_NULL;
    c->check = cfg.check != 0;
    pmc_huge_pages_init(&c->huge, cfg.huge_off == 0);
    c->inline_max = cfg.inline_max;
    c->cma_min = cfg.cma_min;
    c->flat_max = cfg.flat_max;
    c->lanes_small_max = cfg.lanes_small_max;
    c->lanes_direct_min = cfg.lanes_direct_min;
    c->lanes_bcast_tree_max = cfg.lanes_bcast_tree_max;
    c->copy = cfg.copy;
    c->path_trials = !cfg.fixed_paths && cfg.cma_min == 0 && cfg.copy == PMC_COPY_AUTO;
    for (int i = 1; i < PMC_COLL_COUNT; ++i) c->algorithm[i] = cfg.algorithm[i - 1];
    int rc = create(c, (MPI_Comm)mpi_comm, &cfg);
    if (rc != PMC_OK) {
        /* Keep the message for the caller: it is all they get. */
        if (why != NULL && whylen > 0) snprintf(why, whylen, "%s", c->errmsg);
        else fprintf(stderr, "pymcoll: communicator creation failed: %s\n", c->errmsg);
        pmc_comm_free(c);
        return rc;
    }
    *out = c;
    return PMC_OK;
}

int pmc_comm_free(pmc_comm *c)
{
    if (c == NULL) return PMC_OK;
    pmc_ops_shutdown(c);
    pmc_trace_ring_retire(c->trace);
    c->trace = NULL;
    /* Memory that MPI messages or collectives left by a failed op may still
     * read or write (scratch, the segment) is kept until the process ends. */
    const int keep = c->left_in_flight > 0;
    if (c->heap != NULL) {
        /* The heap owns the mapping: arrays in it may outlive the communicator. */
        if (!keep) pmc_heap_release(c->heap);
        c->heap = NULL;
    } else if (!keep) {
        pmc_segment_detach(&c->node_ctx.seg);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        free_comm(&c->lanecomm);
        free_comm(&c->nodecomm);
        free_comm(&c->comm);
    }
    if (keep) c->scratch = c->outer = c->lane_scratch = NULL;
    free(c->node_ctx.others);
    free(c->node_of);
    free(c->local_of);
    free(c->node_first);
    free(c->node_count);
    free(c->members);
    free(c->member_start);
    free(c->scratch);
    free(c->outer);
    free(c->lane_scratch);
    free(c->node_counts);
    free(c->node_displs);
    free(c->vcounts);
    free(c->lane_others);
    free(c->lcounts);
    free(c->ldispls);
    free(c->lreq);
    free(c->lreq_recv);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->wake);
    free(c);
    return PMC_OK;
}

int pmc_comm_layout(const pmc_comm *c, pmc_layout *o)
{
    if (c == NULL || o == NULL) return PMC_ERR_ARG;
    memset(o, 0, sizeof(*o));
    o->rank = c->rank;
    o->size = c->size;
    o->node = c->node;
    o->nnodes = c->nnodes;
    o->local_rank = c->node_ctx.local_rank;
    o->local_size = c->node_ctx.local_size;
    o->lanes = c->lanes;
    o->lane = o->local_rank < c->lanes ? o->local_rank : -1;
    o->min_local = c->min_local;
    o->max_local = c->max_local;
    o->shm_active = c->shm_active;
    o->consecutive = c->consecutive;
    o->segment_bytes = c->node_ctx.seg.bytes;
    o->data_bytes = c->data_bytes;
    o->chunk_bytes = c->node_ctx.chunk;
    o->cma_ok = c->cma_ok;
    return PMC_OK;
}

int pmc_comm_rank_map(const pmc_comm *c, int *node_of, int *local_of)
{
    if (c == NULL || node_of == NULL || local_of == NULL) return PMC_ERR_ARG;
    memcpy(node_of, c->node_of, sizeof(int) * (size_t)c->size);
    memcpy(local_of, c->local_of, sizeof(int) * (size_t)c->size);
    return PMC_OK;
}

pmc_heap *pmc_comm_heap(pmc_comm *c) { return c ? c->heap : NULL; }

const char *pmc_comm_errmsg(const pmc_comm *c) { return c ? c->errmsg : ""; }
const char *pmc_comm_note(const pmc_comm *c) { return c ? c->note : ""; }
const char *pmc_comm_trace_id(const pmc_comm *c) { return c && c->trace ? c->trace->id : ""; }
uint64_t pmc_comm_seq(const pmc_comm *c) { return c ? c->coll_seq : 0; }
int pmc_comm_broken(const pmc_comm *c) { return c ? c->broken : 1; }

int pmc_comm_path_trial(const pmc_comm *c, int coll, int k, uint64_t *min_bytes, int *calls, int *retrials, int *chosen,
                        double *cells_s, double *single_copy_s)
{
    if (c == NULL || coll <= 0 || coll >= PMC_COLL_COUNT || k < 0 || k >= PMC_TRIAL_CLASSES || min_bytes == NULL || calls == NULL ||
        retrials == NULL || chosen == NULL || cells_s == NULL || single_copy_s == NULL)
        return PMC_ERR_ARG;
    const pmc_trial_class *t = &c->trials[coll][k];
    *calls = t->calls;
    *retrials = (int)t->retrials;
    *min_bytes = UINT64_C(1) << (pmc_trial_min_log2(c, coll) + k);
    *chosen = t->chosen - 1;
    *cells_s = t->best[0];
    *single_copy_s = t->best[1];
    return PMC_OK;
}

int pmc_comm_lane_traffic(const pmc_comm *c, uint64_t *messages, uint64_t *bytes)
{
    if (c == NULL || messages == NULL || bytes == NULL) return PMC_ERR_ARG;
    *messages = c->lane_msgs;
    *bytes = c->lane_bytes;
    return PMC_OK;
}

int pmc_comm_huge_pages(const pmc_comm *c, uint64_t *collapses, uint64_t *bytes, uint64_t *failures)
{
    if (c == NULL || collapses == NULL || bytes == NULL || failures == NULL) return PMC_ERR_ARG;
    *collapses = c->huge.collapses;
    *bytes = c->huge.collapsed_bytes;
    *failures = c->huge.failures;
    return PMC_OK;
}

#define PMC_STR2(x) #x
#define PMC_STR(x) PMC_STR2(x)
const char *pmc_mpi_build_vendor(void)
{
#if defined(MPICH_VERSION)
    return "MPICH " MPICH_VERSION;
#elif defined(OPEN_MPI)
    return "Open MPI " PMC_STR(OMPI_MAJOR_VERSION) "." PMC_STR(OMPI_MINOR_VERSION) "." PMC_STR(OMPI_RELEASE_VERSION);
#else
    return "MPI " PMC_STR(MPI_VERSION) "." PMC_STR(MPI_SUBVERSION);
#endif
}

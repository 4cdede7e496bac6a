/* The preload library's state: set-up on the first collective, one core
 * communicator per application communicator (an MPI attribute), release at
 * MPI_Comm_free / MPI_Comm_disconnect / MPI_Finalize, and the verbose
 * report of where calls went. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmpi.h"

pmpi_context pmpi_ctx = {.lock = PTHREAD_MUTEX_INITIALIZER, .keyval = MPI_KEYVAL_INVALID};

static const char *const route_names[PMPI_ROUTE_COUNT] = {
    "core", "intercommunicator", "op without a core kernel (user-defined, MINLOC, MAXLOC)", "datatype/op without a core kernel",
    "core unavailable on this communicator", "erroneous arguments (MPI reports them)"};

const char *pmpi_entry_name(int coll, int large)
{
    static const char *const names[PMC_COLL_COUNT][2] = {
        {"?", "?"},
        {"MPI_Barrier", "MPI_Barrier"},
        {"MPI_Bcast", "MPI_Bcast_c"},
        {"MPI_Allgather", "MPI_Allgather_c"},
        {"MPI_Allreduce", "MPI_Allreduce_c"},
        {"MPI_Reduce", "MPI_Reduce_c"},
        {"MPI_Gather", "MPI_Gather_c"},
        {"MPI_Gatherv", "MPI_Gatherv_c"},
        {"MPI_Scatter", "MPI_Scatter_c"},
        {"MPI_Scatterv", "MPI_Scatterv_c"},
        {"MPI_Allgatherv", "MPI_Allgatherv_c"},
        {"MPI_Alltoall", "MPI_Alltoall_c"},
        {"MPI_Alltoallv", "MPI_Alltoallv_c"},
        {"MPI_Reduce_scatter_block", "MPI_Reduce_scatter_block_c"},
        {"MPI_Reduce_scatter", "MPI_Reduce_scatter_c"},
        {"MPI_Scan", "MPI_Scan_c"},
        {"MPI_Exscan", "MPI_Exscan_c"},
    };
    if (coll <= 0 || coll >= PMC_COLL_COUNT) return "?";
    return names[coll][large != 0];
}

void pmpi_count(int coll, int large, int route)
{
    if (coll <= 0 || coll >= PMC_COLL_COUNT || route < 0 || route >= PMPI_ROUTE_COUNT) return;
    atomic_fetch_add_explicit(&pmpi_ctx.calls[2 * coll + (large != 0)][route], 1, memory_order_relaxed);
}

pmpi_comm *pmpi_settle(pmpi_comm *s, int route, int bad, int coll, int large)
{
    if (s != NULL && bad) {
        s = NULL;
        route = PMPI_ROUTE_ARG;
    }
    pmpi_count(coll, large, route);
    return s;
}

int pmpi_rooted_bad(const pmpi_comm *s, int root, int in_place, MPI_Count count, MPI_Datatype type, pmpi_type *t)
{
    if (root < 0 || root >= s->size || (in_place && s->rank != root)) return 1;
    return !in_place && (count < 0 || pmpi_type_of(type, t));
}

/* Frees what a state holds; the core's communicator first (its own MPI
 * communicators are freed with it). */
static void state_release(pmpi_comm *s)
{
    if (s->core != NULL) pmc_comm_free(s->core);
    s->core = NULL;
    free(s->v);
    free(s->stage[0]);
    free(s->stage[1]);
    s->v = NULL;
    s->stage[0] = s->stage[1] = NULL;
}

static void list_remove(pmpi_comm *s)
{
    if (s->prev) s->prev->next = s->next;
    else if (pmpi_ctx.states == s) pmpi_ctx.states = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
}

/* MPI deletes the attribute when the communicator goes away by a path the
 * library did not intercept (a PMPI_Comm_free from another tool, MPI's own
 * clean-up of MPI_COMM_SELF at finalize). */
static int delete_state(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void)comm;
    (void)keyval;
    (void)extra;
    pmpi_comm *s = value;
    pthread_mutex_lock(&pmpi_ctx.lock);
    list_remove(s);
    pthread_mutex_unlock(&pmpi_ctx.lock);
    state_release(s);
    free(s);
    return MPI_SUCCESS;
}

/* Reads the environment and makes the attribute key, once, after MPI_Init. */
static int setup(void)
{
    if (atomic_load_explicit(&pmpi_ctx.ready, memory_order_acquire)) return 0;
    int initialized = 0, finalized = 0;
    if (PMPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return 1;
    if (PMPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return 1;
    pthread_mutex_lock(&pmpi_ctx.lock);
    if (!atomic_load_explicit(&pmpi_ctx.ready, memory_order_relaxed)) {
        char err[512];
        if (pmpi_config_read(&pmpi_ctx, err, sizeof(err)) != 0) {
            /* Every rank reads the same settings: a bad one stops the job
             * with its name rather than running with a guess. */
            fprintf(stderr, "pymcoll preload: %s\n", err);
            fflush(stderr);
            /* The launcher stops forwarding output once the abort tears
             * the job down: give it time to pass the message on first. */
            struct timespec pause = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
            nanosleep(&pause, NULL);
            PMPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (pmc_trace_setup(&pmpi_ctx.trace) != PMC_OK) {
            fprintf(stderr, "pymcoll preload: PYMCOLL_TRACE='%s': cannot create or write that directory; "
                    "name a writable one or unset PYMCOLL_TRACE\n", pmpi_ctx.trace.dir);
            fflush(stderr);
            struct timespec pause = {.tv_sec = 0, .tv_nsec = 300 * 1000 * 1000};
            nanosleep(&pause, NULL);
            PMPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &pmpi_ctx.keyval, NULL) != MPI_SUCCESS) {
            fprintf(stderr, "pymcoll preload: MPI_Comm_create_keyval failed\n");
            PMPI_Abort(MPI_COMM_WORLD, 1);
        }
        atomic_store_explicit(&pmpi_ctx.ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&pmpi_ctx.lock);
    return 0;
}

/* A new state for comm: the core's communicator on an intracommunicator.
 * Collective over comm; every rank ends with the same route. */
static pmpi_comm *state_create(MPI_Comm comm)
{
    pmpi_comm *s = calloc(1, sizeof(*s));
    if (s == NULL) return NULL;
    s->comm = comm;
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) {
        s->route = PMPI_ROUTE_INTERCOMM;
        return s;
    }
    PMPI_Comm_rank(comm, &s->rank);
    PMPI_Comm_size(comm, &s->size);
    s->v = calloc((size_t)4 * (size_t)s->size, sizeof(uint64_t));
    int rc = s->v == NULL ? PMC_ERR_NOMEM : pmc_comm_create((uintptr_t)comm, &pmpi_ctx.cfg, &s->core);
    /* A core communicator on some ranks only would split the job's paths. */
    int ok = rc == PMC_OK, all_ok = 0;
    if (PMPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS) all_ok = 0;
    if (!all_ok) {
        if (s->rank == 0 || rc != PMC_OK)
            fprintf(stderr, "pymcoll preload: rank %d: collectives on this communicator go to MPI: %s\n", s->rank,
                    rc != PMC_OK ? pmc_strerror(rc) : "the core failed on another rank");
        state_release(s);
        s->route = PMPI_ROUTE_UNAVAILABLE;
    }
    return s;
}

pmpi_comm *pmpi_state(MPI_Comm comm, int *route)
{
    *route = PMPI_ROUTE_ARG;
    if (comm == MPI_COMM_NULL || setup() != 0) return NULL;
    void *value = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, pmpi_ctx.keyval, &value, &found) != MPI_SUCCESS) return NULL;
    pmpi_comm *s = value;
    if (!found) {
        s = state_create(comm);
        if (s == NULL) {
            fprintf(stderr, "pymcoll preload: out of memory for a communicator's state; calls go to MPI\n");
            *route = PMPI_ROUTE_UNAVAILABLE;
            return NULL;
        }
        if (PMPI_Comm_set_attr(comm, pmpi_ctx.keyval, s) != MPI_SUCCESS) {
            state_release(s);
            free(s);
            return NULL;
        }
        pthread_mutex_lock(&pmpi_ctx.lock);
        s->next = pmpi_ctx.states;
        if (s->next) s->next->prev = s;
        pmpi_ctx.states = s;
        pthread_mutex_unlock(&pmpi_ctx.lock);
    }
    if (s->core == NULL) {
        *route = s->route;
        return NULL;
    }
    *route = PMPI_ROUTE_CORE;
    return s;
}

unsigned char *pmpi_stage(pmpi_comm *s, int which, size_t bytes)
{
    if (bytes == 0) bytes = 1;
    if (s->stage_bytes[which] < bytes) {
        unsigned char *p = realloc(s->stage[which], bytes);
        if (p == NULL) return NULL;
        s->stage[which] = p;
        s->stage_bytes[which] = bytes;
    }
    return s->stage[which];
}

int pmpi_status(pmpi_comm *s, int coll, int large, int rc)
{
    if (rc == PMC_OK) return MPI_SUCCESS;
    fprintf(stderr, "pymcoll preload: rank %d: %s failed: %s (%s)\n", s->rank, pmpi_entry_name(coll, large),
            pmc_comm_errmsg(s->core), pmc_strerror(rc));
    fflush(stderr);
    PMPI_Comm_call_errhandler(s->comm, MPI_ERR_OTHER);
    return MPI_ERR_OTHER;
}

/* Frees comm's state before MPI frees comm (outside MPI's attribute
 * callbacks, which may hold MPI's locks). */
static void forget(MPI_Comm comm)
{
    if (!atomic_load_explicit(&pmpi_ctx.ready, memory_order_acquire) || comm == MPI_COMM_NULL) return;
    void *value = NULL;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, pmpi_ctx.keyval, &value, &found) != MPI_SUCCESS || !found) return;
    pmpi_comm *s = value;
    pthread_mutex_lock(&pmpi_ctx.lock);
    list_remove(s);
    pthread_mutex_unlock(&pmpi_ctx.lock);
    state_release(s);
    /* The attribute's deletion frees the (now empty) state itself. */
    PMPI_Comm_delete_attr(comm, pmpi_ctx.keyval);
}

int MPI_Comm_free(MPI_Comm *comm)
{
    if (comm != NULL && *comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF) forget(*comm);
    return PMPI_Comm_free(comm);
}

int MPI_Comm_disconnect(MPI_Comm *comm)
{
    if (comm != NULL && *comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF) forget(*comm);
    return PMPI_Comm_disconnect(comm);
}

/* Sum of every rank's counts, printed by rank 0 of MPI_COMM_WORLD. */
static void report(void)
{
    uint64_t mine[PMPI_ENTRIES][PMPI_ROUTE_COUNT], all[PMPI_ENTRIES][PMPI_ROUTE_COUNT];
    for (int e = 0; e < PMPI_ENTRIES; ++e)
        for (int r = 0; r < PMPI_ROUTE_COUNT; ++r) mine[e][r] = atomic_load(&pmpi_ctx.calls[e][r]);
    int rank = 0, size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    if (PMPI_Reduce(mine, all, PMPI_ENTRIES * PMPI_ROUTE_COUNT, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD) != MPI_SUCCESS ||
        rank != 0)
        return;
    fprintf(stderr, "pymcoll preload: calls of %d rank%s (summed), where they ran\n", size, size == 1 ? "" : "s");
    fprintf(stderr, "  %-28s %10s %10s  %s\n", "call", "core", "MPI", "why MPI");
    for (int e = 0; e < PMPI_ENTRIES; ++e) {
        uint64_t passed = 0;
        for (int r = 1; r < PMPI_ROUTE_COUNT; ++r) passed += all[e][r];
        if (all[e][PMPI_ROUTE_CORE] == 0 && passed == 0) continue;
        char why[512] = "";
        size_t n = 0;
        for (int r = 1; r < PMPI_ROUTE_COUNT && n < sizeof(why); ++r)
            if (all[e][r])
                n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s %llu", n ? ", " : "", route_names[r],
                                      (unsigned long long)all[e][r]);
        fprintf(stderr, "  %-28s %10llu %10llu  %s\n", pmpi_entry_name(e / 2, e % 2),
                (unsigned long long)all[e][PMPI_ROUTE_CORE], (unsigned long long)passed, why);
    }
    fflush(stderr);
}

int MPI_Finalize(void)
{
    if (atomic_load_explicit(&pmpi_ctx.ready, memory_order_acquire)) {
        if (pmpi_ctx.verbose) report();
        if (pmc_trace_dir()[0] != '\0' && pmc_trace_dump("finalize") != PMC_OK)
            fprintf(stderr, "pymcoll preload: could not write the trace to PYMCOLL_TRACE='%s'\n", pmc_trace_dir());
        /* Communicators the application never freed (MPI_COMM_WORLD among
         * them): release their core state while MPI still works. */
        pthread_mutex_lock(&pmpi_ctx.lock);
        pmpi_comm *s = pmpi_ctx.states;
        pmpi_ctx.states = NULL;
        pthread_mutex_unlock(&pmpi_ctx.lock);
        while (s != NULL) {
            pmpi_comm *next = s->next;
            s->prev = s->next = NULL;
            state_release(s);
            PMPI_Comm_delete_attr(s->comm, pmpi_ctx.keyval);
            s = next;
        }
        PMPI_Comm_free_keyval(&pmpi_ctx.keyval);
        atomic_store_explicit(&pmpi_ctx.ready, 0, memory_order_release);
    } else {
        /* Verbose with no collective at all still says so. */
        const char *v = getenv("PYMCOLL_PMPI_VERBOSE");
        if (v != NULL && (v[0] == '1' || v[0] == 'y' || v[0] == 'o' || v[0] == 't')) {
            int rank = 0;
            PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
            if (rank == 0) fprintf(stderr, "pymcoll preload: no collective was called\n");
        }
    }
    return PMPI_Finalize();
}

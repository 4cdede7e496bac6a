/* Trace rings: creation, the process-wide registry dumps walk, retirement. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace.h"

pmc_trace_context pmc_trace_ctx = {.ring_records = PMC_DEFAULT_TRACE_RING, .signals = 1, .world_rank = -1,
                                   .world_size = -1};

/* The CPU's counter serves when the kernel keeps time with it (so it is
 * invariant and the same on every core). */
static int counter_usable(void)
{
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
#if defined(__aarch64__)
    return 1;
#else
    char name[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f == NULL) return 0;
    const int ok = fgets(name, sizeof(name), f) != NULL && strncmp(name, "tsc", 3) == 0;
    fclose(f);
    return ok;
#endif
#else
    return 0;
#endif
}

/* A (counter, ns) pair read back to back. */
static void read_pair(uint64_t *ticks, uint64_t *ns)
{
    const uint64_t a = pmc_trace_ticks();
    *ns = pmc_trace_now();
    const uint64_t b = pmc_trace_ticks();
    *ticks = a + (b - a) / 2;
}

uint64_t pmc_trace_to_ns(uint64_t ticks, double ns_per_tick)
{
    if (!pmc_trace_ctx.use_counter || ticks == 0) return ticks;
    const double d = (double)(int64_t)(ticks - pmc_trace_ctx.counter0) * ns_per_tick;
    return (uint64_t)((int64_t)pmc_trace_ctx.ns0 + (int64_t)d);
}

double pmc_trace_ns_per_tick(void)
{
    if (!pmc_trace_ctx.use_counter) return 1.0;
    uint64_t t1, n1;
    read_pair(&t1, &n1);
    /* A short interval since the first pair would make the rate noisy:
     * stretch it to 20 ms (a dump is rare; waiting here is safe in a
     * signal handler, only clocks are read). */
    while (n1 - pmc_trace_ctx.ns0 < UINT64_C(20000000)) read_pair(&t1, &n1);
    return (double)(n1 - pmc_trace_ctx.ns0) / (double)(t1 - pmc_trace_ctx.counter0);
}

void pmc_trace_process_init(int world_rank, int world_size)
{
    if (!pmc_trace_ctx.process_ready) {
        pmc_trace_ctx.use_counter = counter_usable();
        read_pair(&pmc_trace_ctx.counter0, &pmc_trace_ctx.ns0);
        pmc_trace_ctx.cpus = pmc_online_cpus();
        pmc_trace_ctx.process_ready = 1;
    }
    pmc_trace_ctx.world_rank = world_rank;
    pmc_trace_ctx.world_size = world_size;
    pmc_trace_ctx.pid = (int)getpid();
    if (pmc_trace_ctx.host[0] == '\0' && gethostname(pmc_trace_ctx.host, sizeof(pmc_trace_ctx.host) - 1) != 0)
        strcpy(pmc_trace_ctx.host, "?");
}

uint32_t pmc_trace_next_comm_number(void) { return atomic_fetch_add(&pmc_trace_ctx.comms_created, 1u) + 1u; }

static uint32_t round_up_pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v && p < (UINT32_C(1) << 30)) p <<= 1;
    return p;
}

static void ring_free(pmc_trace_ring *r)
{
    free(r->rec);
    free(r->world_ranks);
    free(r->local_to_rank);
    free(r);
}

/* Frees a ring already taken out of the registry once no dump can still be
 * reading it (a dump marks itself before it loads the slots). */
static void ring_free_unlisted(pmc_trace_ring *r)
{
    while (atomic_load(&pmc_trace_ctx.dumping)) sched_yield();
    ring_free(r);
}

/* A free registry slot; with dump files, the oldest retired ring gives its
 * slot up when none is free. -1 when every slot holds a live communicator. */
static int take_slot(pmc_trace_ring *r)
{
    for (int i = 0; i < PMC_TRACE_MAX_RINGS; ++i) {
        pmc_trace_ring *expected = NULL;
        if (atomic_compare_exchange_strong(&pmc_trace_ctx.rings[i], &expected, r)) return i;
    }
    int oldest = -1;
    uint64_t t_oldest = UINT64_MAX;
    for (int i = 0; i < PMC_TRACE_MAX_RINGS; ++i) {
        pmc_trace_ring *q = atomic_load(&pmc_trace_ctx.rings[i]);
        if (q != NULL && atomic_load(&q->freed) && q->t_freed < t_oldest) {
            oldest = i;
            t_oldest = q->t_freed;
        }
    }
    if (oldest < 0) return -1;
    pmc_trace_ring *q = atomic_load(&pmc_trace_ctx.rings[oldest]);
    if (!atomic_compare_exchange_strong(&pmc_trace_ctx.rings[oldest], &q, r)) return take_slot(r);
    ring_free_unlisted(q);
    return oldest;
}

pmc_trace_ring *pmc_trace_ring_new(const char *id, int rank, int size, const int *world_ranks, int node,
                                   int nnodes, int local_rank, int local_size, const int *local_to_rank,
                                   const pmc_wait_info *wait, const int32_t *pids)
{
    pmc_trace_ring *r = calloc(1, sizeof(*r));
    if (r == NULL) return NULL;
    r->world_ranks = malloc(sizeof(int) * (size_t)size);
    r->local_to_rank = malloc(sizeof(int) * (size_t)local_size);
    const uint32_t records = pmc_trace_ctx.ring_records ? round_up_pow2(pmc_trace_ctx.ring_records) : 0;
    if (records > 0) r->rec = calloc(records, sizeof(pmc_trace_record));
    if (r->world_ranks == NULL || r->local_to_rank == NULL || (records > 0 && r->rec == NULL)) {
        ring_free(r);
        return NULL;
    }
    r->mask = records > 0 ? records - 1u : 0;
    strncpy(r->id, id, sizeof(r->id) - 1);
    r->rank = rank;
    r->size = size;
    r->node = node;
    r->nnodes = nnodes;
    r->local_rank = local_rank;
    r->local_size = local_size;
    memcpy(r->world_ranks, world_ranks, sizeof(int) * (size_t)size);
    memcpy(r->local_to_rank, local_to_rank, sizeof(int) * (size_t)local_size);
    r->wait = wait;
    r->pids = pids;
    /* Without a slot the ring still records (the cost stays the same);
     * only dumps miss it. */
    if (records > 0) (void)take_slot(r);
    return r;
}

void pmc_trace_ring_retire(pmc_trace_ring *r)
{
    if (r == NULL) return;
    /* What the ring pointed into (wait state, segment pids) goes with the
     * communicator. */
    r->wait = NULL;
    r->pids = NULL;
    while (atomic_load(&pmc_trace_ctx.dumping)) sched_yield();
    r->t_freed = pmc_trace_now();
    atomic_store(&r->freed, 1);
    int listed = -1;
    for (int i = 0; i < PMC_TRACE_MAX_RINGS && listed < 0; ++i)
        if (atomic_load(&pmc_trace_ctx.rings[i]) == r) listed = i;
    if (listed >= 0 && pmc_trace_ctx.dir[0] != '\0') return; /* kept for the finalize dump */
    if (listed >= 0) atomic_store(&pmc_trace_ctx.rings[listed], NULL);
    ring_free_unlisted(r);
}

double pmc_trace_cost_ns(uint64_t iterations)
{
    if (iterations == 0) return 0.0;
    pmc_trace_ring r;
    memset(&r, 0, sizeof(r));
    r.rec = calloc(PMC_DEFAULT_TRACE_RING, sizeof(pmc_trace_record));
    if (r.rec == NULL) return -1.0;
    r.mask = PMC_DEFAULT_TRACE_RING - 1;
    const pmc_args a = {.coll = PMC_COLL_ALLREDUCE, .count = 1, .dtype = PMC_DT_FLOAT64, .op = PMC_OP_SUM};
    const uint64_t t0 = pmc_trace_now();
    for (uint64_t i = 1; i <= iterations; ++i) {
        pmc_trace_record *t = pmc_trace_enter(&r, i, &a, 8, 1, 0, PMC_TRACE_BLOCKING, PMC_TRACE_ALGO_NODE,
                                              pmc_trace_ticks());
        pmc_trace_end(t, i, PMC_OK);
    }
    const uint64_t t1 = pmc_trace_now();
    /* Read the ring back so that no store can be dropped as dead. */
    volatile uint64_t sink = 0;
    for (uint64_t s = 0; s <= r.mask; ++s) sink += r.rec[s].t_end;
    (void)sink;
    free(r.rec);
    return (double)(t1 - t0) / (double)iterations;
}

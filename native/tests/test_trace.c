/* The trace ring and its dumps, without MPI: records written and wrapped,
 * dumps to files (explicit, on SIGUSR1, with the wait published), retired
 * rings kept for the final dump, the record cost. */
#include <signal.h>

#include "testutil.h"
#include "trace/trace.h"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)) != NULL; p += strlen(what)) ++n;
    return n;
}

int main(void)
{
    char dir[256];
    CHECK(t_make_dir(dir, sizeof(dir)) == 0, "scratch dir");
    pmc_trace_config cfg = {.dir = dir, .ring_records = 6 /* rounded up to 8 */, .signals = 1};
    CHECK_RC(pmc_trace_setup(&cfg), PMC_OK, "setup");
    pmc_trace_process_init(5, 8);
    pmc_trace_install_handlers();

    const int world[2] = {5, 6}, local[2] = {0, 1};
    const int32_t pids[2] = {(int32_t)getpid(), 1};
    pmc_flag flags[2];
    memset(flags, 0, sizeof(flags));
    pmc_wait_info wait;
    memset(&wait, 0, sizeof(wait));
    pmc_trace_ring *r = pmc_trace_ring_new("5.1", 0, 2, world, 0, 1, 0, 2, local, &wait, pids);
    CHECK(r != NULL && r->mask == 7, "ring of 8");

    /* 11 calls through a ring of 8: the dump keeps #4..#11. */
    pmc_args a = {.coll = PMC_COLL_BCAST, .count = 100, .root = 1};
    for (uint64_t s = 1; s <= 11; ++s) {
        pmc_trace_record *t = pmc_trace_enter(r, s, &a, 100, 0, 1, PMC_TRACE_BLOCKING, PMC_TRACE_ALGO_NODE,
                                              pmc_trace_ticks());
        if (s < 11) pmc_trace_end(t, s, s == 10 ? PMC_ERR_TIMEOUT : PMC_OK);
    }
    /* Rank 1 has not posted step 3: the dump names it. */
    wait.kind = PMC_FLAG_SEQ;
    wait.npeers = 1;
    wait.peers[0] = 1;
    wait.flags = flags;
    wait.stride = 1;
    wait.target = 3;
    wait.coll = "Bcast";
    wait.seq = 11;
    wait.since_ns = pmc_trace_now();
    atomic_store(&wait.what, PMC_WAIT_FLAG);

    CHECK_RC(pmc_trace_dump("request"), PMC_OK, "explicit dump");
    char path[512];
    snprintf(path, sizeof(path), "%s/rank5.json", dir);
    char *text = slurp(path);
    CHECK(text != NULL, "no %s", path);
    if (text != NULL) {
        CHECK(strstr(text, "\"format\": \"pymcoll-trace\"") && strstr(text, "\"reason\": \"request\""), "header");
        CHECK(count_of(text, "\"coll\": \"Bcast\"") == 8 + 1, "8 records and the wait: %d",
              count_of(text, "\"coll\": \"Bcast\""));
        CHECK(strstr(text, "\"seq\": 4,") && !strstr(text, "\"seq\": 3,"), "oldest kept is #4");
        CHECK(strstr(text, "\"status\": \"timeout\"") && strstr(text, "\"status\": \"running\""), "statuses");
        CHECK(strstr(text, "\"waiting_for\": [1], \"pids\": [1]"), "wait names rank 1");
        CHECK(strstr(text, "\"root\": 1") && strstr(text, "\"world_ranks\": [5, 6]"), "root, world ranks");
    }

    /* SIGUSR1 writes the event dump from the handler. */
    raise(SIGUSR1);
    snprintf(path, sizeof(path), "%s/rank5.sigusr1.json", dir);
    text = slurp(path);
    CHECK(text != NULL && strstr(text, "\"reason\": \"SIGUSR1\""), "SIGUSR1 dump");

    /* A freed communicator's ring stays in the dumps while there is a directory. */
    pmc_trace_ring_retire(r);
    CHECK_RC(pmc_trace_dump("finalize"), PMC_OK, "final dump");
    snprintf(path, sizeof(path), "%s/rank5.json", dir);
    text = slurp(path);
    CHECK(text != NULL && strstr(text, "\"freed\": true") && strstr(text, "\"wait\": null"), "retired ring");

    /* Without a directory the ring is released at once. */
    pmc_trace_config none = {.dir = "", .ring_records = 8, .signals = 0};
    CHECK_RC(pmc_trace_setup(&none), PMC_OK, "setup without dir");
    CHECK_RC(pmc_trace_dump("request"), PMC_ERR_ARG, "dump without dir");
    pmc_trace_ring *q = pmc_trace_ring_new("5.2", 0, 1, world, 0, 1, 0, 1, local, NULL, NULL);
    CHECK(q != NULL, "second ring");
    pmc_trace_ring_retire(q);
    pmc_trace_config bad = {.dir = "/dev/null/x", .ring_records = 8};
    CHECK_RC(pmc_trace_setup(&bad), PMC_ERR_SYS, "unwritable dir");

    const double cost = pmc_trace_cost_ns(100000);
    printf("record cost %.1f ns\n", cost);
    CHECK(cost > 0 && cost < 5000, "cost %.1f", cost);
    /* The first ring stays registered (retired, kept): release everything
     * for the leak check. */
    for (int i = 0; i < PMC_TRACE_MAX_RINGS; ++i) {
        pmc_trace_ring *left = atomic_exchange(&pmc_trace_ctx.rings[i], NULL);
        if (left != NULL) {
            free(left->rec);
            free(left->world_ranks);
            free(left->local_to_rank);
            free(left);
        }
    }
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    if (t_failures == 0) printf("test_trace: ok\n");
    return t_failures ? 1 : 0;
}

/* Per-launch choice between the cells (copy-in/copy-out) and single copy.
 *
 * The crossover table (choose.c) was measured on one host; where the cache
 * is smaller or memory slower, the cells lose 16x earlier than it says, and
 * no cheap probe at creation tells such hosts apart (perf/studies/
 * copy_paths.md). So the real calls decide: the first PMC_TRIAL_CALLS
 * blocking calls of a collective in each size class on one node take the
 * table's path, then the other, half of them each (in runs: a switch of
 * path makes the cells wait for everything before to be read, which
 * alternating calls would charge to every cells trial). Each rank notes
 * when it ended each trial; after the last one the ranks exchange these
 * (one Iallreduce of maxima), and a path's time is its shortest period
 * between consecutive ends of the collective within its run: what a loop
 * of these calls costs per call on this host, with the overlap the cells
 * allow (a root runs ahead of its readers) and the caller's own work
 * between calls counted alike for both paths. The first call of a run,
 * which pays the switch, starts no period. The faster path wins, and every
 * later call of the class takes it. All inputs are the same on every rank
 * (call order, sizes MPI makes them agree on; one node shares one clock),
 * so the ranks try and choose alike. A persistent request's Starts count as
 * such calls (each ends when the request completes, in the caller's Test or
 * Wait or another call of this communicator); a non-blocking request is
 * not timed and takes the agreed path once there is one.
 *
 * A host's speeds change during a launch (where the scheduler puts the two
 * cores decides whether they share a cache, and the cells' speed with it:
 * perf/studies/large_and_back_to_back.md), so the agreed path is watched:
 * the last PMC_WATCH_CALLS calls before each check are timed the same way,
 * and when the agreed path now takes longer than the other path took in its
 * trials (by the margin), the class is tried again. Checks come after 64
 * calls, then twice as many each time, up to PMC_WATCH_MAX. */
#include "../comm.h"

/* The table's path stays unless the other is this much faster: noise
 * between two close paths must not flip a choice the table got right. */
#define PMC_TRIAL_MARGIN 0.95
/* Below 256 KiB a period is a few microseconds and two close paths trade
 * places from run to run: there the other path must be 20% faster. */
#define PMC_TRIAL_MARGIN_SMALL 0.8
#define PMC_TRIAL_SMALL_LOG2 18
/* Timed calls before a check of the agreed path (the first starts no period). */
#define PMC_WATCH_CALLS 4
#define PMC_WATCH_FIRST 64u
#define PMC_WATCH_MAX 4096u

int pmc_trial_min_log2(const pmc_comm *c, int coll)
{
    /* A Bcast's cell is written once for every reader: where ranks share cores its cells held
     * below 256 KiB on every host measured. */
    return c->node_ctx.yield_now && coll == PMC_COLL_BCAST ? PMC_TRIAL_MIN_LOG2_BCAST_SHARED : PMC_TRIAL_MIN_LOG2;
}

/* The margin a challenger must beat in size class k of coll. */
static double margin_of(const pmc_comm *c, int coll, int k)
{
    return pmc_trial_min_log2(c, coll) + k < PMC_TRIAL_SMALL_LOG2 ? PMC_TRIAL_MARGIN_SMALL : PMC_TRIAL_MARGIN;
}

/* Size class of a payload: its power of two, from the trials' smallest; -1 below. */
static int class_of(const pmc_comm *c, int coll, uint64_t payload)
{
    const int least = pmc_trial_min_log2(c, coll);
    if (payload < (UINT64_C(1) << least)) return -1;
    const int k = 63 - __builtin_clzll(payload) - least;
    return k < PMC_TRIAL_CLASSES ? k : PMC_TRIAL_CLASSES - 1;
}

int pmc_trial_path(const pmc_comm *c, int coll, uint64_t payload, int table)
{
    pmc_op *op = c->op_cur;
    if (!c->path_trials || c->nnodes != 1 || op == NULL || coll != op->a.coll || coll <= 0 || coll >= PMC_COLL_COUNT)
        return table;
    const int k = class_of(c, coll, payload);
    if (k < 0) return table;
    const pmc_trial_class *t = &c->trials[coll][k];
    /* A collective asks again on resuming or for a second phase: the same answer. */
    if (op->trial_path >= 0 && op->trial_class == k) return op->trial_path;
    if (t->chosen) {
        /* A call that could be a trial is counted on the agreed path (and maybe watched) when it ends. */
        if (op->trial_ok && op->trial_path < 0) {
            op->trial_path = t->chosen - 1;
            op->trial_class = k;
        }
        return t->chosen - 1;
    }
    /* No trial: a request that is not persistent, a call already trying another class, or
     * every trial ran without an agreement (it failed, and with it the communicator). */
    if (!op->trial_ok || op->trial_path >= 0 || t->calls >= PMC_TRIAL_CALLS) return table;
    const int first = t->calls == 0 ? table : t->first;
    const int other = first == PMC_PATH_CMA ? PMC_PATH_CICO : PMC_PATH_CMA;
    op->trial_path = t->calls < PMC_TRIAL_CALLS / 2 ? first : other;
    op->trial_class = k;
    return op->trial_path;
}

/* The collective whose trials time blocks of the same kind as a v form's:
 * a Scatterv's blocks move as a Scatter's do, and so on. */
static int fixed_form_of(int coll)
{
    switch (coll) {
    case PMC_COLL_SCATTERV: return PMC_COLL_SCATTER;
    case PMC_COLL_GATHERV: return PMC_COLL_GATHER;
    case PMC_COLL_ALLGATHERV: return PMC_COLL_ALLGATHER;
    case PMC_COLL_ALLTOALLV: return PMC_COLL_ALLTOALL;
    default: return coll;
    }
}

int pmc_trial_verdict(const pmc_comm *c, int coll, uint64_t bytes)
{
    if (!c->path_trials || c->nnodes != 1 || coll <= 0 || coll >= PMC_COLL_COUNT) return -1;
    const int k = class_of(c, coll, bytes);
    if (k < 0) return -1;
    if (c->trials[coll][k].chosen) return c->trials[coll][k].chosen - 1;
    const int fixed = fixed_form_of(coll);
    return c->trials[fixed][k].chosen ? c->trials[fixed][k].chosen - 1 : -1;
}

/* Starts the exchange of this rank's `n` ends for their maxima over the ranks. */
static int agree_on_ends(pmc_op *op, const double *ends, int n)
{
    for (int j = 0; j < n; ++j) op->trial_x[j] = ends[j];
    const int mrc = MPI_Iallreduce(MPI_IN_PLACE, op->trial_x, n, MPI_DOUBLE, MPI_MAX, op->c->comm, &op->mreq);
    return mrc == MPI_SUCCESS ? PMC_OK : pmc_mpi_fail(op->c, mrc, "MPI_Iallreduce (path trial)");
}

/* The shortest period between the agreed ends j-1 and j, for j in (from, to). */
static double shortest_period(const double *x, int from, int to)
{
    double best = 0.0;
    for (int j = from + 1; j < to; ++j) {
        double took = x[j] - x[j - 1];
        if (took <= 0) took = 1e-9;
        if (best == 0.0 || took < best) best = took;
    }
    return best;
}

int pmc_trial_finish(pmc_op *op)
{
    pmc_comm *c = op->c;
    /* The algorithm has finished, so its frames are free. */
    pmc_frame *f = &op->f[1];
    pmc_trial_class *t = &c->trials[op->a.coll][op->trial_class];
    PMC_CO_BEGIN(f);
    f->aux = t->chosen != 0; /* a call on the agreed path, not a trial */
    if (f->aux) {
        const uint32_t i = t->since++;
        if (i + PMC_WATCH_CALLS < t->every) {
            f->pc = 0;
            return PMC_OK;
        }
        t->end[i + PMC_WATCH_CALLS - t->every] = (double)pmc_trace_now() * 1e-9;
        if (i + 1 < t->every) {
            f->pc = 0;
            return PMC_OK;
        }
        const int rc = agree_on_ends(op, t->end, PMC_WATCH_CALLS);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    } else {
        const int i = t->calls;
        if (i == 0) t->first = (int8_t)op->trial_path;
        t->end[i] = (double)pmc_trace_now() * 1e-9;
        if (++t->calls < PMC_TRIAL_CALLS) {
            f->pc = 0;
            return PMC_OK;
        }
        const int rc = agree_on_ends(op, t->end, PMC_TRIAL_CALLS);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallreduce (path trial)"));
    if (f->aux) {
        const double now = shortest_period(op->trial_x, 0, PMC_WATCH_CALLS);
        const double other = t->best[t->chosen - 1 == PMC_PATH_CMA ? 0 : 1];
        t->since = 0;
        if (t->every < PMC_WATCH_MAX) t->every *= 2;
        if (other > 0.0 && now * margin_of(c, op->a.coll, op->trial_class) > other) {
            t->calls = 0;
            t->chosen = 0;
            ++t->retrials;
        }
    } else {
        /* The first half of the trials took the first path; periods within each run
         * (the other run's first call starts no period). */
        const int half = PMC_TRIAL_CALLS / 2, first_slot = t->first == PMC_PATH_CMA;
        t->best[first_slot] = shortest_period(op->trial_x, 0, half);
        t->best[!first_slot] = shortest_period(op->trial_x, half, PMC_TRIAL_CALLS);
        const double *best = t->best, m = margin_of(c, op->a.coll, op->trial_class);
        t->chosen = (int8_t)(1 + (best[1] < m * best[0] ? PMC_PATH_CMA : best[0] < m * best[1] ? PMC_PATH_CICO : t->first));
        t->since = 0;
        if (t->every == 0) t->every = PMC_WATCH_FIRST;
    }
    PMC_CO_END(f);
}

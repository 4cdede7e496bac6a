/* Per-launch choice between the cells (copy-in/copy-out) and single copy.
 *
 * The crossover table (choose.c) was measured on one host; where the cache
 * is smaller or memory slower, the cells lose 16x earlier than it says, and
 * no cheap probe at creation tells such hosts apart (perf/studies/
 * copy_paths.md). So the real calls decide: the first PMC_TRIAL_CALLS
 * blocking calls of a collective in each size class on one node take the
 * two paths in turn, starting with the table's. Each rank notes when it
 * began and ended each trial; after the last one the ranks exchange these
 * (one Iallreduce of maxima) and time each trial from the last rank's
 * arrival to the last rank's end: the collective's own critical path,
 * without the skew the caller brought in (a rank's own duration would
 * charge a late peer to whichever path makes early ranks wait). The
 * faster path's best trial wins, and every later call of the class takes
 * it. All inputs are the same on every rank (call order, sizes MPI makes
 * them agree on; one node shares one clock), so the ranks try and choose
 * alike. Requests (non-blocking, persistent) are not timed: their time
 * includes the caller's work; they take the agreed path once there is one. */
#include <time.h>

#include "../comm.h"

/* The table's path stays unless the other is this much faster: noise
 * between two close paths must not flip a choice the table got right. */
#define PMC_TRIAL_MARGIN 0.95

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Size class of a payload: its power of two, from 16 KiB; -1 below. */
static int class_of(uint64_t payload)
{
    if (payload < (UINT64_C(1) << PMC_TRIAL_MIN_LOG2)) return -1;
    const int k = 63 - __builtin_clzll(payload) - PMC_TRIAL_MIN_LOG2;
    return k < PMC_TRIAL_CLASSES ? k : PMC_TRIAL_CLASSES - 1;
}

int pmc_trial_path(const pmc_comm *c, int coll, uint64_t payload, int table)
{
    pmc_op *op = c->op_cur;
    if (!c->path_trials || c->nnodes != 1 || op == NULL || coll != op->a.coll || coll <= 0 || coll >= PMC_COLL_COUNT)
        return table;
    const int k = class_of(payload);
    if (k < 0) return table;
    const pmc_trial_class *t = &c->trials[coll][k];
    if (t->chosen) return t->chosen - 1;
    if (!op->trial_ok) return table;
    /* A collective asks again on resuming or for a second phase: the same answer. */
    if (op->trial_path >= 0) return op->trial_class == k ? op->trial_path : table;
    const int first = t->calls == 0 ? table : t->first;
    const int other = first == PMC_PATH_CMA ? PMC_PATH_CICO : PMC_PATH_CMA;
    op->trial_path = t->calls % 2 == 0 ? first : other;
    op->trial_class = k;
    /* The class's record is written only between calls (pmc_trial_finish);
     * the arrival waits in the op until then. */
    op->trial_x[0] = now_s();
    return op->trial_path;
}

int pmc_trial_finish(pmc_op *op)
{
    pmc_comm *c = op->c;
    /* The algorithm has finished, so its frames are free. */
    pmc_frame *f = &op->f[1];
    pmc_trial_class *t = &c->trials[op->a.coll][op->trial_class];
    PMC_CO_BEGIN(f);
    {
        const int i = t->calls;
        if (i == 0) t->first = (int8_t)op->trial_path;
        t->arrive[i] = op->trial_x[0];
        t->end[i] = now_s();
        if (++t->calls < PMC_TRIAL_CALLS) {
            f->pc = 0;
            return PMC_OK;
        }
        for (int j = 0; j < PMC_TRIAL_CALLS; ++j) {
            op->trial_x[j] = t->arrive[j];
            op->trial_x[PMC_TRIAL_CALLS + j] = t->end[j];
        }
        const int mrc = MPI_Iallreduce(MPI_IN_PLACE, op->trial_x, 2 * PMC_TRIAL_CALLS, MPI_DOUBLE, MPI_MAX, c->comm,
                                       &op->mreq);
        if (mrc != MPI_SUCCESS) {
            f->pc = 0;
            return pmc_mpi_fail(c, mrc, "MPI_Iallreduce (path trial)");
        }
    }
    PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallreduce (path trial)"));
    {
        /* Trial j took the first path when j is even. */
        double best[2] = {0.0, 0.0};
        for (int j = 0; j < PMC_TRIAL_CALLS; ++j) {
            const int path = j % 2 == 0 ? t->first : (t->first == PMC_PATH_CMA ? PMC_PATH_CICO : PMC_PATH_CMA);
            const int slot = path == PMC_PATH_CMA;
            double took = op->trial_x[PMC_TRIAL_CALLS + j] - op->trial_x[j];
            if (took < 0) took = 0;
            if (best[slot] == 0.0 || took < best[slot]) best[slot] = took;
        }
        t->best[0] = best[0];
        t->best[1] = best[1];
        t->chosen = (int8_t)(1 + (best[1] < PMC_TRIAL_MARGIN * best[0] ? PMC_PATH_CMA
                                  : best[0] < PMC_TRIAL_MARGIN * best[1] ? PMC_PATH_CICO : t->first));
    }
    PMC_CO_END(f);
}

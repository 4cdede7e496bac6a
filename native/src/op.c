/* The single entry path of every collective: argument check, call number,
 * optional agreement, algorithm, completion; and the request machinery on
 * top of it (queue, Start/Test/Wait/Free, progress thread). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "coll/lanes.h"

const char *pmc_coll_name(int coll)
{
    const pmc_coll_entry *e = pmc_coll_table(coll);
    return e ? e->name : "?";
}

int pmc_op_wait(pmc_op *op, int kind, const int *peers, int npeers, uint64_t target)
{
    pmc_node *n = &op->c->node_ctx;
    if (op->blocking) return pmc_node_wait(n, kind, peers, npeers, target);
    int rc = pmc_node_poll(n, kind, peers, npeers, target, &op->wait_start, &op->polls);
    if (rc == PMC_OK) ++op->c->polls_passed;
    return rc;
}

int pmc_op_wait_acked(pmc_op *op, const int *peers, int npeers, uint64_t target)
{
    pmc_node *n = &op->c->node_ctx;
    if (pmc_node_known_acked(n, target)) return PMC_OK;
    const int rc = pmc_op_wait(op, PMC_FLAG_ACK, peers, npeers, target);
    if (rc == PMC_OK && npeers == n->local_size - 1) pmc_node_read_acked(n);
    return rc;
}

/* Polls before a blocking MPI completion starts yielding the CPU (at once
 * when the host is oversubscribed). It never sleeps: MPI moves large
 * messages only while it is called. */
#define MPI_SPIN_POLLS 4000

static int mpi_timed_out(pmc_op *op, double start, const char *call)
{
    pmc_comm *c = op->c;
    const double limit = c->node_ctx.timeout;
    if (limit <= 0 || MPI_Wtime() - start < limit) return PMC_OK;
    return pmc_fail(c, PMC_ERR_TIMEOUT,
                    "%s #%llu timed out after %.3g s on rank %d in %s: a rank on another node did not "
                    "send or receive its part; raise PYMCOLL_TIMEOUT or timeout= if the job is just slow",
                    c->node_ctx.coll, (unsigned long long)op->seq, limit, c->rank, call);
}

/* Publishes an MPI wait for trace dumps (see pmc_wait_info). */
static void mpi_wait_publish(pmc_comm *c, const char *call)
{
    pmc_wait_info *w = &c->node_ctx.wait;
    atomic_store_explicit(&w->what, PMC_WAIT_NONE, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    w->call = call;
    w->coll = c->node_ctx.coll;
    w->seq = c->node_ctx.coll_seq;
    w->since_ns = pmc_trace_now();
    atomic_store_explicit(&w->what, PMC_WAIT_MPI, memory_order_release);
}

int pmc_op_mpi_all(pmc_op *op, int count, MPI_Request *reqs, const char *call)
{
    pmc_comm *c = op->c;
    int flag = 0;
    int mrc = MPI_Testall(count, reqs, &flag, MPI_STATUSES_IGNORE);
    if (mrc == MPI_SUCCESS && !flag && op->blocking) {
        /* The same deadline as a flag wait; MPI's own Waitall has none. */
        const double start = MPI_Wtime();
        mpi_wait_publish(c, call);
        for (long polls = 1; mrc == MPI_SUCCESS && !flag; ++polls) {
            if (c->node_ctx.wait_sleep) {
                const struct timespec ts = {0, 20000L}; /* leave the CPU to the threads sharing it */
                nanosleep(&ts, NULL);
            } else if (c->node_ctx.yield_now || polls > MPI_SPIN_POLLS) {
                sched_yield();
            }
            if ((polls & 255) == 0) {
                int rc = mpi_timed_out(op, start, call);
                if (rc != PMC_OK) return rc;
            }
            mrc = MPI_Testall(count, reqs, &flag, MPI_STATUSES_IGNORE);
        }
    }
    if (mrc != MPI_SUCCESS) return pmc_mpi_fail(c, mrc, call);
    if (!flag) {
        /* Polled (Test, the progress thread): the deadline counts from the first miss. */
        if (op->wait_start == 0.0) {
            op->wait_start = MPI_Wtime();
            mpi_wait_publish(c, call);
        }
        if (c->node_ctx.yield_now) sched_yield();
        if ((++op->polls & 255u) == 0) {
            int rc = mpi_timed_out(op, op->wait_start, call);
            if (rc != PMC_OK) return rc;
        }
        return PMC_PENDING;
    }
    op->wait_start = 0.0;
    op->polls = 0;
    ++c->polls_passed;
    atomic_store_explicit(&c->node_ctx.wait.what, PMC_WAIT_NONE, memory_order_release);
    return PMC_OK;
}

int pmc_op_mpi(pmc_op *op, const char *call)
{
    if (op->mreq == MPI_REQUEST_NULL) return PMC_OK;
    return pmc_op_mpi_all(op, 1, &op->mreq, call);
}

/* Frame 0: agreement (PYMCOLL_CHECK), then the collective's algorithm. */
static int op_body(pmc_op *op)
{
    pmc_frame *f = &op->f[0];
    pmc_comm *c = op->c;
    PMC_CO_BEGIN(f);
    if (c->check && c->size > 1) {
        int rc = pmc_agree_start(op);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
        PMC_AWAIT(f, pmc_op_mpi(op, "MPI_Iallreduce (PYMCOLL_CHECK)"));
        rc = pmc_agree_judge(op);
        if (rc != PMC_OK) {
            f->pc = 0;
            return rc;
        }
    }
    PMC_AWAIT(f, pmc_coll_table(op->a.coll)->run(op));
    if (op->trial_path >= 0) PMC_AWAIT(f, pmc_trial_finish(op));
    PMC_CO_END(f);
}

static int op_step(pmc_op *op)
{
    pmc_comm *c = op->c;
    c->node_ctx.coll = pmc_coll_name(op->a.coll);
    c->node_ctx.coll_seq = op->seq;
    c->trace_cur = op->trace != NULL && op->trace->seq == op->seq ? op->trace : NULL;
    c->op_cur = op;
    const int rc = op_body(op);
    c->op_cur = NULL;
    c->trace_cur = NULL;
    if (rc != PMC_OK && rc != PMC_PENDING) {
        /* A failed op never resumes: what it left with MPI is settled now,
         * so the caller's buffers see no late writes. A non-blocking MPI
         * collective can be neither cancelled nor freed; it stays running. */
        if (c->nlreq > 0) pmc_lanes_abandon(c);
        /* Nor late copies by local peers: they stop, or finish before this returns. */
        if (rc != PMC_ERR_ARG) pmc_node_settle(&c->node_ctx);
        if (op->mreq != MPI_REQUEST_NULL) {
            ++c->left_in_flight;
            op->mreq = MPI_REQUEST_NULL;
        }
    }
    return rc;
}

static void op_reset(pmc_op *op)
{
    memset(op->f, 0, sizeof(op->f));
    op->mreq = MPI_REQUEST_NULL;
    op->wait_start = 0.0;
    op->polls = 0;
    op->trial_path = -1;
}

static void request_release(pmc_op *op)
{
    if (op->c != NULL) {
        if (op->reg_prev) op->reg_prev->reg_next = op->reg_next;
        else op->c->requests = op->reg_next;
        if (op->reg_next) op->reg_next->reg_prev = op->reg_prev;
    }
    free(op->arrays);
    free(op->agree_v);
    free(op->errmsg);
    free(op);
}

/* Records the outcome of a finished run of a queued op and unlinks it. */
static void op_complete(pmc_comm *c, pmc_op *op, int rc)
{
    c->queue_head = op->next;
    if (c->queue_head == NULL) c->queue_tail = NULL;
    op->next = NULL;
    op->active = 0;
    op->status = pmc_coll_leave(c, op, rc);
    if (rc != PMC_OK) {
        free(op->errmsg);
        op->errmsg = strdup(c->errmsg);
    }
    if (op->orphan) request_release(op);
}

/* Moves the queue. blocking: run until `until` completed (or the queue is
 * empty when until is NULL); otherwise stop at the first op that waits. */
static int progress_locked(pmc_comm *c, int blocking, const pmc_op *until)
{
    while (c->queue_head != NULL) {
        pmc_op *op = c->queue_head;
        op->blocking = blocking;
        if (op->trace != NULL && op->trace->t_start == 0 && op->trace->seq == op->seq)
            op->trace->t_start = pmc_trace_ticks();
        int rc = op_step(op);
        if (rc == PMC_PENDING) return PMC_PENDING;
        op_complete(c, op, rc);
        if (op == until) break; /* (op may be freed now: only its address is compared) */
    }
    return PMC_OK;
}

/* Common entry and exit of every collective start (blocking or a request's
 * Start). The record starts without an algorithm: the collective's entry
 * names the one it takes (pmc_took) once it has chosen. */
int pmc_coll_enter(pmc_comm *c, pmc_op *op, int mode)
{
    const pmc_args *a = &op->a;
    const uint64_t seq = ++c->coll_seq;
    const char *name = pmc_coll_name(a->coll);
    const int reduction = pmc_coll_is_reduction(a->coll);
    op->seq = seq;
    op->trace = NULL;
    if (c->trace != NULL && c->trace->rec != NULL)
        op->trace = pmc_trace_enter(c->trace, seq, a,
                                    reduction ? a->count * (uint64_t)pmc_dtype_size(a->dtype) : a->count,
                                    reduction, pmc_coll_is_rooted(a->coll), mode, PMC_TRACE_ALGO_NONE,
                                    pmc_trace_ticks());
    c->node_ctx.coll = name;
    c->node_ctx.coll_seq = seq;
    if (c->broken)
        return pmc_fail(c, PMC_ERR_BROKEN,
                        "%s #%llu refused: this communicator is broken by an earlier "
                        "timeout or peer failure; call Free() and create a new one",
                        name, (unsigned long long)seq);
    c->errmsg[0] = '\0';
    return PMC_OK;
}

int pmc_coll_leave(pmc_comm *c, pmc_op *op, int status)
{
    pmc_trace_end(op->trace, op->seq, status);
    if (status != PMC_OK) {
        /* The dump sees the wait that failed; afterwards nothing waits. */
        if (status == PMC_ERR_TIMEOUT) (void)pmc_trace_dump_now("timeout", 0);
        atomic_store_explicit(&c->node_ctx.wait.what, PMC_WAIT_NONE, memory_order_release);
    }
    /* Argument errors are found before any rank moves data; everything else
     * may leave peers mid-protocol, so the communicator is not reused. */
    if (status != PMC_OK && status != PMC_ERR_ARG) c->broken = 1;
    return status;
}

static int check_args(pmc_comm *c, pmc_args *a)
{
    const pmc_coll_entry *e = pmc_coll_table(a->coll);
    if (e == NULL) return pmc_fail(c, PMC_ERR_ARG, "unknown collective code %d", a->coll);
    return e->check(c, a);
}

int pmc_run(pmc_comm *c, const pmc_args *args)
{
    if (c == NULL || args == NULL) return PMC_ERR_ARG;
    pmc_op op;
    op.a = *args;
    op.agree_v = NULL;
    pthread_mutex_lock(&c->lock);
    int rc = pmc_coll_enter(c, &op, PMC_TRACE_BLOCKING);
    if (rc == PMC_OK) rc = check_args(c, &op.a);
    if (rc != PMC_OK) {
        rc = pmc_coll_leave(c, &op, rc);
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    /* Earlier non-blocking calls come first, as on every other rank. */
    if (c->queue_head != NULL) {
        progress_locked(c, 1, NULL);
        if (op.trace != NULL && op.trace->seq == op.seq) op.trace->t_start = pmc_trace_ticks();
    }
    op.c = c;
    op.blocking = 1;
    op_reset(&op);
    op.trial_ok = 1;
    rc = pmc_coll_leave(c, &op, op_step(&op));
    free(op.agree_v); /* left by an agreement that failed in MPI */
    pthread_mutex_unlock(&c->lock);
    return rc;
}

uint64_t pmc_external_begin(pmc_comm *c, const pmc_args *a, int mode)
{
    if (c == NULL || a == NULL) return 0;
    pthread_mutex_lock(&c->lock);
    const uint64_t seq = ++c->coll_seq;
    if (c->trace != NULL && c->trace->rec != NULL) {
        /* No element type or byte count: the core never parsed the buffers. */
        pmc_trace_record *t = pmc_trace_enter(c->trace, seq, a, 0, 0, pmc_coll_is_rooted(a->coll), mode,
                                              PMC_TRACE_ALGO_MPI, pmc_trace_ticks());
        t->t_start = t->t_enqueue;
    }
    pthread_mutex_unlock(&c->lock);
    return seq;
}

void pmc_external_end(pmc_comm *c, uint64_t seq, int status)
{
    if (c == NULL || seq == 0) return;
    pthread_mutex_lock(&c->lock);
    if (c->trace != NULL && c->trace->rec != NULL) pmc_trace_end(&c->trace->rec[seq & c->trace->mask], seq, status);
    pthread_mutex_unlock(&c->lock);
}

static void *progress_main(void *arg);

int pmc_request_create(pmc_comm *c, const pmc_args *args, int persistent, pmc_request **out)
{
    if (out == NULL) return PMC_ERR_ARG;
    *out = NULL;
    if (c == NULL || args == NULL) return PMC_ERR_ARG;
    pmc_args a = *args;
    pthread_mutex_lock(&c->lock);
    int rc = check_args(c, &a);
    pthread_mutex_unlock(&c->lock);
    if (rc != PMC_OK) return rc;
    pmc_op *op = calloc(1, sizeof(*op));
    if (op == NULL) return pmc_fail(c, PMC_ERR_NOMEM, "out of memory for a request");
    /* The v arrays are copied: MPI lets the caller reuse them after the call. */
    const uint64_t *src[4] = {a.sendcounts, a.sdispls, a.recvcounts, a.rdispls};
    int narrays = 0;
    for (int i = 0; i < 4; ++i) narrays += src[i] != NULL;
    if (narrays > 0) {
        op->arrays = malloc(sizeof(uint64_t) * (size_t)c->size * (size_t)narrays);
        if (op->arrays == NULL) {
            free(op);
            return pmc_fail(c, PMC_ERR_NOMEM, "out of memory for a request");
        }
        const uint64_t **dst[4] = {&a.sendcounts, &a.sdispls, &a.recvcounts, &a.rdispls};
        uint64_t *next = op->arrays;
        for (int i = 0; i < 4; ++i) {
            if (src[i] == NULL) continue;
            memcpy(next, src[i], sizeof(uint64_t) * (size_t)c->size);
            *dst[i] = next;
            next += c->size;
        }
    }
    op->c = c;
    op->a = a;
    op->persistent = persistent != 0;
    op->mreq = MPI_REQUEST_NULL;
    pthread_mutex_lock(&c->lock);
    op->reg_next = c->requests;
    if (c->requests) c->requests->reg_prev = op;
    c->requests = op;
    pthread_mutex_unlock(&c->lock);
    *out = op;
    return PMC_OK;
}

static int ensure_progress_thread(pmc_comm *c)
{
    if (!c->progress_wanted || c->progress_running) return PMC_OK;
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        c->progress_wanted = 0;
        snprintf(c->note, sizeof(c->note),
                 "PYMCOLL_PROGRESS_THREAD=1 ignored: MPI was not initialised with MPI_THREAD_MULTIPLE, "
                 "so requests progress in Test and Wait only");
        return PMC_OK;
    }
    if (pthread_create(&c->progress, NULL, progress_main, c) != 0)
        return pmc_fail(c, PMC_ERR_SYS, "could not start the progress thread (PYMCOLL_PROGRESS_THREAD=1)");
    c->progress_running = 1;
    return PMC_OK;
}

int pmc_request_start(pmc_request *op)
{
    if (op == NULL || op->c == NULL) return PMC_ERR_ARG;
    pmc_comm *c = op->c;
    pthread_mutex_lock(&c->lock);
    if (op->active) {
        pthread_mutex_unlock(&c->lock);
        return pmc_fail(c, PMC_ERR_ARG, "%s: Start() on a request that is still active; "
                        "complete it with Wait() or Test() first", pmc_coll_name(op->a.coll));
    }
    if (!op->persistent && op->seq != 0) {
        pthread_mutex_unlock(&c->lock);
        return pmc_fail(c, PMC_ERR_ARG, "%s: a non-blocking request runs once; use the *_init "
                        "form for a request that can be started again", pmc_coll_name(op->a.coll));
    }
    int rc = pmc_coll_enter(c, op, op->persistent ? PMC_TRACE_PERSISTENT : PMC_TRACE_NONBLOCKING);
    if (rc == PMC_OK) rc = ensure_progress_thread(c);
    if (rc != PMC_OK) {
        rc = pmc_coll_leave(c, op, rc);
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    op_reset(op);
    /* A persistent request's Starts are a loop of the same call, timed as blocking calls are;
     * a non-blocking request runs once, often beside others, and only follows the verdicts. */
    op->trial_ok = op->persistent;
    op->active = 1;
    op->status = PMC_OK;
    op->next = NULL;
    if (c->queue_tail) c->queue_tail->next = op;
    else c->queue_head = op;
    c->queue_tail = op;
    /* One look without waiting: tiny collectives often finish right here. */
    progress_locked(c, 0, NULL);
    if (c->progress_running) pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->lock);
    return PMC_OK;
}

int pmc_request_test(pmc_request *op, int *done)
{
    if (op == NULL || done == NULL) return PMC_ERR_ARG;
    if (!op->active) {
        *done = 1;
        return op->status;
    }
    pmc_comm *c = op->c;
    pthread_mutex_lock(&c->lock);
    progress_locked(c, 0, NULL);
    *done = !op->active;
    int rc = *done ? op->status : PMC_OK;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int pmc_request_wait(pmc_request *op)
{
    if (op == NULL) return PMC_ERR_ARG;
    if (!op->active) return op->status;
    pmc_comm *c = op->c;
    pthread_mutex_lock(&c->lock);
    if (op->active) progress_locked(c, 1, op);
    int rc = op->status;
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int pmc_request_active(const pmc_request *op) { return op != NULL && op->active; }

const char *pmc_request_errmsg(const pmc_request *op)
{
    return op != NULL && op->errmsg != NULL ? op->errmsg : "";
}

int pmc_request_free(pmc_request *op)
{
    if (op == NULL) return PMC_OK;
    pmc_comm *c = op->c;
    if (c == NULL) {
        request_release(op);
        return PMC_OK;
    }
    pthread_mutex_lock(&c->lock);
    if (op->active) op->orphan = 1;
    else request_release(op);
    pthread_mutex_unlock(&c->lock);
    return PMC_OK;
}

int pmc_comm_progress(pmc_comm *c)
{
    if (c == NULL) return PMC_ERR_ARG;
    pthread_mutex_lock(&c->lock);
    progress_locked(c, 0, NULL);
    pthread_mutex_unlock(&c->lock);
    return PMC_OK;
}

/* The progress thread: moves the queue while it is not empty, backing off
 * (yield, then short sleeps) so that oversubscribed ranks keep their CPU. */
static void *progress_main(void *arg)
{
    pmc_comm *c = arg;
    long idle = 0;
    pthread_mutex_lock(&c->lock);
    while (!c->progress_stop) {
        if (c->queue_head == NULL) {
            idle = 0;
            pthread_cond_wait(&c->wake, &c->lock);
            continue;
        }
        const uint64_t before = c->polls_passed;
        int rc = progress_locked(c, 0, NULL);
        /* A pass that got past a wait is progress: back off only when stuck. */
        const int moved = c->polls_passed != before;
        pthread_mutex_unlock(&c->lock);
        if (moved) idle = 0;
        if (rc == PMC_PENDING) {
            ++idle;
            if (idle < 64 && !c->node_ctx.yield_now && !c->node_ctx.wait_sleep) {
                sched_yield();
            } else {
                struct timespec ts = {0, idle < 1024 ? 2000L : 50000L};
                nanosleep(&ts, NULL);
            }
        } else {
            idle = 0;
        }
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

void pmc_ops_shutdown(pmc_comm *c)
{
    if (c->progress_running) {
        pthread_mutex_lock(&c->lock);
        c->progress_stop = 1;
        pthread_cond_signal(&c->wake);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->progress, NULL);
        c->progress_running = 0;
    }
    /* Requests can never run again: queued ones fail, and none of them
     * touches the communicator afterwards (Wait/Test/Start/Free stay safe). */
    for (pmc_op *op = c->requests; op != NULL;) {
        pmc_op *next = op->reg_next;
        if (op->active) op->status = PMC_ERR_BROKEN;
        op->active = 0;
        op->next = NULL;
        op->c = NULL;
        op->reg_prev = op->reg_next = NULL;
        if (op->orphan) request_release(op);
        op = next;
    }
    c->requests = NULL;
    c->queue_head = c->queue_tail = NULL;
}

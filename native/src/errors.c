/* Status codes, error messages and the common collective entry/exit. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "coll/lanes.h"

const char *pmc_strerror(int status)
{
    switch (status) {
    case PMC_OK: return "success";
    case PMC_ERR_ARG: return "invalid argument";
    case PMC_ERR_NOMEM: return "out of memory";
    case PMC_ERR_MPI: return "MPI call failed";
    case PMC_ERR_SHM: return "node segment unavailable";
    case PMC_ERR_TIMEOUT: return "collective timed out";
    case PMC_ERR_PEER_DEAD: return "local peer process died";
    case PMC_ERR_BROKEN: return "communicator broken by an earlier failure";
    case PMC_ERR_SYS: return "system call failed";
    case PMC_ERR_PEER_ABORTED: return "another local rank gave up on the collective";
    default: return "unknown status";
    }
}

int pmc_fail(pmc_comm *c, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
    va_end(ap);
    return status;
}

int pmc_mpi_fail(pmc_comm *c, int mpi_rc, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    return pmc_fail(c, PMC_ERR_MPI, "%s failed in %s #%llu: %s", call,
                    c->node_ctx.coll ? c->node_ctx.coll : "setup",
                    (unsigned long long)c->coll_seq, msg);
}

/* The algorithm family a call takes, for its trace record (the same
 * choice the collectives' entries make). */
static int trace_algorithm(const pmc_comm *c, int coll)
{
    if (c->size == 1 || coll < 1 || coll >= PMC_COLL_COUNT) return PMC_TRACE_ALGO_SELF;
    if (pmc_use_mpi(c, coll)) return PMC_TRACE_ALGO_MPI;
    if (c->nnodes == 1) return PMC_TRACE_ALGO_NODE;
    return pmc_use_lanes(c, coll) ? PMC_TRACE_ALGO_LANES : PMC_TRACE_ALGO_LEADER;
}

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
                                    reduction, pmc_coll_is_rooted(a->coll), mode, trace_algorithm(c, a->coll),
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

int pmc_mpi_count_of(pmc_comm *c, uint64_t bytes, pmc_mpi_count *out)
{
#if MPI_VERSION >= 4
    if (bytes > (uint64_t)INT64_MAX) return pmc_fail(c, PMC_ERR_ARG, "message of %llu bytes is too large", (unsigned long long)bytes);
#else
    if (bytes > (uint64_t)INT_MAX)
        return pmc_fail(c, PMC_ERR_ARG,
                        "%s #%llu: %llu bytes exceed this MPI's int count and it has no "
                        "large-count calls (MPI-4); split the message",
                        c->node_ctx.coll, (unsigned long long)c->coll_seq,
                        (unsigned long long)bytes);
#endif
    *out = (pmc_mpi_count)bytes;
    return PMC_OK;
}

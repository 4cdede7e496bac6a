/* Status codes and error messages: what a failed call says, and the checks
 * whose only outcome is such a message. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

#include "comm.h"

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
    case PMC_ERR_MISMATCH: return "the ranks disagree on a message";
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

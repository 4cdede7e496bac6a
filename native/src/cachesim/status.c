/* Status codes and messages of the cache simulation engine. */
#include <stdarg.h>
#include <stdio.h>

#include "cachesim_internal.h"

int pmc_cachesim_fail(int status, char *msg, size_t msg_len, const char *fmt, ...)
{
    if (msg && msg_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_len, fmt, ap);
        va_end(ap);
    }
    return status;
}

const char *pmc_cachesim_strerror(int status)
{
    switch (status) {
    case PMC_CACHESIM_OK:
        return "success";
    case PMC_CACHESIM_EINVAL:
        return "invalid argument";
    case PMC_CACHESIM_ENOMEM:
        return "out of memory";
    default:
        return "unknown status";
    }
}

/* Copies of large blocks within one process: a rank's own block into its
 * receive buffer, or a block moved through the shared heap. */
#ifndef PMC_NODE_BULK_COPY_H
#define PMC_NODE_BULK_COPY_H

#include <stdint.h>

/* Copies n bytes (memcpy's contract: no overlap). From stream_min bytes on
 * (PYMCOLL_STREAM_MIN) it writes with streaming (non-temporal) stores where
 * the CPU has them: a destination this large leaves the cache before it is
 * read again, and a plain memcpy below the C library's own threshold first
 * reads every destination line in (perf/copy_engines_probe.c measures
 * both). The bytes are ordered before any later store of this thread (a
 * flag that tells a peer "done") when it returns. */
void pmc_bulk_copy(void *dst, const void *src, uint64_t n, uint64_t stream_min);

/* One chunk of a message of `total` bytes copied out of the cells into its
 * destination: streamed when the whole message would be (total at least
 * stream_min), so that a large message read chunk by chunk does not first
 * read every destination line in. */
static inline void pmc_chunk_copy_out(void *dst, const void *src, uint64_t n, uint64_t total, uint64_t stream_min)
{
    pmc_bulk_copy(dst, src, n, total >= stream_min ? 0 : UINT64_MAX);
}

#endif

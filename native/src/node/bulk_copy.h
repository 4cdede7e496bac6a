/* Copies of large blocks within one process: a rank's own block into its
 * receive buffer, or a block moved through the shared heap. */
#ifndef PMC_NODE_BULK_COPY_H
#define PMC_NODE_BULK_COPY_H

#include <stdint.h>
#include <string.h>

/* Copies n bytes (memcpy's contract: no overlap). From stream_min bytes on
 * (PYMCOLL_STREAM_MIN) it writes with streaming (non-temporal) stores where
 * the CPU has them: a destination this large leaves the cache before it is
 * read again, and a plain memcpy below the C library's own threshold first
 * reads every destination line in (perf/copy_engines_probe.c measures
 * both). The bytes are ordered before any later store of this thread (a
 * flag that tells a peer "done") when it returns. */
void pmc_bulk_copy(void *dst, const void *src, uint64_t n, uint64_t stream_min);

/* Copies n bytes (a multiple of 64) from src to dst, both 64-byte aligned,
 * with streaming stores and no fence: a run of such copies ends with
 * pmc_stream_fence() before anything tells a peer the bytes are there. */
void pmc_stream_lines(void *dst, const void *src, uint64_t n);
void pmc_stream_fence(void);

/* One chunk of a message of `total` bytes copied out of the cells into its
 * destination: streamed when the whole message would be (total at least
 * stream_min), so that a large message read chunk by chunk does not first
 * read every destination line in. */
static inline void pmc_chunk_copy_out(void *dst, const void *src, uint64_t n, uint64_t total, uint64_t stream_min)
{
    pmc_bulk_copy(dst, src, n, total >= stream_min ? 0 : UINT64_MAX);
}

/* Below this a vector copy is as fast (perf/studies/large_and_back_to_back.md). */
#define PMC_CELL_MOVSB_MIN ((uint64_t)1280)

/* A store into a cell that ranks on other cores read: from movsb_min bytes
 * on a string move (rep movsb), whose fast-string stores take whole lines
 * without first reading each for ownership; every line of a cell was last
 * read by a peer, so a vector copy pays a round trip to that core per line.
 * Ordered before later stores like memcpy. movsb_min: the node's (PYMCOLL_CELL_MOVSB_MIN). */
static inline void pmc_cell_store(void *dst, const void *src, uint64_t n, uint64_t movsb_min)
{
#if defined(__x86_64__)
    if (n >= movsb_min) {
        __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
        return;
    }
#else
    (void)movsb_min;
#endif
    memcpy(dst, src, n);
}

/* The size from which pmc_cell_store moves strings by default
 * (PYMCOLL_CELL_MOVSB_MIN=auto): PMC_CELL_MOVSB_MIN where the CPU announces
 * fast string moves (ERMS), else never (UINT64_MAX). */
uint64_t pmc_cell_movsb_min_default(void);

#endif

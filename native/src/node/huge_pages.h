/* Transparent huge pages for buffers a rank exposes for single copy again
 * and again. A peer's process_vm_readv (or _writev) pins the exposed
 * buffer's pages one at a time: on 4 KiB pages that holds the kernel's copy
 * well below memcpy, on 2 MiB pages it runs near memcpy. numpy maps its
 * allocations of 4 MiB and more on huge pages already (where they cover
 * whole aligned 2 MiB); other allocators (malloc, torch's CPU tensors) do
 * not. The first exposure of a buffer's aligned 2 MiB pages is noted; the
 * second (a gradient bucket, a persistent request's buffer, a loop's array)
 * collapses them into huge pages in place (MADV_COLLAPSE, Linux 6.1 and
 * later): milliseconds once, then every copy from them is faster. A buffer
 * exposed once is never touched; a collapse that fails (no THP support, an
 * older kernel, memory that is not private and anonymous) is not tried
 * again for that range. The contents never change. */
#ifndef PMC_NODE_HUGE_PAGES_H
#define PMC_NODE_HUGE_PAGES_H

#include <stdint.h>
#include <sys/mman.h>

/* madvise's request to collapse a range into huge pages (Linux 6.1 and later; older kernels answer
 * EINVAL), also where the C library's headers predate it. */
#if defined(MADV_COLLAPSE)
#define PMC_MADV_COLLAPSE MADV_COLLAPSE
#elif defined(__linux__)
#define PMC_MADV_COLLAPSE 25
#endif

#define PMC_HUGE_PAGE ((uint64_t)2 << 20)
#define PMC_HUGE_RANGES 32 /* ranges remembered (least recently exposed forgotten first) */
/* The most collapsed in one call (about 0.15 s at 64 MiB on a 2-core AMD EPYC guest): a larger
 * buffer goes onto huge pages over its next calls instead of stalling one call for seconds. */
#define PMC_HUGE_STEP ((uint64_t)64 << 20)

enum { PMC_HUGE_SEEN = 0, PMC_HUGE_PARTLY = 1, PMC_HUGE_DONE = 2, PMC_HUGE_FAILED = 3 };

typedef struct pmc_huge_range {
    uint64_t lo, hi;   /* the whole aligned 2 MiB pages of an exposed buffer; hi == lo: free */
    uint64_t next;     /* collapsed from lo up to here */
    uint64_t call;     /* the call that exposed it last (a resumed call exposes again) */
    uint64_t used;     /* clock of that exposure (0: free; the clock starts at 1) */
    int state;         /* PMC_HUGE_* */
} pmc_huge_range;

typedef struct pmc_huge_pages {
    int on;
    uint64_t step;     /* the most bytes collapsed per call (PMC_HUGE_STEP) */
    uint64_t clock;
    pmc_huge_range range[PMC_HUGE_RANGES];
    uint64_t collapses, collapsed_bytes, failures; /* counters, for tests and traces */
} pmc_huge_pages;

void pmc_huge_pages_init(pmc_huge_pages *h, int on);

/* [p, p + len) of this process is exposed by call number `call`: its whole
 * aligned 2 MiB pages are collapsed into huge pages from the second call
 * that exposes exactly them on, at most h->step bytes a call. Returns the
 * PMC_HUGE_* state of the range after this exposure, or -1 when nothing was
 * noted (off, no whole page). */
int pmc_huge_pages_note(pmc_huge_pages *h, const void *p, uint64_t len, uint64_t call);

#endif

/* The node segment: one shared mapping per node, made by local rank 0.
 *
 * Layout: header | pids | one seq line and one ack line per local rank |
 * inline lines | one busy line per local rank | data area. Every flag line has a single writer (its owner) and sits on its
 * own 64-byte cache line so that writers never share a line.
 */
#ifndef PMC_NODE_SEGMENT_H
#define PMC_NODE_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PMC_CACHE_LINE 64
#define PMC_SEG_MAGIC UINT64_C(0x706d636f6c6c7367) /* "pmcollsg" */
#define PMC_SEG_VERSION 3u
#define PMC_SEG_PATH_MAX 256
/* Inline lines: a ring of this many cache lines per local rank, each a step
 * number and a payload, so that a tiny message and its flag arrive as one
 * cache-line transfer. */
#define PMC_INLINE_SLOTS 8
#define PMC_INLINE_BYTES 48 /* from byte 16 of the line: aligned for every element type */

typedef struct pmc_flag {
    _Atomic uint64_t v;
    char pad[PMC_CACHE_LINE - sizeof(uint64_t)];
} pmc_flag;

typedef struct pmc_seg_header {
    uint64_t magic;
    uint32_t version;
    int32_t local_size;
    uint64_t total_bytes;
    uint64_t data_offset;
    uint64_t data_bytes;
    uint64_t heap_bytes;     /* tail of the data area given to the shared heap */
    char pad0[PMC_CACHE_LINE - 48];
    /* Local rank that gave up on a collective (-1: none); lets its peers stop
     * waiting at once instead of running into their own deadlines. */
    _Atomic int32_t abort_rank;
    char pad1[PMC_CACHE_LINE - sizeof(int32_t)];
} pmc_seg_header;

typedef struct pmc_segment {
    void *base;            /* NULL when not mapped */
    size_t bytes;
    pmc_seg_header *hdr;
    int32_t *pids;         /* pid of each local rank */
    pmc_flag *seq;         /* "I published step s" */
    pmc_flag *ack;         /* "I finished reading everything up to step s" */
    pmc_flag *inl;         /* PMC_INLINE_SLOTS lines per local rank: step + payload */
    pmc_flag *busy;        /* "I am copying to or from a peer's exposed buffer" (1) or not (0) */
    unsigned char *data;
    uint64_t data_bytes;   /* copy-in/copy-out area */
    unsigned char *heap;   /* shared heap (pymcoll.alloc), after the data area */
    uint64_t heap_bytes;
    int local_size;
} pmc_segment;

/* Total mapping size for local_size ranks and data_bytes of data. */
uint64_t pmc_segment_total_bytes(int local_size, uint64_t data_bytes);

/* Local rank 0: create a new segment file under dir with a random name
 * (O_EXCL, 0600), check free space with statvfs, reserve it with
 * posix_fallocate, map and initialise it. The last lazy_bytes of the data
 * area (a multiple of 4096: the shared heap) are reserved page by page as
 * they come into use, through pmc_segment_populate, where the kernel can
 * say so without a signal (Linux 5.14 on); elsewhere they are reserved now
 * with the rest. path receives the file's path. On failure err receives a
 * sentence saying why. */
int pmc_segment_create(pmc_segment *s, const char *dir, int local_size,
                       uint64_t data_bytes, uint64_t lazy_bytes, char *path, size_t pathlen,
                       char *err, size_t errlen);

/* Reserves the pages under [p, p + bytes) of a mapped segment: PMC_OK, or
 * PMC_ERR_SHM when the segment's directory has no room for them (the
 * pages would raise SIGBUS at the first touch). */
int pmc_segment_populate(void *p, uint64_t bytes);

/* Gives back the pages lying wholly inside [p, p + bytes) (a range no one
 * else uses), e.g. what a failed pmc_segment_populate took before the
 * directory ran out. */
void pmc_segment_unpopulate(void *p, uint64_t bytes);

/* Other local ranks: map the segment created at path and validate it. */
int pmc_segment_attach(pmc_segment *s, const char *path, int local_size,
                       char *err, size_t errlen);

/* Creator: give the last heap_bytes (a multiple of 4096) of the data area
 * to the shared heap; attachers see the split in the header. */
int pmc_segment_reserve_heap(pmc_segment *s, uint64_t heap_bytes);

/* Unmap (safe on an unmapped segment). */
void pmc_segment_detach(pmc_segment *s);

#endif

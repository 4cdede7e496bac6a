/* Shared-heap allocator: first fit over a sorted list of free extents of
 * this rank's arena, 64-byte granules, coalescing on free. Local to the
 * process (the arena is shared memory, its bookkeeping is not). */
#include "heap.h"

#include "segment.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GRANULE 64u

typedef struct extent {
    uint64_t off, len;
} extent;

struct pmc_heap {
    pthread_mutex_t lock; /* alloc/free may come from several threads */
    void *map;            /* the segment mapping, unmapped with the heap */
    size_t map_bytes;
    unsigned char *heap;  /* whole heap (all arenas) */
    uint64_t heap_bytes;
    uint64_t arena_off, arena_bytes;
    extent *free_list;    /* sorted by offset, never adjacent */
    size_t nfree, cap;
    uint64_t live;        /* blocks handed out and not freed */
    uint64_t used;        /* bytes in them */
    int released;         /* the communicator is gone */
    struct block *blocks; /* sizes of live blocks, by offset (small sorted array) */
};

typedef struct block {
    uint64_t off, len;
} block;

static int grow(extent **v, size_t *cap, size_t need)
{
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need) n *= 2;
    extent *p = realloc(*v, n * sizeof(extent));
    if (p == NULL) return 0;
    *v = p;
    *cap = n;
    return 1;
}

pmc_heap *pmc_heap_create(void *map, size_t map_bytes, unsigned char *heap, uint64_t heap_bytes, int local_rank,
                          int local_size)
{
    pmc_heap *h = calloc(1, sizeof(*h));
    if (h == NULL) return NULL;
    pthread_mutex_init(&h->lock, NULL);
    h->map = map;
    h->map_bytes = map_bytes;
    h->heap = heap;
    h->heap_bytes = heap_bytes;
    h->arena_bytes = heap_bytes / (uint64_t)local_size / GRANULE * GRANULE;
    h->arena_off = h->arena_bytes * (uint64_t)local_rank;
    if (h->arena_bytes > 0) {
        if (!grow(&h->free_list, &h->cap, 1)) {
            free(h);
            return NULL;
        }
        h->free_list[0] = (extent){h->arena_off, h->arena_bytes};
        h->nfree = 1;
    }
    return h;
}

static void destroy(pmc_heap *h)
{
    if (h->map != NULL) munmap(h->map, h->map_bytes);
    free(h->free_list);
    free(h->blocks);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

void pmc_heap_release(pmc_heap *h)
{
    if (h == NULL) return;
    pthread_mutex_lock(&h->lock);
    h->released = 1;
    const int last = h->live == 0;
    pthread_mutex_unlock(&h->lock);
    if (last) destroy(h);
}

int64_t pmc_heap_offset(const pmc_heap *h, const void *p, uint64_t bytes)
{
    if (h == NULL || p == NULL) return -1;
    const unsigned char *q = p;
    if (q < h->heap || q >= h->heap + h->heap_bytes || bytes > (uint64_t)(h->heap + h->heap_bytes - q)) return -1;
    return (int64_t)(q - h->heap);
}

/* Live blocks are few (arrays a program keeps); a sorted array suffices. */
static size_t nblocks_of(const pmc_heap *h) { return (size_t)h->live; }

static size_t find_block(const pmc_heap *h, uint64_t off)
{
    size_t lo = 0, hi = nblocks_of(h);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (h->blocks[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int pmc_heap_alloc(pmc_heap *h, uint64_t bytes, void **out)
{
    if (h == NULL || out == NULL) return PMC_ERR_ARG;
    *out = NULL;
    const uint64_t need = bytes == 0 ? GRANULE : (bytes + GRANULE - 1) / GRANULE * GRANULE;
    if (bytes > UINT64_MAX - GRANULE) return PMC_ERR_NOMEM;
    pthread_mutex_lock(&h->lock);
    size_t i = 0;
    while (i < h->nfree && h->free_list[i].len < need) ++i;
    if (i == h->nfree) {
        pthread_mutex_unlock(&h->lock);
        return PMC_ERR_NOMEM;
    }
    /* Room for the block record first, so that nothing changes on failure. */
    size_t cap = h->live;
    block *nb = realloc(h->blocks, (cap + 1) * sizeof(block));
    if (nb == NULL) {
        pthread_mutex_unlock(&h->lock);
        return PMC_ERR_NOMEM;
    }
    h->blocks = nb;
    const uint64_t off = h->free_list[i].off;
    h->free_list[i].off += need;
    h->free_list[i].len -= need;
    if (h->free_list[i].len == 0) {
        memmove(&h->free_list[i], &h->free_list[i + 1], (h->nfree - i - 1) * sizeof(extent));
        --h->nfree;
    }
    size_t at = find_block(h, off);
    memmove(&h->blocks[at + 1], &h->blocks[at], (nblocks_of(h) - at) * sizeof(block));
    h->blocks[at] = (block){off, need};
    ++h->live;
    h->used += need;
    pthread_mutex_unlock(&h->lock);
    /* The heap's pages are taken from the segment's directory as blocks
     * come into use; a full one is an error here, not a SIGBUS later. */
    if (pmc_segment_populate(h->heap + off, need) != PMC_OK) {
        pmc_segment_unpopulate(h->heap + off, need);
        pmc_heap_free(h, h->heap + off);
        return PMC_ERR_SHM;
    }
    *out = h->heap + off;
    return PMC_OK;
}

int pmc_heap_free(pmc_heap *h, void *p)
{
    if (h == NULL || p == NULL) return PMC_ERR_ARG;
    pthread_mutex_lock(&h->lock);
    const uint64_t off = (uint64_t)((unsigned char *)p - h->heap);
    size_t at = find_block(h, off);
    if (at == nblocks_of(h) || h->blocks[at].off != off) {
        pthread_mutex_unlock(&h->lock);
        return PMC_ERR_ARG;
    }
    const uint64_t len = h->blocks[at].len;
    memmove(&h->blocks[at], &h->blocks[at + 1], (nblocks_of(h) - at - 1) * sizeof(block));
    --h->live;
    h->used -= len;
    /* Insert the extent in order and merge with its neighbours. */
    size_t i = 0;
    while (i < h->nfree && h->free_list[i].off < off) ++i;
    int ok = grow(&h->free_list, &h->cap, h->nfree + 1);
    if (ok) {
        memmove(&h->free_list[i + 1], &h->free_list[i], (h->nfree - i) * sizeof(extent));
        h->free_list[i] = (extent){off, len};
        ++h->nfree;
        if (i + 1 < h->nfree && h->free_list[i].off + h->free_list[i].len == h->free_list[i + 1].off) {
            h->free_list[i].len += h->free_list[i + 1].len;
            memmove(&h->free_list[i + 1], &h->free_list[i + 2], (h->nfree - i - 2) * sizeof(extent));
            --h->nfree;
        }
        if (i > 0 && h->free_list[i - 1].off + h->free_list[i - 1].len == h->free_list[i].off) {
            h->free_list[i - 1].len += h->free_list[i].len;
            memmove(&h->free_list[i], &h->free_list[i + 1], (h->nfree - i - 1) * sizeof(extent));
            --h->nfree;
        }
    }
    /* (Without memory for the list the extent is lost, never corrupted.) */
    const int last = h->released && h->live == 0;
    pthread_mutex_unlock(&h->lock);
    if (last) destroy(h);
    return PMC_OK;
}

void pmc_heap_stats(const pmc_heap *h, uint64_t *arena, uint64_t *used, uint64_t *largest_free)
{
    pmc_heap *m = (pmc_heap *)h;
    pthread_mutex_lock(&m->lock);
    uint64_t big = 0;
    for (size_t i = 0; i < h->nfree; ++i)
        if (h->free_list[i].len > big) big = h->free_list[i].len;
    *arena = h->arena_bytes;
    *used = h->used;
    *largest_free = big;
    pthread_mutex_unlock(&m->lock);
}

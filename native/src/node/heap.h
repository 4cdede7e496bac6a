/* The shared heap: the tail of the node segment, split into one arena per
 * local rank so that pymcoll.alloc() is a local call (no other rank takes
 * part). Every local rank maps the whole heap, so a buffer allocated here
 * can be read by its peers at the same offset with a plain memcpy: the
 * "direct" data path. The heap outlives its communicator while blocks are
 * in use; the mapping goes when the last block is freed. */
#ifndef PMC_NODE_HEAP_H
#define PMC_NODE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "pymcoll.h"

/* Makes the allocator of this rank's arena; owns (void *map, map_bytes)
 * from now on (unmapped by pmc_heap_release). NULL when out of memory. */
pmc_heap *pmc_heap_create(void *map, size_t map_bytes, unsigned char *heap, uint64_t heap_bytes, int local_rank,
                          int local_size);
/* The communicator lets go: unmaps and frees now, or when the last block goes. */
void pmc_heap_release(pmc_heap *h);
/* Offset of p in the heap when p lies in it (any rank of the node reads it
 * at the same offset), or -1. */
int64_t pmc_heap_offset(const pmc_heap *h, const void *p, uint64_t bytes);

#endif

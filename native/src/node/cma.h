/* Single copy between the ranks of a node. A rank exposes a buffer by
 * publishing a descriptor (in its inline line); a peer fetches from it with
 * process_vm_readv, or with a memcpy when the buffer lies in the shared
 * heap, which every local rank maps at the same offset. */
#ifndef PMC_NODE_CMA_H
#define PMC_NODE_CMA_H

#include <stdint.h>

#include "node.h"
#include "pymcoll.h"

enum { PMC_DESC_ADDR = 1, PMC_DESC_HEAP = 2 };

typedef struct pmc_desc {
    uint64_t where; /* address in the owner's process, or offset in the heap */
    uint64_t len;
    uint32_t kind;
    uint32_t pad;
} pmc_desc;

/* Describes p (len bytes) of this process. */
void pmc_desc_make(const pmc_heap *heap, const void *p, uint64_t len, pmc_desc *d);
/* Copies len bytes at offset off of src's exposed buffer into dst. */
int pmc_fetch(pmc_node *n, int src, const pmc_desc *d, uint64_t off, void *dst, uint64_t len);
/* Where len bytes at offset off of src's exposed buffer can be read in
 * place: *at is their address when the buffer lies in the shared heap, NULL
 * otherwise (fetch them). Reads through *at go between
 * pmc_node_copy_begin and pmc_node_copy_end, as a fetch's do. */
int pmc_peek(pmc_node *n, int src, const pmc_desc *d, uint64_t off, uint64_t len, const void **at);
/* Copies len bytes of src into dst's exposed buffer at offset off
 * (process_vm_writev, or memcpy into the shared heap). */
int pmc_store(pmc_node *n, int dst, const pmc_desc *d, uint64_t off, const void *src, uint64_t len);

#endif

/* Single copy between local ranks: descriptors of exposed buffers, the
 * fetch that reads one and the store that writes one (process_vm_readv /
 * process_vm_writev, or memcpy with the shared heap), plus the standalone
 * probe for `python -m pymcoll info`. */
#include "cma.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heap.h"
#include "bulk_copy.h"

void pmc_desc_make(const pmc_heap *heap, const void *p, uint64_t len, pmc_desc *d)
{
    const int64_t off = pmc_heap_offset(heap, p, len);
    d->kind = off >= 0 ? PMC_DESC_HEAP : PMC_DESC_ADDR;
    d->where = off >= 0 ? (uint64_t)off : (uint64_t)(uintptr_t)p;
    d->len = len;
    d->pad = 0;
}

/* PMC_OK when len bytes at offset off lie within what local rank `peer`
 * exposed (d); else the error, and the node is told (its peers wait on this
 * rank mid-protocol, so they must learn now). */
static int check_range(pmc_node *n, int peer, const pmc_desc *d, uint64_t off, uint64_t len, int write)
{
    if (off <= d->len && len <= d->len - off) return PMC_OK;
    snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": local rank %d exposed %" PRIu64 " bytes but %" PRIu64
             " at offset %" PRIu64 " were to be %s (the ranks disagree on the message size; "
             "PYMCOLL_CHECK=1 names the argument); the communicator is broken: Free() it",
             n->coll, n->coll_seq, peer, d->len, len, off, write ? "written" : "read");
    pmc_node_abort(n);
    return PMC_ERR_MISMATCH;
}

/* Moves len bytes between `mine` (this process) and offset off of what
 * local rank `peer` exposed (d): from the peer when `write` is 0, to it
 * otherwise. The range is checked against the exposure first. */
static int transfer(pmc_node *n, int peer, const pmc_desc *d, uint64_t off, void *mine, uint64_t len, int write)
{
    if (len == 0) return PMC_OK;
    int rc = check_range(n, peer, d, off, len, write);
    if (rc != PMC_OK) return rc;
    rc = pmc_node_copy_begin(n);
    if (rc != PMC_OK) return rc;
    if (d->kind == PMC_DESC_HEAP) {
        unsigned char *theirs = n->seg.heap + d->where + off;
        if (write) pmc_bulk_copy(theirs, mine, len, n->stream_min);
        else pmc_bulk_copy(mine, theirs, len, n->stream_min);
        pmc_node_copy_end(n);
        return PMC_OK;
    }
    unsigned char *at = mine;
    uint64_t done = 0;
    while (done < len) {
        struct iovec local = {at + done, (size_t)(len - done)};
        struct iovec remote = {(void *)(uintptr_t)(d->where + off + done), (size_t)(len - done)};
        const pid_t pid = (pid_t)n->seg.pids[peer];
        ssize_t moved = write ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
                              : process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (moved <= 0) {
            if (moved < 0 && errno == EINTR) continue;
            snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": %s local rank %d (pid %d) failed after %" PRIu64
                     " of %" PRIu64 " bytes: %s", n->coll, n->coll_seq,
                     write ? "process_vm_writev to" : "process_vm_readv from", peer, (int)pid, done, len,
                     moved < 0 ? strerror(errno) : "no progress");
            pmc_node_copy_end(n);
            pmc_node_abort(n);
            return PMC_ERR_SYS;
        }
        done += (uint64_t)moved;
    }
    pmc_node_copy_end(n);
    return PMC_OK;
}

int pmc_fetch(pmc_node *n, int src, const pmc_desc *d, uint64_t off, void *dst, uint64_t len)
{
    return transfer(n, src, d, off, dst, len, 0);
}

int pmc_peek(pmc_node *n, int src, const pmc_desc *d, uint64_t off, uint64_t len, const void **at)
{
    *at = NULL;
    if (d->kind != PMC_DESC_HEAP || len == 0) return PMC_OK;
    int rc = check_range(n, src, d, off, len, 0);
    if (rc != PMC_OK) return rc;
    *at = n->seg.heap + d->where + off;
    return PMC_OK;
}

int pmc_store(pmc_node *n, int dst, const pmc_desc *d, uint64_t off, const void *src, uint64_t len)
{
    /* process_vm_writev only reads the local iovec: dropping const is safe. */
    return transfer(n, dst, d, off, (void *)(uintptr_t)src, len, 1);
}

int pmc_cma_probe(void)
{
    /* The child reads from its parent: Yama's ptrace_scope=1 forbids that
     * direction exactly as it forbids one MPI rank reading a sibling. */
    static const char pattern[16] = "pymcoll-cma-ok!";
    volatile char source[16];
    memcpy((char *)source, pattern, sizeof(pattern));
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) {
        char got[16] = {0};
        struct iovec local = {got, sizeof(got)};
        struct iovec remote = {(void *)source, sizeof(got)};
        ssize_t n = process_vm_readv(parent, &local, 1, &remote, 1, 0);
        _exit(n == (ssize_t)sizeof(got) && memcmp(got, pattern, sizeof(got)) == 0 ? 0 : 1);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child) return -1;
    if (!WIFEXITED(status)) return -1;
    return WEXITSTATUS(status) == 0 ? 1 : 0;
}

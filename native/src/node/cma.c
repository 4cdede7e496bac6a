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

void pmc_desc_make(const pmc_heap *heap, const void *p, uint64_t len, pmc_desc *d)
{
    const int64_t off = pmc_heap_offset(heap, p, len);
    d->kind = off >= 0 ? PMC_DESC_HEAP : PMC_DESC_ADDR;
    d->where = off >= 0 ? (uint64_t)off : (uint64_t)(uintptr_t)p;
    d->len = len;
    d->pad = 0;
}

/* PMC_OK when [off, off + len) lies in what `peer` exposed (d), else the
 * error naming the disagreement. */
static int within(pmc_node *n, int peer, const pmc_desc *d, uint64_t off, uint64_t len, const char *verb)
{
    if (off <= d->len && len <= d->len - off) return PMC_OK;
    snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": local rank %d exposed %" PRIu64 " bytes but %" PRIu64
             " at offset %" PRIu64 " were to be %s (the ranks disagree on the message size)",
             n->coll, n->coll_seq, peer, d->len, len, off, verb);
    return PMC_ERR_ARG;
}

int pmc_fetch(pmc_node *n, int src, const pmc_desc *d, uint64_t off, void *dst, uint64_t len)
{
    if (len == 0) return PMC_OK;
    const int rc = within(n, src, d, off, len, "read");
    if (rc != PMC_OK) return rc;
    if (d->kind == PMC_DESC_HEAP) {
        memcpy(dst, n->seg.heap + d->where + off, len);
        return PMC_OK;
    }
    unsigned char *to = dst;
    uint64_t done = 0;
    while (done < len) {
        struct iovec local = {to + done, (size_t)(len - done)};
        struct iovec remote = {(void *)(uintptr_t)(d->where + off + done), (size_t)(len - done)};
        ssize_t got = process_vm_readv((pid_t)n->seg.pids[src], &local, 1, &remote, 1, 0);
        if (got <= 0) {
            if (got < 0 && errno == EINTR) continue;
            snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": process_vm_readv from local rank %d (pid %d) failed "
                     "after %" PRIu64 " of %" PRIu64 " bytes: %s", n->coll, n->coll_seq, src,
                     (int)n->seg.pids[src], done, len, got < 0 ? strerror(errno) : "no progress");
            return PMC_ERR_SYS;
        }
        done += (uint64_t)got;
    }
    return PMC_OK;
}

int pmc_store(pmc_node *n, int dst, const pmc_desc *d, uint64_t off, const void *src, uint64_t len)
{
    if (len == 0) return PMC_OK;
    const int rc = within(n, dst, d, off, len, "written");
    if (rc != PMC_OK) return rc;
    if (d->kind == PMC_DESC_HEAP) {
        memcpy(n->seg.heap + d->where + off, src, len);
        return PMC_OK;
    }
    const unsigned char *from = src;
    uint64_t done = 0;
    while (done < len) {
        struct iovec local = {(void *)(uintptr_t)(from + done), (size_t)(len - done)};
        struct iovec remote = {(void *)(uintptr_t)(d->where + off + done), (size_t)(len - done)};
        ssize_t put = process_vm_writev((pid_t)n->seg.pids[dst], &local, 1, &remote, 1, 0);
        if (put <= 0) {
            if (put < 0 && errno == EINTR) continue;
            snprintf(n->errmsg, n->errlen, "%s #%" PRIu64 ": process_vm_writev to local rank %d (pid %d) failed "
                     "after %" PRIu64 " of %" PRIu64 " bytes: %s", n->coll, n->coll_seq, dst,
                     (int)n->seg.pids[dst], done, len, put < 0 ? strerror(errno) : "no progress");
            return PMC_ERR_SYS;
        }
        done += (uint64_t)put;
    }
    return PMC_OK;
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

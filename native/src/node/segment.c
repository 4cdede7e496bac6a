/* Creation, mapping and validation of the node segment. */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "pymcoll.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static uint64_t pids_offset(void) { return sizeof(pmc_seg_header); }

static uint64_t flags_offset(int local_size)
{
    return align_up(pids_offset() + (uint64_t)local_size * sizeof(int32_t), PMC_CACHE_LINE);
}

static uint64_t data_offset(int local_size)
{
    /* Page-aligned so that large copies start on a page boundary. */
    return align_up(flags_offset(local_size) + (3u + PMC_INLINE_SLOTS) * (uint64_t)local_size * sizeof(pmc_flag),
                    4096);
}

uint64_t pmc_segment_total_bytes(int local_size, uint64_t data_bytes)
{
    return data_offset(local_size) + align_up(data_bytes, 4096);
}

static void bind_views(pmc_segment *s, int local_size)
{
    unsigned char *b = s->base;
    s->hdr = (pmc_seg_header *)b;
    s->pids = (int32_t *)(b + pids_offset());
    s->seq = (pmc_flag *)(b + flags_offset(local_size));
    s->ack = s->seq + local_size;
    s->inl = s->ack + local_size;
    s->busy = s->inl + (size_t)local_size * PMC_INLINE_SLOTS;
    s->data = b + s->hdr->data_offset;
    s->heap_bytes = s->hdr->heap_bytes;
    s->data_bytes = s->hdr->data_bytes - s->heap_bytes;
    s->heap = s->heap_bytes ? s->data + s->data_bytes : NULL;
    s->local_size = local_size;
}

static int map_fd(pmc_segment *s, int fd, size_t bytes, char *err, size_t errlen)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(err, errlen, "mmap of %zu bytes failed: %s", bytes, strerror(errno));
        return PMC_ERR_SHM;
    }
    s->base = p;
    s->bytes = bytes;
    return PMC_OK;
}

/* Whether this kernel populates a mapping on request (MADV_POPULATE_WRITE,
 * Linux 5.14): asked on a page already reserved, so it costs nothing. */
static int populate_supported(void *reserved_page)
{
    return madvise(reserved_page, 4096, MADV_POPULATE_WRITE) == 0;
}

int pmc_segment_populate(void *p, uint64_t bytes)
{
    if (bytes == 0) return PMC_OK;
    const uintptr_t first = (uintptr_t)p / 4096 * 4096;
    const uintptr_t end = ((uintptr_t)p + bytes + 4095) / 4096 * 4096;
    if (madvise((void *)first, end - first, MADV_POPULATE_WRITE) == 0) return PMC_OK;
    /* EINVAL: a kernel without it, where the creator reserved everything. */
    return errno == EINVAL ? PMC_OK : PMC_ERR_SHM;
}

void pmc_segment_unpopulate(void *p, uint64_t bytes)
{
    const uintptr_t first = ((uintptr_t)p + 4095) / 4096 * 4096;
    const uintptr_t end = ((uintptr_t)p + bytes) / 4096 * 4096;
    /* Best effort: pages left behind only take room, never change data. */
    if (end > first) (void)madvise((void *)first, end - first, MADV_REMOVE);
}

int pmc_segment_create(pmc_segment *s, const char *dir, int local_size,
                       uint64_t data_bytes, uint64_t lazy_bytes, char *path, size_t pathlen,
                       char *err, size_t errlen)
{
    memset(s, 0, sizeof(*s));
    if (local_size < 1) {
        snprintf(err, errlen, "local_size must be >= 1, got %d", local_size);
        return PMC_ERR_ARG;
    }
    /* The page rounding below must not wrap around 2^64: a size near it
     * would become a segment without a data area (and a division by zero
     * in the first Bcast). */
    if (data_bytes > UINT64_MAX - data_offset(local_size) - 4096) {
        snprintf(err, errlen, "a node segment data area of %" PRIu64 " bytes is too large", data_bytes);
        return PMC_ERR_SHM;
    }
    uint64_t total = pmc_segment_total_bytes(local_size, data_bytes);
    if (lazy_bytes % 4096 != 0 || lazy_bytes > total - data_offset(local_size)) {
        snprintf(err, errlen, "a lazily reserved tail of %" PRIu64 " bytes does not fit a data area of %" PRIu64,
                 lazy_bytes, data_bytes);
        return PMC_ERR_ARG;
    }
    /* What must exist now: the flags and the copy-in/copy-out cells. */
    const uint64_t reserve = total - lazy_bytes;

    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) {
        snprintf(err, errlen, "cannot use %s for the node segment: %s", dir, strerror(errno));
        return PMC_ERR_SHM;
    }
    uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    if (avail < reserve) {
        snprintf(err, errlen,
                 "%s has %" PRIu64 " bytes free but the node segment needs %" PRIu64
                 " (lower PYMCOLL_SHM_SIZE or enlarge %s)", dir, avail, reserve, dir);
        return PMC_ERR_SHM;
    }

    /* A random name created with O_EXCL: never collides with, or opens, a
     * file someone else put there. */
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
        uint64_t r[2];
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            snprintf(err, errlen, "getrandom failed: %s", strerror(errno));
            return PMC_ERR_SYS;
        }
        int n = snprintf(path, pathlen, "%s/pymcoll-%016" PRIx64 "%016" PRIx64, dir, r[0], r[1]);
        if (n < 0 || (size_t)n >= pathlen) {
            snprintf(err, errlen, "segment directory path too long: %s", dir);
            return PMC_ERR_ARG;
        }
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
            return PMC_ERR_SHM;
        }
    }
    if (fd < 0) {
        snprintf(err, errlen, "could not find a free segment name in %s", dir);
        return PMC_ERR_SHM;
    }
    /* Reserve the pages now: a full tmpfs then fails here with a clear
     * error instead of raising SIGBUS at the first touch later. The lazy
     * tail is only sized: a communicator whose heap is never used costs
     * neither its pages nor the time to clear them. */
    int rc = ftruncate(fd, (off_t)total) == 0 ? 0 : errno;
    if (rc == 0) rc = posix_fallocate(fd, 0, (off_t)reserve);
    if (rc != 0) {
        snprintf(err, errlen, "reserving %" PRIu64 " bytes in %s failed: %s", reserve, dir, strerror(rc));
        close(fd);
        unlink(path);
        return PMC_ERR_SHM;
    }
    rc = map_fd(s, fd, (size_t)total, err, errlen);
    if (rc == PMC_OK && lazy_bytes > 0 && !populate_supported(s->base)) {
        const int frc = posix_fallocate(fd, (off_t)reserve, (off_t)lazy_bytes);
        if (frc != 0) {
            snprintf(err, errlen, "reserving %" PRIu64 " bytes in %s failed: %s", total, dir, strerror(frc));
            pmc_segment_detach(s);
            rc = PMC_ERR_SHM;
        }
    }
    close(fd);
    if (rc != PMC_OK) {
        unlink(path);
        return rc;
    }
    pmc_seg_header *h = s->base;
    h->version = PMC_SEG_VERSION;
    h->local_size = local_size;
    h->total_bytes = total;
    h->data_offset = data_offset(local_size);
    h->data_bytes = total - h->data_offset;
    h->heap_bytes = 0;
    atomic_store_explicit(&h->abort_rank, -1, memory_order_relaxed);
    bind_views(s, local_size);
    for (int i = 0; i < local_size; ++i) {
        s->pids[i] = 0;
        atomic_store_explicit(&s->seq[i].v, 0, memory_order_relaxed);
        atomic_store_explicit(&s->ack[i].v, 0, memory_order_relaxed);
        atomic_store_explicit(&s->busy[i].v, 0, memory_order_relaxed);
    }
    /* Magic last, with release: an attacher that sees it sees the rest. */
    atomic_thread_fence(memory_order_release);
    h->magic = PMC_SEG_MAGIC;
    return PMC_OK;
}

int pmc_segment_attach(pmc_segment *s, const char *path, int local_size,
                       char *err, size_t errlen)
{
    memset(s, 0, sizeof(*s));
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open node segment %s: %s", path, strerror(errno));
        return PMC_ERR_SHM;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        snprintf(err, errlen, "node segment %s is not a private file of this user", path);
        close(fd);
        return PMC_ERR_SHM;
    }
    uint64_t expect = pmc_segment_total_bytes(local_size, 0);
    if ((uint64_t)st.st_size < expect) {
        snprintf(err, errlen, "node segment %s is too small (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return PMC_ERR_SHM;
    }
    int rc = map_fd(s, fd, (size_t)st.st_size, err, errlen);
    close(fd);
    if (rc != PMC_OK) return rc;
    pmc_seg_header *h = s->base;
    atomic_thread_fence(memory_order_acquire);
    if (h->magic != PMC_SEG_MAGIC || h->version != PMC_SEG_VERSION ||
        h->local_size != local_size || h->total_bytes != (uint64_t)st.st_size ||
        h->data_offset + h->data_bytes != h->total_bytes || h->heap_bytes > h->data_bytes) {
        snprintf(err, errlen, "node segment %s has an unexpected header", path);
        pmc_segment_detach(s);
        return PMC_ERR_SHM;
    }
    bind_views(s, local_size);
    return PMC_OK;
}

int pmc_segment_reserve_heap(pmc_segment *s, uint64_t heap_bytes)
{
    if (heap_bytes % 4096 != 0 || heap_bytes >= s->hdr->data_bytes) return PMC_ERR_ARG;
    s->hdr->heap_bytes = heap_bytes;
    bind_views(s, s->local_size);
    return PMC_OK;
}

void pmc_segment_detach(pmc_segment *s)
{
    if (s->base != NULL) munmap(s->base, s->bytes);
    memset(s, 0, sizeof(*s));
}

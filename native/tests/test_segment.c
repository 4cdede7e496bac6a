/* Node segment: creation, layout seen by the creator and by attached
 * processes, file mode, the lazily reserved tail (the heap), and the
 * refusals (missing directory, not enough space, bad header, foreign mode,
 * wrong size, a full directory under the tail). No MPI calls.
 *
 * Usage: test_segment            (prints one line per failed check)
 * Exit status: 0 when every check passed. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "node/segment.h"
#include "pymcoll.h"
#include "testutil.h"

#define ERRLEN 768
#define PAGE 4096u

static char g_dir[PMC_SEG_PATH_MAX];

/* Number of entries (besides . and ..) in dir, -1 on error. */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ++n;
    closedir(d);
    return n;
}

static uintptr_t addr(const void *p) { return (uintptr_t)p; }

/* Everything a mapped segment must satisfy, from whichever process maps it. */
static void check_layout(const pmc_segment *s, int L, uint64_t data_req)
{
    CHECK(s->base != NULL, "segment not mapped");
    if (s->base == NULL) return;
    const unsigned char *b = s->base;
    const pmc_seg_header *h = s->hdr;
    CHECK((void *)h == s->base, "header not at the start");
    CHECK(addr(b) % PAGE == 0, "mapping not page aligned");
    CHECK(h->magic == PMC_SEG_MAGIC, "magic %" PRIx64, h->magic);
    CHECK(h->version == PMC_SEG_VERSION, "version %u", h->version);
    CHECK(h->local_size == L, "header local_size %d, expected %d", (int)h->local_size, L);
    CHECK(s->local_size == L, "local_size %d, expected %d", s->local_size, L);
    CHECK(h->total_bytes == s->bytes, "total_bytes %" PRIu64 " != mapped %zu", h->total_bytes, s->bytes);
    CHECK(s->bytes == pmc_segment_total_bytes(L, data_req), "mapped %zu, expected %" PRIu64,
          s->bytes, pmc_segment_total_bytes(L, data_req));

    /* The abort word is written during failures: it must not share a line
     * with the read-mostly header fields. */
    CHECK(offsetof(pmc_seg_header, abort_rank) % PMC_CACHE_LINE == 0 &&
              offsetof(pmc_seg_header, abort_rank) >= offsetof(pmc_seg_header, data_bytes) + 8,
          "abort_rank at offset %zu", offsetof(pmc_seg_header, abort_rank));
    CHECK(sizeof(pmc_seg_header) % PMC_CACHE_LINE == 0, "header size %zu", sizeof(pmc_seg_header));
    CHECK(sizeof(pmc_flag) == PMC_CACHE_LINE, "flag size %zu", sizeof(pmc_flag));

    /* pids follow the header and end before the first flag line. */
    CHECK(addr(s->pids) == addr(b) + sizeof(pmc_seg_header), "pids at offset %zu",
          (size_t)(addr(s->pids) - addr(b)));
    CHECK(addr(s->pids + L) <= addr(s->seq), "pids overlap the flags");

    /* 2L flag lines: each 64-byte aligned, each on its own line, none on a
     * line of the header or the pids. */
    uintptr_t lines[2 * 64];
    int nl = 0;
    for (int i = 0; i < L && nl + 2 <= (int)(sizeof(lines) / sizeof(lines[0])); ++i) {
        CHECK(addr(&s->seq[i]) % PMC_CACHE_LINE == 0, "seq[%d] misaligned (%#lx)", i,
              (unsigned long)addr(&s->seq[i]));
        CHECK(addr(&s->ack[i]) % PMC_CACHE_LINE == 0, "ack[%d] misaligned (%#lx)", i,
              (unsigned long)addr(&s->ack[i]));
        lines[nl++] = addr(&s->seq[i]) / PMC_CACHE_LINE;
        lines[nl++] = addr(&s->ack[i]) / PMC_CACHE_LINE;
    }
    const uintptr_t last_pid_line = (addr(s->pids + L) - 1) / PMC_CACHE_LINE;
    for (int i = 0; i < nl; ++i) {
        CHECK(lines[i] > last_pid_line, "flag line %d shares a line with the header/pids", i);
        for (int j = i + 1; j < nl; ++j)
            CHECK(lines[i] != lines[j], "flag lines %d and %d share a cache line", i, j);
    }

    /* Data: page aligned, after the flags, to the end of the mapping. */
    CHECK(addr(s->data) >= addr(s->ack + L), "data overlaps the flags");
    CHECK((addr(s->data) - addr(b)) % PAGE == 0, "data offset %zu not page aligned",
          (size_t)(addr(s->data) - addr(b)));
    CHECK(h->data_offset == addr(s->data) - addr(b), "header data_offset %" PRIu64, h->data_offset);
    CHECK(s->data_bytes == h->data_bytes, "data_bytes %" PRIu64 " != header %" PRIu64,
          s->data_bytes, h->data_bytes);
    CHECK(s->data_bytes >= data_req, "data_bytes %" PRIu64 " < requested %" PRIu64, s->data_bytes,
          data_req);
    CHECK(addr(s->data) + s->data_bytes == addr(b) + s->bytes, "data does not end the mapping");
}

static unsigned char data_byte(int who, uint64_t i) { return t_byte((uint64_t)who * 7919u + 5, i); }

/* One attached process: sees what the creator wrote, publishes its own. */
static int child_attach(const char *path, int L, int me, uint64_t data_req)
{
    snprintf(t_who, sizeof(t_who), "L=%d child %d", L, me);
    t_failures = 0; /* the exit status counts this process's failures only */
    char err[ERRLEN] = "";
    pmc_segment s;
    int rc = pmc_segment_attach(&s, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    if (rc != PMC_OK) return 1;
    check_layout(&s, L, data_req);
    CHECK(atomic_load(&s.hdr->abort_rank) == -1, "abort_rank %d", (int)atomic_load(&s.hdr->abort_rank));
    CHECK(s.pids[0] == (int32_t)getppid(), "pids[0]=%d, creator is %d", (int)s.pids[0], (int)getppid());
    /* The creator's bytes, read through this process's own mapping. */
    const uint64_t region = s.data_bytes / (uint64_t)L;
    int64_t bad = -1;
    for (uint64_t i = 0; i < region && bad < 0; ++i)
        if (s.data[i] != data_byte(0, i)) bad = (int64_t)i;
    CHECK(bad < 0, "creator's data differs at byte %" PRId64, bad);
    for (uint64_t i = 0; i < region; ++i) s.data[(uint64_t)me * region + i] = data_byte(me, i);
    s.pids[me] = (int32_t)getpid();
    atomic_store(&s.seq[me].v, 1000u + (unsigned)me);
    atomic_store(&s.ack[me].v, 2000u + (unsigned)me);
    pmc_segment_detach(&s);
    CHECK(s.base == NULL && s.bytes == 0, "detach did not clear the segment");
    return t_failures != 0;
}

/* Create with local_size L, attach from L-1 child processes, check that
 * everyone agrees on the layout and sees everyone's writes. */
static void test_create_and_attach(int L, uint64_t data_req)
{
    snprintf(t_who, sizeof(t_who), "create L=%d", L);
    char path[PMC_SEG_PATH_MAX], err[ERRLEN] = "";
    pmc_segment s;
    int rc = pmc_segment_create(&s, g_dir, L, data_req, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    if (rc != PMC_OK) return;
    check_layout(&s, L, data_req);
    CHECK(strncmp(path, g_dir, strlen(g_dir)) == 0 && path[strlen(g_dir)] == '/',
          "path %s not in %s", path, g_dir);

    struct stat st;
    CHECK(stat(path, &st) == 0, "stat %s: %s", path, strerror(errno));
    CHECK((st.st_mode & 07777) == 0600, "mode %04o, expected 0600", (unsigned)(st.st_mode & 07777));
    CHECK(S_ISREG(st.st_mode), "not a regular file");
    CHECK((uint64_t)st.st_size == s.bytes, "file size %lld, mapped %zu", (long long)st.st_size, s.bytes);
    /* Fresh segment: nobody aborted, every flag and pid is zero. */
    CHECK(atomic_load(&s.hdr->abort_rank) == -1, "abort_rank %d", (int)atomic_load(&s.hdr->abort_rank));
    for (int i = 0; i < L; ++i) {
        CHECK(s.pids[i] == 0 && atomic_load(&s.seq[i].v) == 0 && atomic_load(&s.ack[i].v) == 0,
              "rank %d not zeroed", i);
    }

    s.pids[0] = (int32_t)getpid();
    const uint64_t region = s.data_bytes / (uint64_t)L;
    for (uint64_t i = 0; i < region; ++i) s.data[i] = data_byte(0, i);

    pid_t kids[16];
    fflush(NULL); /* children exit(): no duplicated stdio buffers */
    for (int r = 1; r < L; ++r) {
        kids[r] = fork();
        CHECK(kids[r] >= 0, "fork: %s", strerror(errno));
        if (kids[r] == 0) exit(child_attach(path, L, r, data_req));
    }
    for (int r = 1; r < L; ++r) {
        if (kids[r] < 0) continue;
        int status = 0;
        CHECK(waitpid(kids[r], &status, 0) == kids[r], "waitpid: %s", strerror(errno));
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status %#x)", r, status);
        CHECK(s.pids[r] == (int32_t)kids[r], "pids[%d]=%d, child is %d", r, (int)s.pids[r], (int)kids[r]);
        CHECK(atomic_load(&s.seq[r].v) == 1000u + (unsigned)r, "seq[%d] not seen", r);
        CHECK(atomic_load(&s.ack[r].v) == 2000u + (unsigned)r, "ack[%d] not seen", r);
        int64_t bad = -1;
        for (uint64_t i = 0; i < region && bad < 0; ++i)
            if (s.data[(uint64_t)r * region + i] != data_byte(r, i)) bad = (int64_t)i;
        CHECK(bad < 0, "child %d's data differs at byte %" PRId64, r, bad);
    }
    /* The creator's flags were never touched by the children. */
    CHECK(atomic_load(&s.seq[0].v) == 0 && atomic_load(&s.ack[0].v) == 0, "rank 0 flags changed");

    /* A wrong local_size is refused (the header says otherwise). */
    pmc_segment t;
    err[0] = '\0';
    rc = pmc_segment_attach(&t, path, L + 1, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(t.base == NULL, "refused attach left a mapping");
    CHECK(err[0] != '\0', "no message for a wrong local_size");

    CHECK(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
    /* Once unlinked (as the core does after setup) nobody can attach. */
    err[0] = '\0';
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, path) != NULL && strstr(err, strerror(ENOENT)) != NULL,
          "message does not name the file and the cause: %s", err);
    pmc_segment_detach(&s);
    pmc_segment_detach(&s); /* detaching twice is allowed */
    CHECK(s.base == NULL, "detach left a mapping");
}

/* Headers that attach must refuse; each is restored afterwards. */
static void test_bad_header(void)
{
    snprintf(t_who, sizeof(t_who), "bad header");
    const int L = 2;
    char path[PMC_SEG_PATH_MAX], err[ERRLEN] = "";
    pmc_segment s, t;
    int rc = pmc_segment_create(&s, g_dir, L, 8192, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    if (rc != PMC_OK) return;
    pmc_seg_header *h = s.hdr;

    const uint64_t magic = h->magic;
    h->magic = magic ^ 1u;
    err[0] = '\0';
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, "unexpected header") != NULL && strstr(err, path) != NULL,
          "bad magic message: %s", err);
    CHECK(t.base == NULL, "refused attach left a mapping");
    h->magic = magic;

    h->version = PMC_SEG_VERSION + 1;
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    h->version = PMC_SEG_VERSION;

    h->data_bytes += PAGE; /* data would run past the end of the file */
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    h->data_bytes -= PAGE;

    /* Someone else's mode: readable by others is refused. */
    CHECK(chmod(path, 0644) == 0, "chmod: %s", strerror(errno));
    err[0] = '\0';
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, "not a private file") != NULL, "mode message: %s", err);
    CHECK(chmod(path, 0600) == 0, "chmod: %s", strerror(errno));

    /* Restored: attach works again. */
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    pmc_segment_detach(&t);

    /* A truncated file is refused before its header is read. */
    pmc_segment_detach(&s);
    CHECK(truncate(path, 100) == 0, "truncate: %s", strerror(errno));
    err[0] = '\0';
    rc = pmc_segment_attach(&t, path, L, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, "too small") != NULL, "truncated message: %s", err);
    CHECK(unlink(path) == 0, "unlink: %s", strerror(errno));
}

/* statvfs and open failures: a clear message, no mapping, no file left. */
static void test_create_refusals(void)
{
    snprintf(t_who, sizeof(t_who), "refusals");
    char path[PMC_SEG_PATH_MAX], err[ERRLEN] = "", dir[PMC_SEG_PATH_MAX + 32];
    pmc_segment s;

    snprintf(dir, sizeof(dir), "%s/no-such-dir", g_dir);
    int rc = pmc_segment_create(&s, dir, 2, 4096, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, dir) != NULL && strstr(err, strerror(ENOENT)) != NULL,
          "missing-dir message does not name the dir and the cause: %s", err);
    CHECK(s.base == NULL, "failed create left a mapping");

    /* A regular file where the directory should be: statvfs succeeds on
     * it, the open below it must fail cleanly. */
    snprintf(dir, sizeof(dir), "%s/plain-file", g_dir);
    int fd = open(dir, O_CREAT | O_WRONLY | O_EXCL, 0600);
    CHECK(fd >= 0, "create %s: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    err[0] = '\0';
    rc = pmc_segment_create(&s, dir, 2, 4096, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, strerror(ENOTDIR)) != NULL, "not-a-dir message: %s", err);
    CHECK(unlink(dir) == 0, "unlink %s: %s", dir, strerror(errno));

    /* More than the file system has free: refused before any file exists,
     * and the message gives the size that was needed. */
    struct statvfs v;
    CHECK(statvfs(g_dir, &v) == 0, "statvfs %s: %s", g_dir, strerror(errno));
    const uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    const uint64_t want = avail + (UINT64_C(1) << 30);
    char need[32];
    snprintf(need, sizeof(need), "%" PRIu64, pmc_segment_total_bytes(3, want));
    err[0] = '\0';
    rc = pmc_segment_create(&s, g_dir, 3, want, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_SHM, err);
    CHECK(strstr(err, need) != NULL && strstr(err, g_dir) != NULL,
          "message does not give the needed size %s and the dir: %s", need, err);
    CHECK(s.base == NULL, "failed create left a mapping");

    /* Sizes whose page rounding would wrap around 2^64 must not turn into
     * a tiny segment. */
    const uint64_t huge[3] = {UINT64_MAX, UINT64_MAX - 4000, UINT64_MAX - 2 * PAGE};
    for (int i = 0; i < 3; ++i) {
        err[0] = '\0';
        rc = pmc_segment_create(&s, g_dir, 2, huge[i], 0, path, sizeof(path), err, sizeof(err));
        CHECK(rc != PMC_OK, "data_bytes=%" PRIu64 " accepted: got a segment of %zu bytes with %" PRIu64
              " data bytes", huge[i], s.bytes, s.data_bytes);
        if (rc != PMC_OK) CHECK(err[0] != '\0', "no message for data_bytes=%" PRIu64, huge[i]);
        if (rc == PMC_OK) {
            pmc_segment_detach(&s);
            unlink(path);
        }
    }

    /* Bad local_size; a path buffer too short for the name. */
    err[0] = '\0';
    rc = pmc_segment_create(&s, g_dir, 0, 4096, 0, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_ARG, err);
    CHECK(strstr(err, "local_size") != NULL, "message: %s", err);
    err[0] = '\0';
    rc = pmc_segment_create(&s, g_dir, 2, 4096, 0, path, strlen(g_dir) + 4, err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_ARG, err);
    CHECK(strstr(err, "too long") != NULL, "message: %s", err);
    CHECK(dir_entries(g_dir) == 0, "refused creates left %d files in %s", dir_entries(g_dir), g_dir);
}

static uint64_t allocated_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

/* The tail given as lazy is sized but not reserved (where the kernel
 * populates on request), and pmc_segment_populate reserves a range of it. */
static void test_lazy_tail(void)
{
    snprintf(t_who, sizeof(t_who), "lazy tail");
    char path[PMC_SEG_PATH_MAX], err[ERRLEN] = "";
    pmc_segment s;
    const uint64_t cells = 64u << 10, tail = 4u << 20;
    int rc = pmc_segment_create(&s, g_dir, 2, cells + tail, tail, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_OK, err);
    if (rc != PMC_OK) return;
    check_layout(&s, 2, cells + tail);
    const uint64_t total = pmc_segment_total_bytes(2, cells + tail);
    const int lazy = madvise(s.base, PAGE, MADV_POPULATE_WRITE) == 0;
    const uint64_t before = allocated_bytes(path);
    if (lazy) {
        CHECK(before >= total - tail && before < total - tail / 2,
              "%" PRIu64 " bytes allocated; expected the %" PRIu64 " before the tail", before, total - tail);
        unsigned char *in_tail = (unsigned char *)s.base + total - tail + 3 * PAGE + 100;
        CHECK_RC(pmc_segment_populate(in_tail, 256u << 10), PMC_OK, "populate");
        const uint64_t after = allocated_bytes(path);
        CHECK(after >= before + (256u << 10), "populating 256 KiB of the tail: %" PRIu64 " -> %" PRIu64 " bytes",
              before, after);
        memset(in_tail, 0x5a, 256u << 10); /* reserved pages: no SIGBUS */
    } else {
        CHECK(before >= total, "without MADV_POPULATE_WRITE the whole segment is reserved: %" PRIu64 " of %" PRIu64,
              before, total);
    }
    CHECK_RC(pmc_segment_populate(s.base, 0), PMC_OK, "an empty range");
    pmc_segment_detach(&s);
    unlink(path);

    err[0] = '\0';
    rc = pmc_segment_create(&s, g_dir, 2, cells, 1000, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_ARG, err);
    err[0] = '\0';
    rc = pmc_segment_create(&s, g_dir, 2, cells, cells + PAGE, path, sizeof(path), err, sizeof(err));
    CHECK_RC(rc, PMC_ERR_ARG, err);
    CHECK(strstr(err, "lazily") != NULL, "message: %s", err);
}

/* A directory with no room left under the tail: the segment is still made
 * (its tail is larger than the directory), and populating past the room is
 * an error, not a SIGBUS. Needs a private mount namespace (root): a child
 * mounts a 512 KiB tmpfs there; skipped, with a note, where it cannot. */
static void test_full_directory(void)
{
    snprintf(t_who, sizeof(t_who), "full directory");
    char probe[PMC_SEG_PATH_MAX + 8] = "";
    void *page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const int lazy = page != MAP_FAILED && madvise(page, PAGE, MADV_POPULATE_WRITE) == 0;
    if (page != MAP_FAILED) munmap(page, PAGE);
    if (!lazy) {
        printf("test_segment: full-directory check skipped (no MADV_POPULATE_WRITE)\n");
        return;
    }
    snprintf(probe, sizeof(probe), "%s/small", g_dir);
    CHECK(mkdir(probe, 0700) == 0, "mkdir %s: %s", probe, strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", probe, "tmpfs", 0, "size=512k,mode=0700") != 0)
            _exit(77);
        char path[PMC_SEG_PATH_MAX], err[ERRLEN] = "";
        pmc_segment s;
        const uint64_t cells = 64u << 10, tail = 8u << 20;
        int rc = pmc_segment_create(&s, probe, 2, cells + tail, tail, path, sizeof(path), err, sizeof(err));
        CHECK_RC(rc, PMC_OK, err);
        if (rc == PMC_OK) {
            unsigned char *t = (unsigned char *)s.base + s.bytes - tail;
            CHECK_RC(pmc_segment_populate(t, 64u << 10), PMC_OK, "64 KiB of the tail");
            CHECK_RC(pmc_segment_populate(t + (1u << 20), 2u << 20), PMC_ERR_SHM, "2 MiB of the tail");
            /* What the failed request took goes back: the same room again. */
            pmc_segment_unpopulate(t + (1u << 20), 2u << 20);
            CHECK_RC(pmc_segment_populate(t + (4u << 20), 256u << 10), PMC_OK, "256 KiB after giving back");
            pmc_segment_detach(&s);
            unlink(path);
        }
        _exit(t_failures != 0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
        printf("test_segment: full-directory check skipped (cannot mount a tmpfs here: not root?)\n");
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the full-directory child failed (status %d)", status);
    CHECK(rmdir(probe) == 0, "rmdir %s: %s", probe, strerror(errno));
}

int main(void)
{
    if (t_make_dir(g_dir, sizeof(g_dir)) != 0) {
        fprintf(stderr, "FAIL [main] cannot make a temporary directory: %s\n", strerror(errno));
        return 1;
    }
    const int sizes[5] = {1, 2, 3, 4, 7};
    for (int i = 0; i < 5; ++i) test_create_and_attach(sizes[i], 64u << 10);
    test_create_and_attach(3, 1);        /* data rounds up to one page */
    test_create_and_attach(2, 100000);   /* not a page multiple */
    test_bad_header();
    test_create_refusals();
    test_lazy_tail();
    test_full_directory();

    snprintf(t_who, sizeof(t_who), "main");
    CHECK(dir_entries(g_dir) == 0, "%d files left in %s", dir_entries(g_dir), g_dir);
    CHECK(rmdir(g_dir) == 0, "rmdir %s: %s", g_dir, strerror(errno));
    if (t_failures) fprintf(stderr, "test_segment: %d check(s) failed\n", t_failures);
    else printf("test_segment: all checks passed\n");
    return t_failures != 0;
}

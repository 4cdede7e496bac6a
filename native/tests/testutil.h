/* Shared helpers of the C tests: failure counting, clocks, test patterns,
 * a scratch directory for segment files. Header-only so that every test
 * stays one executable built from one source file. */
#ifndef PMC_TESTUTIL_H
#define PMC_TESTUTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Failed checks of this process; each failure prints one line. */
static int t_failures;
/* Prefix of failure lines ("rank 2", "N=3 rank 1", ...); set by each test. */
static char t_who[64] = "main";

/* Prints one failure line with a single write(), so that lines of
 * concurrent processes never interleave. */
__attribute__((format(printf, 4, 5))) static void t_fail(const char *file, int line, const char *cond,
                                                        const char *fmt, ...)
{
    char buf[2048];
    int n = snprintf(buf, sizeof(buf), "FAIL [%s] %s:%d: %s: ", t_who, file, line, cond);
    if (n < 0) n = 0;
    if ((size_t)n < sizeof(buf) - 1) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof(buf) - 1 - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0) n += m;
    }
    if ((size_t)n > sizeof(buf) - 2) n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    fflush(stdout);
    ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
    (void)w; /* nowhere else to report it */
    ++t_failures;
}

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) t_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);            \
    } while (0)

/* A status check that also prints the message that came with the status. */
#define CHECK_RC(rc, want, msg)                                                 \
    CHECK((rc) == (want), "status %d, expected %d; message: %s", (int)(rc),     \
          (int)(want), (msg))

static inline double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void t_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Mixes a seed; distinct (iteration, size, rank, ...) tuples give distinct
 * streams, so a stale byte from an earlier collective never passes. */
static inline uint64_t t_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

static inline uint64_t t_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return t_mix(t_mix(t_mix(a + 1) ^ (b + 0x1234567)) ^ (c * 0x9e3779b97f4a7c15u)) ^ d;
}

/* Byte i of the pattern of seed: cheap, and not periodic in any cell size. */
static inline unsigned char t_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = seed + i * UINT64_C(0x9e3779b97f4a7c15);
    return (unsigned char)((x ^ (x >> 29) ^ (i >> 8)) >> 21);
}

static inline void t_fill(unsigned char *p, uint64_t n, uint64_t seed)
{
    for (uint64_t i = 0; i < n; ++i) p[i] = t_byte(seed, i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline int64_t t_verify(const unsigned char *p, uint64_t n, uint64_t seed)
{
    for (uint64_t i = 0; i < n; ++i)
        if (p[i] != t_byte(seed, i)) return (int64_t)i;
    return -1;
}

/* Index of the first byte that is not c, or -1. */
static inline int64_t t_verify_const(const unsigned char *p, uint64_t n, unsigned char c)
{
    for (uint64_t i = 0; i < n; ++i)
        if (p[i] != c) return (int64_t)i;
    return -1;
}

/* A fresh private directory for segment files: $PMC_TEST_DIR if set, else
 * /dev/shm (the core's default, a tmpfs), else /tmp. */
static inline int t_make_dir(char *out, size_t outlen)
{
    const char *bases[3] = {getenv("PMC_TEST_DIR"), "/dev/shm", "/tmp"};
    for (int i = 0; i < 3; ++i) {
        if (bases[i] == NULL || bases[i][0] == '\0') continue;
        int n = snprintf(out, outlen, "%s/pmc-test-XXXXXX", bases[i]);
        if (n < 0 || (size_t)n >= outlen) continue;
        if (mkdtemp(out) != NULL) return 0;
    }
    return -1;
}

#endif

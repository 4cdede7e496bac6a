/* How fast one core hands data to another through a cache-sized shared
 * ring, sampled over time: the path copy-in/copy-out depends on. Run it
 * before a benchmark; where the samples swing (on shared virtual machines
 * they can drop 2-3x for tens of milliseconds to seconds), ratios between
 * launches will too.
 *
 *   cc -O2 -o handoff_probe perf/handoff_probe.c && ./handoff_probe [ROUNDS] [WRITER_CPU] [READER_CPU]
 *
 * Prints one line per round: the writer-to-reader rate of each 256 MiB
 * pass (64 KiB chunks through a 4 MiB ring) and, for comparison, one
 * core's memcpy of 256 MiB through memory. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK = 64 << 10, SLOTS = 64, PASSES = 8, CHUNKS_PER_PASS = 4096 };
#define TIMEOUT_S 10.0 /* a wait longer than this means the other process is gone */

typedef struct {
    _Alignas(64) _Atomic long ready; /* reader: 1 pinned, 2 could not pin (first channel only) */
    _Alignas(64) _Atomic long written;
    _Alignas(64) _Atomic long read;
    _Alignas(64) unsigned char ring[SLOTS][CHUNK];
} channel;

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Spins until *x >= target; -1 after `limit` seconds (the peer died or stalled). */
static int wait_geq(_Atomic long *x, long target, double limit)
{
    const double end = seconds() + limit;
    for (unsigned long spins = 1; atomic_load_explicit(x, memory_order_acquire) < target; ++spins)
        if ((spins & 0xFFFF) == 0 && seconds() > end) return -1;
    return 0;
}

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

static void reader(channel *ch, int cpu)
{
    unsigned char *mine = malloc(CHUNK);
    const int ok = mine != NULL && pin(cpu) == 0;
    atomic_store_explicit(&ch[0].ready, ok ? 1 : 2, memory_order_release);
    if (!ok) _exit(2);
    for (int p = 0; p < PASSES; ++p)
        for (long k = 0; k < CHUNKS_PER_PASS; ++k) {
            if (wait_geq(&ch[p].written, k + 1, TIMEOUT_S) != 0) _exit(3);
            memcpy(mine, ch[p].ring[k % SLOTS], CHUNK);
            atomic_store_explicit(&ch[p].read, k + 1, memory_order_release);
        }
    free(mine);
    _exit(0);
}

/* One round: PASSES passes through fresh rings; returns 0 or -1. */
static int round_once(int wcpu, int rcpu, double *rates)
{
    channel *ch = mmap(NULL, sizeof(channel) * PASSES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ch == MAP_FAILED) return -1;
    memset(ch, 0, sizeof(channel) * PASSES);
    unsigned char *src = malloc(CHUNK);
    if (src == NULL || pin(wcpu) != 0) return -1;
    memset(src, 0x5A, CHUNK);
    pid_t child = fork();
    if (child < 0) return -1;
    if (child == 0) reader(ch, rcpu);
    /* The reader says whether it runs where asked before anyone waits on it. */
    if (wait_geq(&ch[0].ready, 1, TIMEOUT_S) != 0 || atomic_load_explicit(&ch[0].ready, memory_order_acquire) != 1) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return -1;
    }
    for (int p = 0; p < PASSES; ++p) {
        const double t0 = seconds();
        for (long k = 0; k < CHUNKS_PER_PASS; ++k) {
            /* Never overwrite a slot the reader has not copied yet. */
            if (wait_geq(&ch[p].read, k - SLOTS + 2, TIMEOUT_S) != 0) break;
            memcpy(ch[p].ring[k % SLOTS], src, CHUNK);
            atomic_store_explicit(&ch[p].written, k + 1, memory_order_release);
        }
        if (wait_geq(&ch[p].read, CHUNKS_PER_PASS, TIMEOUT_S) != 0) {
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            return -1;
        }
        rates[p] = (double)CHUNKS_PER_PASS * CHUNK / (seconds() - t0) / 1e9;
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    free(src);
    munmap(ch, sizeof(channel) * PASSES);
    return 0;
}

static double memory_copy_rate(void)
{
    const size_t n = (size_t)256 << 20;
    unsigned char *a = malloc(n), *b = malloc(n);
    if (a == NULL || b == NULL) return 0.0;
    memset(a, 1, n);
    memset(b, 2, n);
    const double t0 = seconds();
    memcpy(b, a, n);
    __asm__ volatile("" : : "r"(b) : "memory"); /* the copy is used: keep it */
    const double rate = (double)n / (seconds() - t0) / 1e9;
    free(a);
    free(b);
    return rate;
}

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int wcpu = argc > 2 ? atoi(argv[2]) : 0, rcpu = argc > 3 ? atoi(argv[3]) : 1;
    if (rounds < 1) {
        fprintf(stderr, "ROUNDS must be at least 1, got %s\n", argv[1]);
        return 2;
    }
    printf("# handoff from cpu %d to cpu %d, GB/s per 256 MiB pass; then one core's memcpy through memory\n",
           wcpu, rcpu);
    for (int r = 0; r < rounds; ++r) {
        double rates[PASSES];
        if (round_once(wcpu, rcpu, rates) != 0) {
            fprintf(stderr, "handoff_probe: a round failed: CPUs %d and %d must both be online and in this "
                            "process's affinity mask, and the reader must keep up within %.0f s\n",
                    wcpu, rcpu, TIMEOUT_S);
            return 1;
        }
        for (int p = 0; p < PASSES; ++p) printf("%5.1f ", rates[p]);
        printf("| memcpy %5.1f\n", memory_copy_rate());
        fflush(stdout);
        sleep(1);
    }
    return 0;
}

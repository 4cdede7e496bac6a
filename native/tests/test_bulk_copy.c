/* pmc_bulk_copy and pmc_cell_store: every byte lands, nothing outside the
 * destination range is touched, for sizes on both sides of the streaming
 * and string-move thresholds and every alignment of source and destination
 * within a 16-byte line. */
#include "node/bulk_copy.h"
#include "testutil.h"

/* threshold: pmc_bulk_copy's stream_min, or with `cell` pmc_cell_store's movsb_min. */
static void check_copy(uint64_t n, unsigned dst_shift, unsigned src_shift, uint64_t threshold, int cell)
{
    enum { GUARD = 64 };
    unsigned char *src = malloc(n + 32), *dst = malloc(n + 32 + 2 * GUARD);
    if (src == NULL || dst == NULL) {
        CHECK(0, "out of memory for %llu bytes", (unsigned long long)n);
        free(src);
        free(dst);
        return;
    }
    const uint64_t seed = t_seed(n, dst_shift, src_shift, 7);
    t_fill(src + src_shift, n, seed);
    memset(dst, 0xA5, n + 32 + 2 * GUARD);
    unsigned char *to = dst + GUARD + dst_shift;
    if (cell) pmc_cell_store(to, src + src_shift, n, threshold);
    else pmc_bulk_copy(to, src + src_shift, n, threshold);
    const int64_t bad = t_verify(to, n, seed);
    CHECK(bad < 0, "%s n=%llu dst+%u src+%u: byte %lld differs", cell ? "cell" : "bulk", (unsigned long long)n,
          dst_shift, src_shift, (long long)bad);
    CHECK(t_verify_const(dst, GUARD + dst_shift, 0xA5) < 0, "n=%llu dst+%u: a byte before the destination changed",
          (unsigned long long)n, dst_shift);
    CHECK(t_verify_const(to + n, 32 - dst_shift + GUARD, 0xA5) < 0,
          "n=%llu dst+%u: a byte after the destination changed", (unsigned long long)n, dst_shift);
    free(src);
    free(dst);
}

int main(void)
{
    const uint64_t at = 1u << 20;
    /* Below, at and above the threshold; tails of 0-63 bytes after the 64-byte loop. */
    const uint64_t sizes[] = {0, 1, 4096, at - 1, at, at + 1, at + 63, at + 4096 + 37};
    /* Destination shifts 0, 5, 10, 15 (0 and 15 with PMC_TEST_QUICK, as under valgrind) and source
     * shifts 0, 9: aligned, and misaligned each way. */
    const unsigned d_step = getenv("PMC_TEST_QUICK") != NULL ? 15 : 5;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i)
        for (unsigned d = 0; d < 16; d += d_step)
            for (unsigned s = 0; s < 16; s += 9) {
                check_copy(sizes[i], d, s, at, 0);
                if (sizes[i] < at) check_copy(sizes[i], d, s, 1, 0); /* streaming at every size */
            }
    check_copy(3 * at, 7, 2, UINT64_MAX, 0); /* never streaming */
    /* Cell stores below, at and above the default string-move threshold, string moves at every
     * size, and never (the threshold of a CPU without fast string moves). */
    const uint64_t m = PMC_CELL_MOVSB_MIN, cell_sizes[] = {0, 1, 63, m - 1, m, m + 1, 4096 + 37};
    for (size_t i = 0; i < sizeof(cell_sizes) / sizeof(cell_sizes[0]); ++i)
        for (unsigned d = 0; d < 16; d += d_step)
            for (unsigned s = 0; s < 16; s += 9) {
                check_copy(cell_sizes[i], d, s, m, 1);
                check_copy(cell_sizes[i], d, s, 1, 1);
                check_copy(cell_sizes[i], d, s, UINT64_MAX, 1);
            }
    CHECK(pmc_cell_movsb_min_default() == m || pmc_cell_movsb_min_default() == UINT64_MAX,
          "the default string-move threshold is %llu", (unsigned long long)pmc_cell_movsb_min_default());
    if (t_failures) fprintf(stderr, "test_bulk_copy: %d check(s) failed\n", t_failures);
    else printf("test_bulk_copy: all checks passed\n");
    return t_failures != 0;
}

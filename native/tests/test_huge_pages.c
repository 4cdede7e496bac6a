/* pmc_huge_pages_note: a buffer's whole aligned 2 MiB pages are collapsed
 * into huge pages on the second call that exposes them, never on the first,
 * never twice, never when off; a call resumed (the same call number) counts
 * once; a refused collapse is not tried again; ranges are forgotten least
 * recently exposed first; the contents never change. */
#include "node/huge_pages.h"
#include "testutil.h"

#define MIB ((uint64_t)1 << 20)

/* Whether this kernel collapses private anonymous memory on request (Linux 6.1+ with THP). */
static int kernel_collapses(void)
{
#ifdef PMC_MADV_COLLAPSE
    unsigned char *p = aligned_alloc(PMC_HUGE_PAGE, PMC_HUGE_PAGE);
    if (p == NULL) return 0;
    memset(p, 1, PMC_HUGE_PAGE);
    const int ok = madvise(p, PMC_HUGE_PAGE, PMC_MADV_COLLAPSE) == 0;
    free(p);
    return ok;
#else
    return 0;
#endif
}

int main(void)
{
    const int collapses = kernel_collapses();
    printf("kernel collapses on request: %s\n", collapses ? "yes" : "no");
    const uint64_t n = 6 * MIB;
    unsigned char *buf = aligned_alloc(PMC_HUGE_PAGE, n + PMC_HUGE_PAGE);
    if (buf == NULL) {
        CHECK(0, "out of memory for %llu bytes", (unsigned long long)n);
        return 1;
    }
    const uint64_t seed = t_seed(n, 1, 2, 3);
    t_fill(buf, n + PMC_HUGE_PAGE, seed);

    pmc_huge_pages h;
    pmc_huge_pages_init(&h, 1);
    /* Off, NULL, or no whole aligned page: nothing noted. */
    pmc_huge_pages off;
    pmc_huge_pages_init(&off, 0);
    CHECK(pmc_huge_pages_note(&off, buf, n, 1) == -1 && pmc_huge_pages_note(&off, buf, n, 2) == -1,
          "off: a range was noted");
    CHECK(off.collapses == 0 && off.failures == 0, "off: a collapse was tried");
    CHECK(pmc_huge_pages_note(&h, NULL, n, 1) == -1, "NULL was noted");
    CHECK(pmc_huge_pages_note(&h, buf + 1, PMC_HUGE_PAGE, 1) == -1, "2 MiB not aligned to a page was noted");
    CHECK(pmc_huge_pages_note(&h, buf + 4096, 3 * MIB, 1) == -1, "3 MiB holding no whole aligned page was noted");
    CHECK(pmc_huge_pages_note(&h, buf, (uint64_t)-1, 1) == -1, "a range past the address space was noted");

    /* First exposure, the same call resumed, then a second call. */
    CHECK(pmc_huge_pages_note(&h, buf + 100, n, 7) == PMC_HUGE_SEEN, "first exposure not noted");
    CHECK(pmc_huge_pages_note(&h, buf + 100, n, 7) == PMC_HUGE_SEEN, "a resumed call counted as a second");
    CHECK(h.collapses == 0 && h.failures == 0, "collapsed on the first call");
    const int second = pmc_huge_pages_note(&h, buf + 100, n, 8);
    if (collapses) {
        CHECK(second == PMC_HUGE_DONE && h.collapses == 1, "second call: state %d, %llu collapses", second,
              (unsigned long long)h.collapses);
        /* buf + 100 .. + 6 MiB holds the whole pages at 2 and 4 MiB. */
        CHECK(h.collapsed_bytes == 2 * PMC_HUGE_PAGE, "collapsed %llu bytes, expected 4 MiB",
              (unsigned long long)h.collapsed_bytes);
    } else {
        CHECK(second == PMC_HUGE_FAILED && h.failures == 1, "second call on a kernel that refuses: state %d",
              second);
    }
    CHECK(t_verify(buf, n + PMC_HUGE_PAGE, seed) < 0, "the contents changed");
    /* Never again for that range, collapsed or refused. */
    for (uint64_t call = 9; call < 12; ++call) CHECK(pmc_huge_pages_note(&h, buf + 100, n, call) == second, "state moved");
    CHECK(h.collapses + h.failures == 1, "a range was tried again");

    /* A step smaller than the range: one step a call, then done; a resumed call adds none. */
    pmc_huge_pages_init(&h, 1);
    h.step = PMC_HUGE_PAGE + 4096; /* rounded down to one page */
    CHECK(pmc_huge_pages_note(&h, buf, n, 30) == PMC_HUGE_SEEN, "stepped: first exposure");
    const int want_partly = collapses ? PMC_HUGE_PARTLY : PMC_HUGE_FAILED;
    CHECK(pmc_huge_pages_note(&h, buf, n, 31) == want_partly, "stepped: second call");
    CHECK(pmc_huge_pages_note(&h, buf, n, 31) == want_partly, "stepped: the same call resumed moved on");
    if (collapses) {
        CHECK(h.collapsed_bytes == PMC_HUGE_PAGE, "stepped: %llu bytes after one step",
              (unsigned long long)h.collapsed_bytes);
        CHECK(pmc_huge_pages_note(&h, buf, n, 32) == PMC_HUGE_PARTLY, "stepped: third call");
        CHECK(pmc_huge_pages_note(&h, buf, n, 33) == PMC_HUGE_DONE, "stepped: fourth call");
        CHECK(h.collapses == 3 && h.collapsed_bytes == n, "stepped: %llu collapses of %llu bytes",
              (unsigned long long)h.collapses, (unsigned long long)h.collapsed_bytes);
        CHECK(pmc_huge_pages_note(&h, buf, n, 34) == PMC_HUGE_DONE && h.collapses == 3, "stepped: collapsed again");
    }
    CHECK(t_verify(buf, n + PMC_HUGE_PAGE, seed) < 0, "the contents changed");

    /* A different range over the same pages is another range. */
    CHECK(pmc_huge_pages_note(&h, buf, 4 * MIB, 20) == PMC_HUGE_SEEN, "a new range not noted as new");

    /* More ranges than remembered: the least recently exposed is forgotten, the others are kept. */
    pmc_huge_pages_init(&h, 1);
    unsigned char *base = buf; /* ranges past buf are only noted: only range 1, inside it, is collapsed */
    for (int i = 0; i <= PMC_HUGE_RANGES; ++i)
        CHECK(pmc_huge_pages_note(&h, base, (uint64_t)(i + 1) * PMC_HUGE_PAGE, (uint64_t)(100 + i)) == PMC_HUGE_SEEN,
              "range %d", i);
    /* Range 0 (one page) was the least recently used: forgotten, so it is new again. Range 1 stays. */
    CHECK(pmc_huge_pages_note(&h, base, 2 * PMC_HUGE_PAGE, 200) != PMC_HUGE_SEEN, "range 1 was forgotten before range 0");
    CHECK(pmc_huge_pages_note(&h, base, PMC_HUGE_PAGE, 201) == PMC_HUGE_SEEN, "range 0 was kept");
    CHECK(t_verify(buf, n + PMC_HUGE_PAGE, seed) < 0, "the contents changed");
    free(buf);
    return t_failures != 0;
}

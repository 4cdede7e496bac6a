/* Collapsing buffers exposed for single copy repeatedly into transparent
 * huge pages (see huge_pages.h). */
#include "huge_pages.h"

#include <errno.h>
#include <string.h>

void pmc_huge_pages_init(pmc_huge_pages *h, int on)
{
    memset(h, 0, sizeof(*h));
    h->on = on != 0;
    h->step = PMC_HUGE_STEP;
}

static int collapse(uint64_t lo, uint64_t hi)
{
#ifdef PMC_MADV_COLLAPSE
    return madvise((void *)(uintptr_t)lo, (size_t)(hi - lo), PMC_MADV_COLLAPSE);
#else
    (void)lo, (void)hi;
    errno = EINVAL;
    return -1;
#endif
}

int pmc_huge_pages_note(pmc_huge_pages *h, const void *p, uint64_t len, uint64_t call)
{
    if (!h->on || p == NULL) return -1;
    const uint64_t start = (uint64_t)(uintptr_t)p;
    if (len > UINT64_MAX - start) return -1;
    const uint64_t lo = (start + PMC_HUGE_PAGE - 1) & ~(PMC_HUGE_PAGE - 1);
    const uint64_t hi = (start + len) & ~(PMC_HUGE_PAGE - 1);
    if (hi <= lo) return -1;
    h->clock++;
    pmc_huge_range *r = NULL, *oldest = &h->range[0];
    for (int i = 0; i < PMC_HUGE_RANGES; ++i) {
        pmc_huge_range *x = &h->range[i];
        if (x->lo == lo && x->hi == hi) {
            r = x;
            break;
        }
        if (x->used < oldest->used) oldest = x; /* a free range has used == 0: taken first */
    }
    if (r == NULL) { /* first exposure of these pages: only noted */
        *oldest = (pmc_huge_range){lo, hi, lo, call, h->clock, PMC_HUGE_SEEN};
        return PMC_HUGE_SEEN;
    }
    r->used = h->clock;
    if (r->call == call || r->state == PMC_HUGE_DONE || r->state == PMC_HUGE_FAILED) {
        r->call = call;
        return r->state;
    }
    r->call = call;
    const uint64_t step = h->step >= PMC_HUGE_PAGE ? h->step & ~(PMC_HUGE_PAGE - 1) : PMC_HUGE_PAGE;
    const uint64_t end = hi - r->next > step ? r->next + step : hi;
    if (collapse(r->next, end) == 0) {
        h->collapses++;
        h->collapsed_bytes += end - r->next;
        r->next = end;
        r->state = end == hi ? PMC_HUGE_DONE : PMC_HUGE_PARTLY;
    } else {
        r->state = PMC_HUGE_FAILED;
        h->failures++;
    }
    return r->state;
}

/* The LFU order shared by the LFU and LeCaR shadows: held rows by (lookups
 * since the start, time of the last lookup), counts kept for every row
 * ever looked up (they outlive evictions). */
#include "cachesim_internal.h"

int pmc_lfu_order_init(pmc_lfu_order *o, size_t capacity, int64_t rows)
{
    int rc = pmc_rowheap_init(&o->held, capacity, rows);
    if (rc != PMC_CACHESIM_OK)
        return rc;
    rc = pmc_rowmap_init(&o->counts, 2 * capacity, rows);
    if (rc != PMC_CACHESIM_OK)
        pmc_rowheap_free(&o->held);
    return rc;
}

void pmc_lfu_order_free(pmc_lfu_order *o)
{
    pmc_rowheap_free(&o->held);
    pmc_rowmap_free(&o->counts);
}

int pmc_lfu_order_touch(pmc_lfu_order *o, int64_t row, int64_t t)
{
    int64_t *c = pmc_rowmap_find(&o->counts, row);
    int64_t count = c ? *c + 1 : 1;
    if (c)
        *c = count;
    else {
        int rc = pmc_rowmap_put(&o->counts, row, count, NULL);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    return pmc_rowheap_set(&o->held, row, (double)count, t);
}

/* Row map: open addressing with linear probing and backward-shift deletion. */
#include <stdlib.h>

#include "cachesim_internal.h"

#define FREE_KEY (-1)

static size_t slot_of(int64_t key, size_t mask)
{
    /* splitmix64's finalizer: consecutive rows spread over the table. */
    uint64_t z = (uint64_t)key + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (size_t)(z ^ (z >> 31)) & mask;
}

static int alloc_table(pmc_rowmap *m, size_t cap)
{
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = NULL;
        m->vals = NULL;
        return PMC_CACHESIM_ENOMEM;
    }
    for (size_t i = 0; i < cap; i++)
        m->keys[i] = FREE_KEY;
    m->cap = cap;
    m->len = 0;
    return PMC_CACHESIM_OK;
}

int pmc_rowmap_init(pmc_rowmap *m, size_t hint)
{
    size_t cap = 16;
    while (cap < 2 * hint)
        cap *= 2;
    return alloc_table(m, cap);
}

void pmc_rowmap_free(pmc_rowmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->len = 0;
}

int64_t *pmc_rowmap_find(const pmc_rowmap *m, int64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = slot_of(key, mask);; i = (i + 1) & mask) {
        if (m->keys[i] == key)
            return &m->vals[i];
        if (m->keys[i] == FREE_KEY)
            return NULL;
    }
}

static int64_t *place(pmc_rowmap *m, int64_t key, int64_t val)
{
    size_t mask = m->cap - 1;
    size_t i = slot_of(key, mask);
    while (m->keys[i] != FREE_KEY && m->keys[i] != key)
        i = (i + 1) & mask;
    if (m->keys[i] == FREE_KEY) {
        m->keys[i] = key;
        m->len++;
    }
    m->vals[i] = val;
    return &m->vals[i];
}

static int grow(pmc_rowmap *m)
{
    pmc_rowmap old = *m;
    int rc = alloc_table(m, old.cap * 2);
    if (rc != PMC_CACHESIM_OK) {
        *m = old;
        return rc;
    }
    for (size_t i = 0; i < old.cap; i++)
        if (old.keys[i] != FREE_KEY)
            place(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
    return PMC_CACHESIM_OK;
}

int pmc_rowmap_put(pmc_rowmap *m, int64_t key, int64_t val, int64_t **slot)
{
    /* At most half full: probes stay short. */
    if (2 * (m->len + 1) > m->cap) {
        int rc = grow(m);
        if (rc != PMC_CACHESIM_OK)
            return rc;
    }
    int64_t *v = place(m, key, val);
    if (slot)
        *slot = v;
    return PMC_CACHESIM_OK;
}

int pmc_rowmap_del(pmc_rowmap *m, int64_t key)
{
    size_t mask = m->cap - 1;
    size_t i = slot_of(key, mask);
    while (m->keys[i] != key) {
        if (m->keys[i] == FREE_KEY)
            return 0;
        i = (i + 1) & mask;
    }
    /* Pull later entries of the probe run back over the hole, so lookups
     * never stop early at it. */
    for (size_t j = (i + 1) & mask; m->keys[j] != FREE_KEY; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], mask);
        /* The entry at j may move to i only if its home is not in (i, j]. */
        int stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = FREE_KEY;
    m->len--;
    return 1;
}

/* Row map: a dense array when the rows are bounded, else open addressing
 * with linear probing and backward-shift deletion. */
#include <stdlib.h>

#include "cachesim_internal.h"

#define FREE_KEY (-1)

size_t pmc_rowmap_slot(int64_t key, size_t mask)
{
    /* splitmix64's finalizer: consecutive rows spread over the table. */
    uint64_t z = (uint64_t)key + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (size_t)(z ^ (z >> 31)) & mask;
}

static int alloc_hashed(pmc_rowmap *m, size_t cap)
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
    m->dense = 0;
    return PMC_CACHESIM_OK;
}

int pmc_rowmap_init(pmc_rowmap *m, size_t hint, int64_t rows)
{
    *m = (pmc_rowmap){0};
    if (rows > 0) {
        m->vals = malloc((size_t)rows * sizeof *m->vals);
        if (!m->vals)
            return PMC_CACHESIM_ENOMEM;
        for (int64_t i = 0; i < rows; i++)
            m->vals[i] = PMC_ROWMAP_ABSENT;
        m->cap = (size_t)rows;
        m->dense = 1;
        return PMC_CACHESIM_OK;
    }
    size_t cap = 16;
    while (cap < 2 * hint)
        cap *= 2;
    return alloc_hashed(m, cap);
}

void pmc_rowmap_free(pmc_rowmap *m)
{
    free(m->keys);
    free(m->vals);
    *m = (pmc_rowmap){0};
}

static int64_t *place(pmc_rowmap *m, int64_t key, int64_t val)
{
    size_t mask = m->cap - 1;
    size_t i = pmc_rowmap_slot(key, mask);
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
    int rc = alloc_hashed(m, old.cap * 2);
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
    if (m->dense) {
        m->len += m->vals[key] == PMC_ROWMAP_ABSENT;
        m->vals[key] = val;
        if (slot)
            *slot = &m->vals[key];
        return PMC_CACHESIM_OK;
    }
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
    if (m->dense) {
        if (m->vals[key] == PMC_ROWMAP_ABSENT)
            return 0;
        m->vals[key] = PMC_ROWMAP_ABSENT;
        m->len--;
        return 1;
    }
    size_t mask = m->cap - 1;
    size_t i = pmc_rowmap_slot(key, mask);
    while (m->keys[i] != key) {
        if (m->keys[i] == FREE_KEY)
            return 0;
        i = (i + 1) & mask;
    }
    /* Pull later entries of the probe run back over the hole, so lookups
     * never stop early at it. */
    for (size_t j = (i + 1) & mask; m->keys[j] != FREE_KEY; j = (j + 1) & mask) {
        size_t home = pmc_rowmap_slot(m->keys[j], mask);
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

int pmc_rowmap_halve(pmc_rowmap *m)
{
    /* Halving a dense map would walk every row of the id space, where the hashed one walks only
     * the keys present: counts that age stay hashed. */
    if (m->dense)
        return PMC_CACHESIM_EINVAL;
    /* Rebuilt: deleting while walking a probed table would move entries under the walk. */
    pmc_rowmap halved;
    int rc = pmc_rowmap_init(&halved, m->len / 2 + 1, 0);
    for (size_t i = 0; rc == PMC_CACHESIM_OK && i < m->cap; i++)
        if (m->keys[i] != FREE_KEY && m->vals[i] > 1)
            rc = pmc_rowmap_put(&halved, m->keys[i], m->vals[i] >> 1, NULL);
    if (rc != PMC_CACHESIM_OK) {
        pmc_rowmap_free(&halved);
        return rc;
    }
    pmc_rowmap_free(m);
    *m = halved;
    return PMC_CACHESIM_OK;
}

/* Building blocks of the cache shadows: a row map, ordered row lists, an
 * indexed heap, Python's Mersenne Twister, and the per-policy entry points. */
#ifndef PMC_CACHESIM_INTERNAL_H
#define PMC_CACHESIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pymcoll_cachesim.h"

/* Row -> value. Two layouts: dense, when the rows are known to lie below
 * `rows` (vals[row], PMC_ROWMAP_ABSENT where none: one load a lookup), and
 * hashed otherwise (open addressing, linear probing, backward-shift
 * deletion: no tombstones, so a long replay never slows down; -1 marks a
 * free key). Values are never PMC_ROWMAP_ABSENT. Pointers returned by find
 * are valid until the next put. */
#define PMC_ROWMAP_ABSENT INT64_MIN

typedef struct {
    int64_t *keys; /* hashed layout only */
    int64_t *vals;
    size_t cap;    /* hashed: a power of two; dense: rows */
    size_t len;
    int dense;
} pmc_rowmap;

/* rows > 0: the dense layout for keys 0..rows-1; else hashed, sized for `hint` keys. */
int pmc_rowmap_init(pmc_rowmap *m, size_t hint, int64_t rows);
void pmc_rowmap_free(pmc_rowmap *m);
/* Sets key -> val (inserting or overwriting); *slot (may be NULL) gets the value's place. */
int pmc_rowmap_put(pmc_rowmap *m, int64_t key, int64_t val, int64_t **slot);
/* 1 when key was there (and is gone), else 0. */
int pmc_rowmap_del(pmc_rowmap *m, int64_t key);
/* Every value halved (an arithmetic shift), the keys whose value was at most 1 removed; hashed
 * maps only (PMC_CACHESIM_EINVAL for a dense one). */
int pmc_rowmap_halve(pmc_rowmap *m);

size_t pmc_rowmap_slot(int64_t key, size_t mask);

static inline int64_t *pmc_rowmap_find(const pmc_rowmap *m, int64_t key)
{
    if (m->dense)
        return m->vals[key] != PMC_ROWMAP_ABSENT ? &m->vals[key] : NULL;
    size_t mask = m->cap - 1;
    for (size_t i = pmc_rowmap_slot(key, mask);; i = (i + 1) & mask) {
        if (m->keys[i] == key)
            return &m->vals[i];
        if (m->keys[i] == -1)
            return NULL;
    }
}

/* Asks the memory for key's entry ahead of its lookup. */
static inline void pmc_rowmap_prefetch(const pmc_rowmap *m, int64_t key)
{
    if (m->dense) {
        __builtin_prefetch(&m->vals[key]);
        return;
    }
    size_t i = pmc_rowmap_slot(key, m->cap - 1);
    __builtin_prefetch(&m->keys[i]);
    __builtin_prefetch(&m->vals[i]);
}

/* Rows in insertion order with a value each, as Python's OrderedDict:
 * append at the end, move to the end, remove any, first is the oldest.
 * Nodes live in a pool and keep their index while they are in the list. */
typedef struct {
    int64_t row, val, prev, next; /* together: moving a node touches one cache line of it */
} pmc_list_node;

typedef struct {
    pmc_rowmap index; /* row -> node */
    pmc_list_node *nodes;
    int64_t head, tail, free_head;
    size_t len, pool;
} pmc_rowlist;

/* `rows` as for pmc_rowmap_init. */
int pmc_rowlist_init(pmc_rowlist *l, size_t hint, int64_t rows);
void pmc_rowlist_free(pmc_rowlist *l);
/* The node of `row`, or -1. */
static inline int64_t pmc_rowlist_find(const pmc_rowlist *l, int64_t row)
{
    const int64_t *node = pmc_rowmap_find(&l->index, row);
    return node ? *node : -1;
}
/* The first stage of a prefetch ahead of a lookup of `row`: stage 0 asks
 * for its index entry (NULL back); a later stage, once that entry is in
 * the cache, gets the node it names (NULL: none). */
static inline const int64_t *pmc_prefetch_index(const pmc_rowmap *index, int64_t row, int stage)
{
    if (stage == 0) {
        pmc_rowmap_prefetch(index, row);
        return NULL;
    }
    return pmc_rowmap_find(index, row);
}

/* Prefetch for a lookup of `row` ahead: stage 0 its index entry, stage 1
 * its node, stage 2 (later still) the neighbours that moving the node relinks. */
static inline void pmc_rowlist_prefetch(const pmc_rowlist *l, int64_t row, int stage)
{
    const int64_t *node = pmc_prefetch_index(&l->index, row, stage);
    if (!node)
        return;
    const pmc_list_node *x = &l->nodes[*node];
    if (stage == 1) {
        __builtin_prefetch(x, 1);
        return;
    }
    if (x->prev >= 0)
        __builtin_prefetch(&l->nodes[x->prev], 1);
    if (x->next >= 0)
        __builtin_prefetch(&l->nodes[x->next], 1);
}
/* Appends `row` (not in the list). */
int pmc_rowlist_append(pmc_rowlist *l, int64_t row, int64_t val);
void pmc_rowlist_to_end(pmc_rowlist *l, int64_t node);
void pmc_rowlist_remove(pmc_rowlist *l, int64_t node);

/* Rows ordered by a key (a double, then an integer; unique per row), the
 * smallest on top; a row's key can change in place. The keys sit in the
 * heap's entries, so a sift compares neighbouring memory. */
typedef struct {
    double a;
    int64_t b;
    int64_t node;
} pmc_heap_entry;

typedef struct {
    pmc_rowmap index; /* row -> node */
    pmc_heap_entry *heap;
    int64_t *row, *pos; /* per node; free nodes are chained through pos */
    int64_t free_head;
    size_t len, pool;
} pmc_rowheap;

/* `rows` as for pmc_rowmap_init. */
int pmc_rowheap_init(pmc_rowheap *h, size_t hint, int64_t rows);
void pmc_rowheap_free(pmc_rowheap *h);
/* Sets the key of `row`, adding it when absent. */
int pmc_rowheap_set(pmc_rowheap *h, int64_t row, double a, int64_t b);
/* The row of smallest key (-1 when empty). */
int64_t pmc_rowheap_top(const pmc_rowheap *h);
/* 1 when `row` was held (and is gone), else 0. */
int pmc_rowheap_remove(pmc_rowheap *h, int64_t row);
/* As pmc_rowlist_prefetch: stage 1 asks for the node's heap position, stage 2 for its heap entry. */
static inline void pmc_rowheap_prefetch(const pmc_rowheap *h, int64_t row, int stage)
{
    const int64_t *node = pmc_prefetch_index(&h->index, row, stage);
    if (!node)
        return;
    if (stage == 1)
        __builtin_prefetch(&h->pos[*node], 1);
    else
        __builtin_prefetch(&h->heap[h->pos[*node]], 1);
}

/* The LFU order: held rows by (lookups since the start, last lookup);
 * counts are kept for every row ever looked up. */
typedef struct {
    pmc_rowheap held;
    pmc_rowmap counts;
} pmc_lfu_order;

int pmc_lfu_order_init(pmc_lfu_order *o, size_t capacity, int64_t rows);
void pmc_lfu_order_free(pmc_lfu_order *o);
/* A lookup of `row` at `t`: its count grows by one; it is held from now on. */
int pmc_lfu_order_touch(pmc_lfu_order *o, int64_t row, int64_t t);

/* MT19937 with CPython's seeding (init_by_array over the seed's 32-bit
 * words) and its random(): the same doubles as random.Random(seed). */
typedef struct {
    uint32_t mt[624];
    int mti;
} pmc_mt19937;

void pmc_mt_seed(pmc_mt19937 *g, const uint32_t *key, size_t len);
double pmc_mt_random(pmc_mt19937 *g);

/* The most rows a shadow or the features accept, as capacity or bound:
 * far beyond any memory, and small enough that no size computed from it
 * overflows. */
#define PMC_CACHESIM_MAX_ROWS ((int64_t)1 << 40)

/* Writes the formatted message into msg (when given) and returns status. */
__attribute__((format(printf, 4, 5))) int pmc_cachesim_fail(int status, char *msg, size_t msg_len,
                                                            const char *fmt, ...);

/* A policy: its state and how it serves one lookup. */
typedef struct pmc_shadow_ops pmc_shadow_ops;

struct pmc_shadow {
    const pmc_shadow_ops *ops;
    pmc_shadow_config config;
    void *state;
};

struct pmc_shadow_ops {
    int (*init)(pmc_shadow *s);
    void (*destroy)(pmc_shadow *s);
    /* One lookup of `row` at `t`; `rank` is the PRIORITY kind's t + offset. */
    int (*access)(pmc_shadow *s, int64_t row, int64_t t, double rank, uint8_t *hit, int64_t *evicted);
    int (*holds)(const pmc_shadow *s, int64_t row);
    uint64_t (*len)(const pmc_shadow *s);
    /* Prefetches what a lookup of `row` reads: stage 0 the index entries,
     * stage 1 (fewer lookups ahead, the entries then cached) the nodes they
     * name, stage 2 (fewer still) what the nodes link to. A batch asks some lookups ahead, so that the cache misses of
     * many lookups overlap instead of coming one after another. */
    void (*prefetch)(const pmc_shadow *s, int64_t row, int stage);
};

extern const pmc_shadow_ops pmc_shadow_lru_ops;
extern const pmc_shadow_ops pmc_shadow_lfu_ops;
extern const pmc_shadow_ops pmc_shadow_arc_ops;
extern const pmc_shadow_ops pmc_shadow_lecar_ops;
extern const pmc_shadow_ops pmc_shadow_tinylfu_ops;
extern const pmc_shadow_ops pmc_shadow_priority_ops;

#endif

/* The tiered cache's C engine without Python: the row map, the indexed heap and the
 * ordered lists against brute-force models under random operations;
 * CPython's random() sequence for known seeds; the invariants of every
 * policy on random streams (a hit is a row held before, an evicted row was
 * held and is gone, never more rows than the capacity); hand-checked LRU
 * and ARC sequences; bad arguments rejected with the shadow unchanged; the
 * features at hand-computed values; the perceptron against a plain loop.
 * Exact agreement with the Python references is tested from Python.
 *
 * PMC_TEST_QUICK=1: shorter streams (valgrind). */
#include <math.h>

#include "cachesim/cachesim_internal.h"
#include "testutil.h"

static int g_quick;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

enum { KEYS = 3000 };

static void check_rowmap(int64_t rows) {
    pmc_rowmap m;
    CHECK(pmc_rowmap_init(&m, 4, rows) == PMC_CACHESIM_OK, "init");
    static int64_t model[KEYS];
    for (int i = 0; i < KEYS; i++) model[i] = -1;
    size_t present = 0;
    int steps = g_quick ? 20000 : 200000;
    for (int s = 0; s < steps; s++) {
        int64_t k = (int64_t)(next_u64() % KEYS);
        int op = (int)(next_u64() % 3);
        if (op == 0) {
            int64_t v = (int64_t)(next_u64() % 1000);
            CHECK(pmc_rowmap_put(&m, k, v, NULL) == PMC_CACHESIM_OK, "put");
            present += model[k] < 0;
            model[k] = v;
        } else if (op == 1) {
            int gone = pmc_rowmap_del(&m, k);
            CHECK(gone == (model[k] >= 0), "del %lld: %d", (long long)k, gone);
            present -= model[k] >= 0;
            model[k] = -1;
        }
        int64_t *v = pmc_rowmap_find(&m, k);
        CHECK((v != NULL) == (model[k] >= 0) && (!v || *v == model[k]), "find %lld", (long long)k);
    }
    CHECK(m.len == present, "len %zu, model %zu", m.len, present);
    for (int64_t k = 0; k < KEYS; k++) {
        int64_t *v = pmc_rowmap_find(&m, k);
        CHECK((v != NULL) == (model[k] >= 0), "final find %lld", (long long)k);
    }
    if (m.dense) { /* halving is for hashed maps only */
        CHECK(pmc_rowmap_halve(&m) == PMC_CACHESIM_EINVAL, "halve refuses a dense map");
        pmc_rowmap_free(&m);
        return;
    }
    /* Halving: values > 1 halved, the others gone. */
    CHECK(pmc_rowmap_halve(&m) == PMC_CACHESIM_OK, "halve");
    present = 0;
    for (int64_t k = 0; k < KEYS; k++) {
        int64_t want = model[k] > 1 ? model[k] >> 1 : -1;
        int64_t *v = pmc_rowmap_find(&m, k);
        CHECK((v != NULL) == (want >= 0) && (!v || *v == want), "halved %lld", (long long)k);
        present += want >= 0;
    }
    CHECK(m.len == present, "len after halving %zu, model %zu", m.len, present);
    pmc_rowmap_free(&m);
}

static void check_rowheap(int64_t rows) {
    pmc_rowheap h;
    CHECK(pmc_rowheap_init(&h, 2, rows) == PMC_CACHESIM_OK, "init");
    static double ka[KEYS];
    static int64_t kb[KEYS];
    static int in[KEYS];
    memset(in, 0, sizeof in);
    int steps = g_quick ? 20000 : 200000;
    for (int s = 0; s < steps; s++) {
        int64_t r = (int64_t)(next_u64() % KEYS);
        if (next_u64() % 3) {
            ka[r] = (double)(next_u64() % 50);
            kb[r] = s; /* unique */
            in[r] = 1;
            CHECK(pmc_rowheap_set(&h, r, ka[r], kb[r]) == PMC_CACHESIM_OK, "set");
        } else {
            CHECK(pmc_rowheap_remove(&h, r) == in[r], "remove %lld", (long long)r);
            in[r] = 0;
        }
        if (s % 97 == 0) {
            int64_t best = -1;
            for (int64_t i = 0; i < KEYS; i++)
                if (in[i] && (best < 0 || ka[i] < ka[best] || (ka[i] == ka[best] && kb[i] < kb[best]))) best = i;
            CHECK(pmc_rowheap_top(&h) == best, "top %lld, model %lld", (long long)pmc_rowheap_top(&h),
                  (long long)best);
        }
    }
    pmc_rowheap_free(&h);
}

static void check_rowlist(void) {
    pmc_rowlist l;
    CHECK(pmc_rowlist_init(&l, 1, 0) == PMC_CACHESIM_OK, "init");
    for (int64_t r = 0; r < 40; r++) CHECK(pmc_rowlist_append(&l, r, r * 10) == PMC_CACHESIM_OK, "append");
    pmc_rowlist_to_end(&l, pmc_rowlist_find(&l, 0));
    pmc_rowlist_remove(&l, pmc_rowlist_find(&l, 1));
    pmc_rowlist_remove(&l, pmc_rowlist_find(&l, 39)); /* the tail before the move: now second to last */
    CHECK(l.len == 38, "len %zu", l.len);
    CHECK(l.nodes[l.head].row == 2 && l.nodes[l.tail].row == 0, "head %lld tail %lld", (long long)l.nodes[l.head].row,
          (long long)l.nodes[l.tail].row);
    int64_t expect = 2, n = 0;
    for (int64_t node = l.head; node >= 0; node = l.nodes[node].next, n++) {
        int64_t want = n == 37 ? 0 : expect++;
        CHECK(l.nodes[node].row == want && l.nodes[node].val == want * 10, "position %lld holds %lld", (long long)n,
              (long long)l.nodes[node].row);
    }
    CHECK(pmc_rowlist_find(&l, 1) < 0 && pmc_rowlist_find(&l, 39) < 0, "removed rows are gone");
    pmc_rowlist_free(&l);
}

static void check_random(void) {
    /* random.Random(0).random() x 3 and random.Random(42).random() in CPython. */
    pmc_mt19937 g;
    uint32_t zero = 0, answer = 42;
    pmc_mt_seed(&g, &zero, 1);
    const double want0[3] = {0.8444218515250481, 0.7579544029403025, 0.420571580830845};
    for (int i = 0; i < 3; i++) {
        double x = pmc_mt_random(&g);
        CHECK(x == want0[i], "seed 0 draw %d: %.17g, want %.17g", i, x, want0[i]);
    }
    pmc_mt_seed(&g, &answer, 1);
    double x = pmc_mt_random(&g);
    CHECK(x == 0.6394267984578837, "seed 42: %.17g", x);
}

static pmc_shadow *make_rows(int kind, int64_t capacity, int64_t rows) {
    pmc_shadow_config c = {.kind = kind, .capacity = capacity, .rows = rows, .learning_rate = 0.45, .seed_len = 1,
                           .window_rows = capacity > 100 ? capacity / 100 : 1, .sample = 10 * capacity};
    c.discount = pow(0.005, 1.0 / (double)capacity);
    pmc_shadow *s = NULL;
    char msg[PMC_CACHESIM_MESSAGE_BYTES] = "";
    int rc = pmc_shadow_new(&c, &s, msg, sizeof msg);
    CHECK(rc == PMC_CACHESIM_OK && s, "new kind %d capacity %lld: %s", kind, (long long)capacity, msg);
    return s;
}

static pmc_shadow *make(int kind, int64_t capacity) { return make_rows(kind, capacity, 0); }

/* Runs one lookup at a time, checking each against the shadow's own contents before it. */
static void check_invariants(int kind, int64_t capacity, int universe, int lookups, int dense) {
    pmc_shadow *s = make_rows(kind, capacity, dense ? universe : 0);
    if (!s) return;
    char msg[PMC_CACHESIM_MESSAGE_BYTES];
    for (int t = 0; t < lookups; t++) {
        /* Skewed ids: half from a hot tenth of the universe. */
        int64_t row = (int64_t)(next_u64() % (uint64_t)((next_u64() & 1) ? universe : universe / 10 + 1));
        double offset = -(double)(next_u64() % 1000);
        int held_before = pmc_shadow_holds(s, row);
        uint64_t len_before = pmc_shadow_len(s);
        uint8_t hit = 2;
        int64_t ev = -2;
        int rc = pmc_shadow_run(s, &row, 1, t, &offset, &hit, &ev, msg, sizeof msg);
        CHECK(rc == PMC_CACHESIM_OK, "run: %s", msg);
        CHECK(hit == held_before, "kind %d t %d: hit %d, held before %d", kind, t, hit, held_before);
        CHECK(pmc_shadow_holds(s, row), "kind %d t %d: row %lld not held after its lookup", kind, t,
              (long long)row);
        CHECK(pmc_shadow_len(s) <= (uint64_t)capacity, "kind %d: %llu rows held", kind,
              (unsigned long long)pmc_shadow_len(s));
        if (hit) CHECK(ev == -1 && pmc_shadow_len(s) == len_before, "kind %d t %d: a hit evicted", kind, t);
        if (!hit && len_before < (uint64_t)capacity)
            CHECK(ev == -1, "kind %d t %d: evicted %lld while not full", kind, t, (long long)ev);
        if (!hit && len_before == (uint64_t)capacity)
            CHECK(ev >= 0 && ev != row && !pmc_shadow_holds(s, ev), "kind %d t %d: evicted %lld", kind, t,
                  (long long)ev);
        if (t_failures > 20) break;
    }
    pmc_shadow_free(s);
}

static void check_lru_sequence(void) {
    pmc_shadow *s = make(PMC_SHADOW_LRU, 2);
    if (!s) return;
    const int64_t ids[6] = {1, 2, 1, 3, 2, 1};
    uint8_t hits[6];
    int64_t ev[6];
    CHECK(pmc_shadow_run(s, ids, 6, 0, NULL, hits, ev, NULL, 0) == PMC_CACHESIM_OK, "run");
    const uint8_t want_hits[6] = {0, 0, 1, 0, 0, 0};
    const int64_t want_ev[6] = {-1, -1, -1, 2, 1, 3};
    for (int k = 0; k < 6; k++)
        CHECK(hits[k] == want_hits[k] && ev[k] == want_ev[k], "lookup %d: hit %d evicted %lld", k, hits[k],
              (long long)ev[k]);
    pmc_shadow_free(s);
}

static void check_arc_sequence(void) {
    /* Capacity 2: 1 and 2 fill T1; 1 again moves to T2; 3 evicts T1's 2 into B1 (|T1| = 1 > p = 0);
     * 2 again is a ghost hit: p grows to 1, and T1 (|T1| = 1, not > p) keeps 3 while T2's 1 goes to
     * B2; the rest as the Python reference replays it. */
    pmc_shadow *s = make(PMC_SHADOW_ARC, 2);
    if (!s) return;
    const int64_t ids[10] = {1, 2, 1, 3, 2, 3, 1, 2, 4, 1};
    uint8_t hits[10];
    int64_t ev[10];
    CHECK(pmc_shadow_run(s, ids, 10, 0, NULL, hits, ev, NULL, 0) == PMC_CACHESIM_OK, "run");
    const uint8_t want_hits[10] = {0, 0, 1, 0, 0, 1, 0, 0, 0, 0};
    const int64_t want_ev[10] = {-1, -1, -1, 2, 1, -1, 2, 3, 1, 4};
    for (int k = 0; k < 10; k++)
        CHECK(hits[k] == want_hits[k] && ev[k] == want_ev[k], "lookup %d: hit %d evicted %lld", k, hits[k],
              (long long)ev[k]);
    CHECK(pmc_shadow_holds(s, 1) && pmc_shadow_holds(s, 2) && pmc_shadow_len(s) == 2, "contents");
    pmc_shadow_free(s);
}

static void check_bad_arguments(void) {
    char msg[PMC_CACHESIM_MESSAGE_BYTES];
    pmc_shadow *s = (pmc_shadow *)&msg; /* must be reset to NULL on failure */
    pmc_shadow_config c = {.kind = PMC_SHADOW_KINDS, .capacity = 4};
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && !s, "bad kind");
    CHECK(strstr(msg, "kind") != NULL, "message: %s", msg);
    c.kind = PMC_SHADOW_LRU;
    c.capacity = 0;
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "capacity"), "capacity");
    c.capacity = INT64_MAX; /* no size computed from it may overflow: refused */
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "capacity"), "huge");
    c = (pmc_shadow_config){.kind = PMC_SHADOW_LECAR, .capacity = 4, .learning_rate = 0.45, .discount = 0.5};
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "seed_len"), "seed");
    c = (pmc_shadow_config){.kind = PMC_SHADOW_TINYLFU, .capacity = 4, .window_rows = 5, .sample = 1};
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "window_rows"), "window");
    CHECK(pmc_shadow_new(NULL, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL, "NULL config");
    c = (pmc_shadow_config){.kind = PMC_SHADOW_LRU, .capacity = 4, .rows = -2};
    CHECK(pmc_shadow_new(&c, &s, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "rows"), "rows < 0");

    s = make(PMC_SHADOW_LRU, 3);
    if (!s) return;
    int64_t ids[3] = {5, -7, 6};
    uint8_t hits[3];
    int64_t ev[3];
    CHECK(pmc_shadow_run(s, ids, 3, 0, NULL, hits, ev, msg, sizeof msg) == PMC_CACHESIM_EINVAL, "negative row");
    CHECK(strstr(msg, "ids[1]") != NULL, "message: %s", msg);
    CHECK(pmc_shadow_len(s) == 0 && !pmc_shadow_holds(s, 5), "a rejected batch changed the shadow");
    CHECK(pmc_shadow_run(s, ids, 1, -1, NULL, hits, ev, msg, sizeof msg) == PMC_CACHESIM_EINVAL, "t0 < 0");
    pmc_shadow_free(s);
    s = make_rows(PMC_SHADOW_ARC, 3, 6);
    if (!s) return;
    ids[1] = 6; /* one past the bound */
    CHECK(pmc_shadow_run(s, ids, 3, 0, NULL, hits, ev, msg, sizeof msg) == PMC_CACHESIM_EINVAL &&
              strstr(msg, "[0, 6)"), "row beyond rows: %s", msg);
    CHECK(pmc_shadow_len(s) == 0 && !pmc_shadow_holds(s, 1000), "bounded shadow after a rejected batch");
    pmc_shadow_free(s);
    s = make(PMC_SHADOW_PRIORITY, 3);
    if (!s) return;
    CHECK(pmc_shadow_run(s, ids, 1, 0, NULL, hits, ev, msg, sizeof msg) == PMC_CACHESIM_EINVAL &&
              strstr(msg, "offsets"), "priority without offsets");
    pmc_shadow_free(s);
    pmc_shadow_free(NULL);
    CHECK(strcmp(pmc_cachesim_strerror(PMC_CACHESIM_ENOMEM), "out of memory") == 0, "strerror");
}

static void check_features(void) {
    /* Row 3 at 0, 1 and 3, row 4 at 2 and 4 (two batches): the hand-computed values. */
    const double scales[2] = {64.0, 1000.0}, sentinel = 50.0;
    pmc_features *f = NULL;
    char msg[PMC_CACHESIM_MESSAGE_BYTES];
    CHECK(pmc_features_new(5, scales, 2, sentinel, &f, msg, sizeof msg) == PMC_CACHESIM_OK, "new: %s", msg);
    if (!f) return;
    const int64_t a[3] = {3, 3, 4}, b[2] = {3, 4};
    float fa[3 * 7], fb[2 * 7];
    CHECK(pmc_features_batch(f, a, 3, 0, fa, msg, sizeof msg) == PMC_CACHESIM_OK, "batch a: %s", msg);
    CHECK(pmc_features_batch(f, b, 2, 3, fb, msg, sizeof msg) == PMC_CACHESIM_OK, "batch b: %s", msg);
    const double want_a[3][7] = {
        {log(1.0 / 1.0), sentinel, sentinel, 1, log1p(2), 0, 0},
        {log(2.0 / 2.0), log1p(1), sentinel, 0, log1p(2), log1p(exp(-1 / 64.0)), log1p(exp(-1 / 1000.0))},
        {log(1.0 / 3.0), sentinel, sentinel, 1, log1p(1), 0, 0},
    };
    const double want_b[2][7] = {
        /* row 3 at t=3: gaps 2 and 1; decayed: exp(-2/tau) + exp(-3/tau) */
        {log(3.0 / 4.0), log1p(2), log1p(1), 0, log1p(1), log1p(exp(-2 / 64.0) + exp(-3 / 64.0)),
         log1p(exp(-2 / 1000.0) + exp(-3 / 1000.0))},
        /* row 4 at t=4: gap 2, no gap before it */
        {log(2.0 / 5.0), log1p(2), sentinel, 0, log1p(1), log1p(exp(-2 / 64.0)), log1p(exp(-2 / 1000.0))},
    };
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 7; j++)
            CHECK(fabs(fa[i * 7 + j] - want_a[i][j]) <= 1e-6 * (1 + fabs(want_a[i][j])), "a[%d][%d] = %g, want %g",
                  i, j, fa[i * 7 + j], want_a[i][j]);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 7; j++)
            CHECK(fabs(fb[i * 7 + j] - want_b[i][j]) <= 1e-6 * (1 + fabs(want_b[i][j])), "b[%d][%d] = %g, want %g",
                  i, j, fb[i * 7 + j], want_b[i][j]);
    const int64_t bad[2] = {1, 5};
    CHECK(pmc_features_batch(f, bad, 2, 5, fb, msg, sizeof msg) == PMC_CACHESIM_EINVAL && strstr(msg, "[0, 5)"),
          "row out of range: %s", msg);
    /* Nothing changed: row 1's first lookup is still its first. */
    CHECK(pmc_features_batch(f, bad, 1, 5, fb, msg, sizeof msg) == PMC_CACHESIM_OK && fb[3] == 1.0f, "after reject");
    pmc_features_free(f);
    CHECK(pmc_features_new(0, scales, 2, sentinel, &f, msg, sizeof msg) == PMC_CACHESIM_EINVAL && !f, "rows 0");
    const double bad_scale = -1.0;
    CHECK(pmc_features_new(4, &bad_scale, 1, sentinel, &f, msg, sizeof msg) == PMC_CACHESIM_EINVAL, "scale < 0");
}

static void check_mlp(void) {
    /* Odd widths (not whole groups) and row counts (not whole blocks) against a plain loop in double. */
    const uint32_t shapes[][4] = {{5, 7, 3, 1}, {13, 16, 8, 1}, {1, 1, 1, 1}};
    char msg[PMC_CACHESIM_MESSAGE_BYTES];
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const uint32_t *sz = shapes[s];
        size_t np = 0;
        for (int l = 0; l < 3; l++) np += (size_t)sz[l] * sz[l + 1] + sz[l + 1];
        float params[13 * 16 + 16 + 16 * 8 + 8 + 8 + 1], mean[13], scale[13], x[21 * 13], out[21];
        for (size_t i = 0; i < np; i++) params[i] = (float)((double)(next_u64() % 2001) / 1000.0 - 1.0);
        for (uint32_t j = 0; j < sz[0]; j++) {
            mean[j] = 0.25f * (float)j;
            scale[j] = 1.0f / (1.0f + (float)j);
        }
        for (size_t i = 0; i < 21 * sz[0]; i++) x[i] = (float)((double)(next_u64() % 4001) / 100.0 - 20.0);
        CHECK(pmc_mlp_predict(x, 21, 3, sz, params, mean, scale, out, msg, sizeof msg) == PMC_CACHESIM_OK, "%s", msg);
        for (int i = 0; i < 21; i++) {
            double a[16], z[16];
            for (uint32_t j = 0; j < sz[0]; j++) a[j] = ((double)x[i * sz[0] + j] - mean[j]) * scale[j];
            const float *p = params;
            for (int l = 0; l < 3; l++) {
                for (uint32_t j = 0; j < sz[l + 1]; j++) {
                    z[j] = p[(size_t)sz[l] * sz[l + 1] + j];
                    for (uint32_t k = 0; k < sz[l]; k++) z[j] += a[k] * p[(size_t)k * sz[l + 1] + j];
                }
                for (uint32_t j = 0; j < sz[l + 1]; j++) a[j] = (l < 2 && z[j] < 0) ? 0 : z[j];
                p += (size_t)sz[l] * sz[l + 1] + sz[l + 1];
            }
            double logit = a[0] < -30 ? -30 : (a[0] > 30 ? 30 : a[0]);
            double want = 1.0 / (1.0 + exp(-logit));
            CHECK(fabs(out[i] - want) <= 1e-4 * want + 1e-6, "shape %zu row %d: %g, want %g", s, i, out[i], want);
        }
    }
    const uint32_t wide_out[3] = {2, 2, 2};
    float p[16] = {0}, m[2] = {0}, sc[2] = {1, 1}, xx[2] = {0}, o[1];
    CHECK(pmc_mlp_predict(xx, 1, 2, wide_out, p, m, sc, o, msg, sizeof msg) == PMC_CACHESIM_EINVAL &&
              strstr(msg, "width 1"), "last width: %s", msg);
    CHECK(pmc_mlp_predict(xx, 1, 0, wide_out, p, m, sc, o, msg, sizeof msg) == PMC_CACHESIM_EINVAL, "no layers");
}

int main(void) {
    const char *q = getenv("PMC_TEST_QUICK");
    g_quick = q != NULL && q[0] != '\0' && strcmp(q, "0") != 0;
    check_rowmap(0);
    check_rowmap(KEYS);
    check_rowheap(0);
    check_rowheap(KEYS);
    check_rowlist();
    check_random();
    check_lru_sequence();
    check_arc_sequence();
    check_bad_arguments();
    check_features();
    check_mlp();
    const int64_t capacities[] = {1, 2, 7, 64, 300};
    int lookups = g_quick ? 3000 : 30000;
    for (int kind = 0; kind < PMC_SHADOW_KINDS; kind++)
        for (size_t c = 0; c < sizeof capacities / sizeof *capacities; c++)
            for (int dense = 0; dense < 2; dense++)
                check_invariants(kind, capacities[c], (int)(capacities[c] * 5 + 3), lookups, dense);
    printf("cachesim: maps, heaps, lists, random(), %d policies, features, perceptron: %s\n", PMC_SHADOW_KINDS,
           t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}

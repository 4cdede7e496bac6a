/* The preload library's options: the same PYMCOLL_* variables, meanings and
 * rules as the Python package (pymcoll/config.py): an empty value is unset,
 * the environment wins over the PYMCOLL_TUNING file, the file over the
 * defaults. A bad value is an error naming the variable, never a guess. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pmpi.h"

#define LINE_MAX_CHARS 1024
#define TUNING_MAX 64

/* Settings read from the PYMCOLL_TUNING file. */
typedef struct tuning {
    int n;
    char name[TUNING_MAX][64];
    char value[TUNING_MAX][256];
} tuning;

/* Names the collectives have in PYMCOLL_<NAME>_ALGORITHM (PMC_COLL_* order). */
static const char *const coll_env[PMC_COLL_COUNT - 1] = {
    "BARRIER", "BCAST", "ALLGATHER", "ALLREDUCE", "REDUCE", "GATHER", "GATHERV", "SCATTER", "SCATTERV",
    "ALLGATHERV", "ALLTOALL", "ALLTOALLV", "REDUCE_SCATTER_BLOCK", "REDUCE_SCATTER", "SCAN", "EXSCAN"};

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return 1;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t k = 0;
    while (isspace((unsigned char)s[k])) ++k;
    if (k) memmove(s, s + k, n - k + 1);
}

/* The variable's text (environment, then the tuning file), or NULL when unset. */
static const char *raw(const tuning *t, const char *name)
{
    const char *v = getenv(name);
    if (v != NULL) {
        while (isspace((unsigned char)*v)) ++v;
        if (*v) return v;
    }
    for (int i = 0; i < t->n; ++i)
        if (strcmp(t->name[i], name) == 0 && t->value[i][0]) return t->value[i];
    return NULL;
}

static int known_name(const char *name)
{
    static const char *const names[] = {
        "PYMCOLL_TIMEOUT", "PYMCOLL_NODE_SIZE", "PYMCOLL_NODE_LAYOUT", "PYMCOLL_LANES", "PYMCOLL_CHECK",
        "PYMCOLL_PROGRESS_THREAD", "PYMCOLL_SHM", "PYMCOLL_SHM_SIZE", "PYMCOLL_HEAP_SIZE", "PYMCOLL_SHM_DIR",
        "PYMCOLL_CHUNK_SIZE", "PYMCOLL_COPY", "PYMCOLL_INLINE_MAX", "PYMCOLL_REDUCE_FLAT_MAX",
        "PYMCOLL_LANES_SMALL_MAX", "PYMCOLL_LANES_BCAST_TREE_MAX", "PYMCOLL_LANES_DIRECT_MIN", "PYMCOLL_CMA_MIN",
        "PYMCOLL_STREAM_MIN", "PYMCOLL_CELL_MOVSB_MIN", "PYMCOLL_PMPI_VERBOSE", "PYMCOLL_TRACE", "PYMCOLL_TRACE_RING", "PYMCOLL_TRACE_SIGNALS", "PYMCOLL_WAIT",
        "PYMCOLL_HUGE_PAGES",
        "PYMCOLL_PATH_TRIALS"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
        if (strcmp(names[i], name) == 0) return 1;
    char buf[96];
    for (int i = 0; i < PMC_COLL_COUNT - 1; ++i) {
        snprintf(buf, sizeof(buf), "PYMCOLL_%s_ALGORITHM", coll_env[i]);
        if (strcmp(buf, name) == 0) return 1;
    }
    return 0;
}

static int read_tuning(tuning *t, char *err, size_t errlen)
{
    t->n = 0;
    const char *path = getenv("PYMCOLL_TUNING");
    while (path != NULL && isspace((unsigned char)*path)) ++path;
    if (path == NULL || !*path) return 0;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return fail(err, errlen, "PYMCOLL_TUNING='%s': cannot read the tuning file (%s)", path, strerror(errno));
    char line[LINE_MAX_CHARS];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        ++lineno;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        trim(line);
        if (!line[0]) continue;
        char *eq = strchr(line, '=');
        if (eq) *eq = '\0';
        char name[LINE_MAX_CHARS];
        snprintf(name, sizeof(name), "%s", line);
        trim(name);
        if (eq == NULL || !known_name(name) || strlen(name) >= sizeof(t->name[0])) {
            rc = fail(err, errlen, "PYMCOLL_TUNING='%s' line %d: expected NAME=VALUE with a PYMCOLL_* setting "
                      "(see `python -m pymcoll info`), got '%s'", path, lineno, name);
        } else if (t->n == TUNING_MAX) {
            rc = fail(err, errlen, "PYMCOLL_TUNING='%s': more than %d settings", path, TUNING_MAX);
        } else {
            char *val = eq + 1;
            trim(val);
            const size_t vl = strlen(val);
            if (vl >= sizeof(t->value[0])) {
                rc = fail(err, errlen, "PYMCOLL_TUNING='%s' line %d: the value of %s is too long", path, lineno, name);
            } else {
                memcpy(t->name[t->n], name, strlen(name) + 1);
                memcpy(t->value[t->n], val, vl + 1);
                ++t->n;
            }
        }
    }
    fclose(f);
    return rc;
}

/* '4194304', '4M', '64k', '1GiB' -> bytes (powers of 1024), > 0. */
static int parse_bytes(const char *name, const char *text, uint64_t *out, char *err, size_t errlen)
{
    char s[128];
    snprintf(s, sizeof(s), "%s", text);
    trim(s);
    for (char *p = s; *p; ++p) *p = (char)tolower((unsigned char)*p);
    size_t n = strlen(s);
    if (n >= 2 && strcmp(s + n - 2, "ib") == 0) s[n -= 2] = '\0';
    if (n >= 1 && s[n - 1] == 'b') s[--n] = '\0';
    double unit = 1;
    if (n >= 1 && strchr("kmgt", s[n - 1])) {
        unit = s[n - 1] == 'k' ? 1024.0 : s[n - 1] == 'm' ? 1048576.0 : s[n - 1] == 'g' ? 1073741824.0 : 1099511627776.0;
        s[--n] = '\0';
    }
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (n == 0 || end == s || *end || errno)
        return fail(err, errlen, "%s='%s' is not a size; use bytes or a K/M/G suffix, e.g. 4M", name, text);
    if (!(v * unit >= 1.0) || v * unit > 1.8e19) return fail(err, errlen, "%s='%s' must be positive", name, text);
    *out = (uint64_t)(v * unit);
    return 0;
}

/* An integer >= low. */
static int parse_int_from(const char *name, const char *text, int low, int *out, char *err, size_t errlen)
{
    char *end = NULL;
    errno = 0;
    const long v = strtol(text, &end, 10);
    while (end && isspace((unsigned char)*end)) ++end;
    if (end == text || *end || errno || v > 1 << 30) return fail(err, errlen, "%s='%s' is not an integer", name, text);
    if (v < low) return fail(err, errlen, "%s='%s' must be >= %d", name, text, low);
    *out = (int)v;
    return 0;
}

static int parse_int(const char *name, const char *text, int *out, char *err, size_t errlen)
{
    return parse_int_from(name, text, 1, out, err, errlen);
}

/* Index of `text` (case-insensitive, trimmed) in `words`, or -1. */
static int word(const char *text, const char *const *words, int n)
{
    char s[64];
    snprintf(s, sizeof(s), "%s", text);
    trim(s);
    for (int i = 0; i < n; ++i)
        if (strcasecmp(s, words[i]) == 0) return i;
    return -1;
}

static int parse_flag(const char *name, const char *text, int *out, char *err, size_t errlen)
{
    static const char *const words[] = {"0", "off", "no", "false", "1", "on", "yes", "true"};
    const int i = word(text, words, 8);
    if (i < 0) return fail(err, errlen, "%s='%s': expected 1 or 0", name, text);
    *out = i >= 4;
    return 0;
}

/* PYMCOLL_TRACE, PYMCOLL_TRACE_RING, PYMCOLL_TRACE_SIGNALS. */
static int read_trace(pmpi_context *ctx, const tuning *t, char *err, size_t errlen)
{
    const char *v;
    int ring = (int)PMC_DEFAULT_TRACE_RING, signals = 1, rc = 0;
    if ((v = raw(t, "PYMCOLL_TRACE")) != NULL) {
        snprintf(ctx->trace_dir, sizeof(ctx->trace_dir), "%s", v);
        trim(ctx->trace_dir);
    }
    if ((v = raw(t, "PYMCOLL_TRACE_RING")) != NULL) rc = parse_int_from("PYMCOLL_TRACE_RING", v, 0, &ring, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_TRACE_SIGNALS")) != NULL)
        rc = parse_flag("PYMCOLL_TRACE_SIGNALS", v, &signals, err, errlen);
    ctx->trace.dir = ctx->trace_dir;
    ctx->trace.ring_records = (uint32_t)ring;
    ctx->trace.signals = signals;
    return rc;
}

/* A size from which something starts, or "auto" (0: the core's default) or "off" (UINT64_MAX). */
static int parse_auto_size(const tuning *t, const char *name, uint64_t *field, char *err, size_t errlen)
{
    const char *v = raw(t, name);
    if (v == NULL) return 0;
    char w[16];
    snprintf(w, sizeof(w), "%s", v);
    trim(w);
    for (char *p = w; *p; ++p) *p = (char)tolower((unsigned char)*p);
    if (strcmp(w, "off") == 0 || strcmp(w, "never") == 0 || strcmp(w, "0") == 0) *field = UINT64_MAX;
    else if (strcmp(w, "auto") == 0) *field = 0;
    else if (parse_bytes(name, v, field, err, errlen))
        return fail(err, errlen, "%s='%s' is neither a size (bytes or a K/M/G suffix, e.g. 8M), 'auto' nor 'off'",
                    name, v);
    return 0;
}

static int read_sizes(pmpi_context *ctx, const tuning *t, char *err, size_t errlen)
{
    struct { const char *name; uint64_t *field; } sizes[] = {
        {"PYMCOLL_SHM_SIZE", &ctx->cfg.shm_bytes}, {"PYMCOLL_HEAP_SIZE", &ctx->cfg.heap_bytes},
        {"PYMCOLL_CHUNK_SIZE", &ctx->cfg.chunk_bytes}, {"PYMCOLL_INLINE_MAX", &ctx->cfg.inline_max},
        {"PYMCOLL_REDUCE_FLAT_MAX", &ctx->cfg.flat_max}, {"PYMCOLL_LANES_SMALL_MAX", &ctx->cfg.lanes_small_max},
        {"PYMCOLL_LANES_BCAST_TREE_MAX", &ctx->cfg.lanes_bcast_tree_max},
        {"PYMCOLL_LANES_DIRECT_MIN", &ctx->cfg.lanes_direct_min}, {"PYMCOLL_CMA_MIN", &ctx->cfg.cma_min}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        const char *v = raw(t, sizes[i].name);
        if (v != NULL && parse_bytes(sizes[i].name, v, sizes[i].field, err, errlen)) return 1;
    }
    if (parse_auto_size(t, "PYMCOLL_STREAM_MIN", &ctx->cfg.stream_min, err, errlen) ||
        parse_auto_size(t, "PYMCOLL_CELL_MOVSB_MIN", &ctx->cfg.movsb_min, err, errlen))
        return 1;
    if (ctx->cfg.inline_max > 48)
        return fail(err, errlen, "PYMCOLL_INLINE_MAX='%s': an inline line carries at most 48 bytes",
                    raw(t, "PYMCOLL_INLINE_MAX"));
    return 0;
}

static int read_choices(pmpi_context *ctx, const tuning *t, char *err, size_t errlen)
{
    static const char *const layouts[] = {"block", "cyclic"};
    static const char *const shm[] = {"auto", "on", "1", "yes", "true", "off", "0", "no", "false"};
    static const char *const copies[] = {"auto", "inline", "cico", "cma", "direct"};
    static const char *const waits[] = {"auto", "sleep"};
    static const char *const huge[] = {"auto", "off"};
    static const char *const algos[] = {"auto", "shm", "mpi", "leader", "lanes"};
    const char *v;
    int i;
    if ((v = raw(t, "PYMCOLL_NODE_LAYOUT")) != NULL) {
        if ((i = word(v, layouts, 2)) < 0)
            return fail(err, errlen, "PYMCOLL_NODE_LAYOUT='%s': expected 'block' or 'cyclic'", v);
        ctx->cfg.node_cyclic = i;
    }
    if ((v = raw(t, "PYMCOLL_SHM")) != NULL) {
        if ((i = word(v, shm, 9)) < 0) return fail(err, errlen, "PYMCOLL_SHM='%s': expected 'auto' or 'off'", v);
        ctx->cfg.shm_mode = i >= 5 ? PMC_SHM_OFF : PMC_SHM_AUTO;
    }
    if ((v = raw(t, "PYMCOLL_WAIT")) != NULL) {
        if ((i = word(v, waits, 2)) < 0) return fail(err, errlen, "PYMCOLL_WAIT='%s': expected 'auto' or 'sleep'", v);
        ctx->cfg.wait_sleep = i;
    }
    if ((v = raw(t, "PYMCOLL_HUGE_PAGES")) != NULL) {
        if ((i = word(v, huge, 2)) < 0)
            return fail(err, errlen, "PYMCOLL_HUGE_PAGES='%s': expected 'auto' or 'off'", v);
        ctx->cfg.huge_off = i;
    }
    if ((v = raw(t, "PYMCOLL_COPY")) != NULL) {
        if ((i = word(v, copies, 5)) < 0)
            return fail(err, errlen, "PYMCOLL_COPY='%s': expected one of auto, inline, cico, cma, direct", v);
        ctx->cfg.copy = i; /* the words are in PMC_COPY_* order */
    }
    for (int c = 0; c < PMC_COLL_COUNT - 1; ++c) {
        char name[96];
        snprintf(name, sizeof(name), "PYMCOLL_%s_ALGORITHM", coll_env[c]);
        if ((v = raw(t, name)) == NULL) continue;
        if ((i = word(v, algos, 5)) < 0)
            return fail(err, errlen, "%s='%s': expected one of auto, shm, mpi, leader, lanes", name, v);
        ctx->cfg.algorithm[c] = i; /* PMC_ALGO_* order */
    }
    return 0;
}

int pmpi_config_read(pmpi_context *ctx, char *err, size_t errlen)
{
    tuning *t = calloc(1, sizeof(*t));
    if (t == NULL) return fail(err, errlen, "out of memory reading the PYMCOLL_* settings");
    int rc = read_tuning(t, err, errlen);
    pmc_config_defaults(&ctx->cfg);
    /* C applications cannot allocate from the shared heap (pymcoll.alloc is
     * Python's): keep it a token unless asked for. */
    ctx->cfg.heap_bytes = 64u << 10;
    const char *v;
    if (rc == 0 && (v = raw(t, "PYMCOLL_TIMEOUT")) != NULL) {
        char *end = NULL;
        errno = 0;
        ctx->cfg.timeout = strtod(v, &end);
        while (end && isspace((unsigned char)*end)) ++end;
        if (end == v || *end || errno)
            rc = fail(err, errlen, "PYMCOLL_TIMEOUT='%s' is not a number of seconds (0 = no deadline)", v);
        else if (ctx->cfg.timeout < 0)
            rc = fail(err, errlen, "PYMCOLL_TIMEOUT='%s' must be >= 0 (0 = no deadline)", v);
    }
    if (rc == 0 && (v = raw(t, "PYMCOLL_NODE_SIZE")) != NULL) rc = parse_int("PYMCOLL_NODE_SIZE", v, &ctx->cfg.node_size, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_LANES")) != NULL) rc = parse_int("PYMCOLL_LANES", v, &ctx->cfg.lanes, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_CHECK")) != NULL) rc = parse_flag("PYMCOLL_CHECK", v, &ctx->cfg.check, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_PROGRESS_THREAD")) != NULL)
        rc = parse_flag("PYMCOLL_PROGRESS_THREAD", v, &ctx->cfg.progress_thread, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_PATH_TRIALS")) != NULL) {
        int trials = 1;
        rc = parse_flag("PYMCOLL_PATH_TRIALS", v, &trials, err, errlen);
        ctx->cfg.fixed_paths = !trials;
    }
    if (rc == 0 && (v = raw(t, "PYMCOLL_PMPI_VERBOSE")) != NULL) rc = parse_flag("PYMCOLL_PMPI_VERBOSE", v, &ctx->verbose, err, errlen);
    if (rc == 0) rc = read_sizes(ctx, t, err, errlen);
    if (rc == 0) rc = read_choices(ctx, t, err, errlen);
    if (rc == 0) rc = read_trace(ctx, t, err, errlen);
    if (rc == 0 && (v = raw(t, "PYMCOLL_SHM_DIR")) != NULL) {
        snprintf(ctx->shm_dir, sizeof(ctx->shm_dir), "%s", v);
        trim(ctx->shm_dir);
        ctx->cfg.shm_dir = ctx->shm_dir;
    }
    if (rc == 0 && ctx->cfg.chunk_bytes < 64)
        rc = fail(err, errlen, "PYMCOLL_CHUNK_SIZE=%llu: a pipeline chunk needs at least 64 bytes",
                  (unsigned long long)ctx->cfg.chunk_bytes);
    free(t);
    return rc;
}

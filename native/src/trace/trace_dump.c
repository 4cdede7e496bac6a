/* Trace dumps, written without MPI, without allocation and without stdio,
 * so that a signal handler can write one: the hang being diagnosed may be
 * inside MPI or malloc. The format is described in docs/trace.md. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../comm.h"
#include "trace.h"

typedef struct writer {
    int fd;
    int failed;
    double rate;      /* ns per record tick (pmc_trace_ns_per_tick) */
    size_t used;
    char buf[2048];
} writer;

static void flush(writer *w)
{
    size_t off = 0;
    while (off < w->used && !w->failed) {
        ssize_t n = write(w->fd, w->buf + off, w->used - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) w->failed = 1;
        else off += (size_t)n;
    }
    w->used = 0;
}

static void put(writer *w, const char *s, size_t n)
{
    while (n > 0) {
        if (w->used == sizeof(w->buf)) flush(w);
        size_t room = sizeof(w->buf) - w->used, take = n < room ? n : room;
        memcpy(w->buf + w->used, s, take);
        w->used += take;
        s += take;
        n -= take;
    }
}

static void puts_(writer *w, const char *s) { put(w, s, strlen(s)); }

/* Decimal digits of v at the end of d; returns where they start. */
static size_t u64_digits(char d[24], uint64_t v)
{
    size_t i = 24;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return i;
}

static void put_u64(writer *w, uint64_t v)
{
    char d[24];
    const size_t i = u64_digits(d, v);
    put(w, d + i, sizeof(d) - i);
}

static void put_i64(writer *w, int64_t v)
{
    if (v < 0) {
        puts_(w, "-");
        put_u64(w, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(w, (uint64_t)v);
    }
}

/* A JSON string (host names, ids and directory names may hold anything). */
static void put_str(writer *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    puts_(w, "\"");
    for (; *s; ++s) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            put(w, e, 2);
        } else if (ch < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
            put(w, e, 6);
        } else {
            put(w, (const char *)&ch, 1);
        }
    }
    puts_(w, "\"");
}

/* "key": */
static void key(writer *w, const char *k)
{
    put_str(w, k);
    puts_(w, ": ");
}

static void put_time(writer *w, uint64_t ns)
{
    if (ns == 0) puts_(w, "null");
    else put_u64(w, ns);
}

static const char *const dtype_names[PMC_DT_COUNT] = {
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
    "float32", "float64", "longdouble", "complex64", "complex128", "clongdouble", "bool"};
static const char *const op_names[PMC_OP_COUNT] = {"sum", "prod", "min", "max", "land", "lor", "lxor",
                                                   "band", "bor", "bxor"};
static const char *const algorithm_names[] = {"self", "mpi", "node", "leader", "lanes"};
static const char *const path_names[] = {"cico", "inline", "cma"};
static const char *const mode_names[] = {"blocking", "nonblocking", "persistent"};
static const char *const flag_names[] = {"data", "done", "inline data"};

static const char *status_name(int32_t s)
{
    switch (s) {
    case PMC_TRACE_RUNNING: return "running";
    case PMC_OK: return "ok";
    case PMC_ERR_ARG: return "arg";
    case PMC_ERR_NOMEM: return "nomem";
    case PMC_ERR_MPI: return "mpi";
    case PMC_ERR_SHM: return "shm";
    case PMC_ERR_TIMEOUT: return "timeout";
    case PMC_ERR_PEER_DEAD: return "peer_dead";
    case PMC_ERR_BROKEN: return "broken";
    case PMC_ERR_SYS: return "sys";
    case PMC_ERR_PEER_ABORTED: return "peer_aborted";
    case PMC_ERR_MISMATCH: return "mismatch";
    default: return "?";
    }
}

static const char *name_or_null(const char *const *names, size_t n, unsigned i)
{
    return i < n ? names[i] : NULL;
}

static void put_name(writer *w, const char *name)
{
    if (name == NULL) puts_(w, "null");
    else put_str(w, name);
}

static void put_record(writer *w, const pmc_trace_record *t)
{
    puts_(w, "{");
    key(w, "seq"); put_u64(w, t->seq);
    puts_(w, ", "); key(w, "coll"); put_str(w, pmc_coll_name(t->coll));
    puts_(w, ", "); key(w, "algorithm");
    put_name(w, name_or_null(algorithm_names, sizeof(algorithm_names) / sizeof(*algorithm_names), t->algorithm));
    puts_(w, ", "); key(w, "paths"); puts_(w, "[");
    int first = 1;
    for (unsigned p = 0; p < sizeof(path_names) / sizeof(*path_names); ++p) {
        if (!(t->paths & (1u << p))) continue;
        if (!first) puts_(w, ", ");
        put_str(w, path_names[p]);
        first = 0;
    }
    puts_(w, "]");
    puts_(w, ", "); key(w, "bytes"); put_u64(w, t->bytes);
    puts_(w, ", "); key(w, "count"); put_u64(w, t->count);
    puts_(w, ", "); key(w, "dtype"); put_name(w, name_or_null(dtype_names, PMC_DT_COUNT, t->dtype));
    puts_(w, ", "); key(w, "op"); put_name(w, name_or_null(op_names, PMC_OP_COUNT, t->op));
    puts_(w, ", "); key(w, "root"); put_i64(w, t->root);
    puts_(w, ", "); key(w, "mode"); put_name(w, name_or_null(mode_names, 3, t->mode));
    puts_(w, ", "); key(w, "in_place"); puts_(w, t->in_place ? "true" : "false");
    puts_(w, ", "); key(w, "enqueue_ns"); put_time(w, pmc_trace_to_ns(t->t_enqueue, w->rate));
    puts_(w, ", "); key(w, "start_ns"); put_time(w, pmc_trace_to_ns(t->t_start, w->rate));
    puts_(w, ", "); key(w, "end_ns"); put_time(w, pmc_trace_to_ns(t->t_end, w->rate));
    puts_(w, ", "); key(w, "status"); put_str(w, status_name(t->status));
    puts_(w, "}");
}

/* The wait in progress, with the peers whose flag has still not arrived. */
static void put_wait(writer *w, const pmc_trace_ring *r)
{
    const pmc_wait_info *wi = r->wait;
    const int what = wi ? atomic_load_explicit(&wi->what, memory_order_acquire) : PMC_WAIT_NONE;
    if (what == PMC_WAIT_NONE) {
        puts_(w, "null");
        return;
    }
    puts_(w, "{");
    key(w, "seq"); put_u64(w, wi->seq);
    puts_(w, ", "); key(w, "coll"); put_name(w, wi->coll);
    puts_(w, ", "); key(w, "since_ns"); put_time(w, wi->since_ns);
    if (what == PMC_WAIT_MPI) {
        puts_(w, ", "); key(w, "kind"); put_str(w, "mpi");
        puts_(w, ", "); key(w, "call"); put_name(w, wi->call);
        puts_(w, "}");
        return;
    }
    puts_(w, ", "); key(w, "kind"); put_str(w, "flag");
    puts_(w, ", "); key(w, "flag"); put_name(w, name_or_null(flag_names, 3, (unsigned)wi->kind));
    puts_(w, ", "); key(w, "target"); put_u64(w, wi->target);
    const int n = wi->npeers < PMC_WAIT_PEERS ? wi->npeers : PMC_WAIT_PEERS;
    int missing[PMC_WAIT_PEERS], nmissing = 0;
    for (int i = 0; i < n; ++i) {
        const int p = wi->peers[i];
        if (p < 0 || p >= r->local_size) continue;
        if (wi->flags != NULL && pmc_step_geq(pmc_flag_load(&wi->flags[(size_t)p * wi->stride]), wi->target)) continue;
        missing[nmissing++] = p;
    }
    puts_(w, ", "); key(w, "waiting_for"); puts_(w, "[");
    for (int i = 0; i < nmissing; ++i) {
        if (i) puts_(w, ", ");
        put_i64(w, r->local_to_rank[missing[i]]);
    }
    puts_(w, "], "); key(w, "pids"); puts_(w, "[");
    for (int i = 0; i < nmissing; ++i) {
        if (i) puts_(w, ", ");
        put_i64(w, r->pids ? r->pids[missing[i]] : -1);
    }
    puts_(w, "]}");
}

static void put_ring(writer *w, const pmc_trace_ring *r)
{
    const uint64_t last = atomic_load_explicit(&r->last_seq, memory_order_acquire);
    const uint64_t cap = r->rec ? r->mask + 1 : 0;
    puts_(w, "{");
    key(w, "id"); put_str(w, r->id);
    puts_(w, ", "); key(w, "rank"); put_i64(w, r->rank);
    puts_(w, ", "); key(w, "size"); put_i64(w, r->size);
    puts_(w, ", "); key(w, "world_ranks"); puts_(w, "[");
    for (int i = 0; i < r->size; ++i) {
        if (i) puts_(w, ", ");
        put_i64(w, r->world_ranks[i]);
    }
    puts_(w, "], "); key(w, "node"); put_i64(w, r->node);
    puts_(w, ", "); key(w, "nnodes"); put_i64(w, r->nnodes);
    puts_(w, ", "); key(w, "local_rank"); put_i64(w, r->local_rank);
    puts_(w, ", "); key(w, "local_size"); put_i64(w, r->local_size);
    puts_(w, ", "); key(w, "last_seq"); put_u64(w, last);
    puts_(w, ", "); key(w, "capacity"); put_u64(w, cap);
    puts_(w, ", "); key(w, "freed"); puts_(w, atomic_load(&r->freed) ? "true" : "false");
    puts_(w, ", "); key(w, "wait"); put_wait(w, r);
    puts_(w, ", "); key(w, "records"); puts_(w, "[");
    const uint64_t first = last > cap ? last - cap + 1 : 1;
    int any = 0;
    for (uint64_t s = first; cap > 0 && s <= last; ++s) {
        const pmc_trace_record *t = &r->rec[s & r->mask];
        if (t->seq != s) continue; /* being rewritten */
        puts_(w, any ? ",\n    " : "\n    ");
        put_record(w, t);
        any = 1;
    }
    puts_(w, "]}");
}

/* rank<N>[<tag>][.<event>].json in the trace directory, into out. */
static int dump_path(char *out, size_t cap, const char *event, const char *suffix)
{
    const pmc_trace_context *x = &pmc_trace_ctx;
    const size_t dlen = strlen(x->dir);
    if (dlen + 96 > cap) return -1;
    memcpy(out, x->dir, dlen);
    size_t used = dlen;
    const char *parts[3] = {"/rank", x->name_tag, event};
    for (int i = 0; i < 3; ++i) {
        if (i == 2 && event[0] == '\0') break;
        if (i == 2) out[used++] = '.';
        const size_t n = strlen(parts[i]);
        memcpy(out + used, parts[i], n);
        used += n;
        if (i == 0) {
            char d[24];
            const size_t at = u64_digits(d, x->world_rank >= 0 ? (uint64_t)x->world_rank : 0);
            memcpy(out + used, d + at, sizeof(d) - at);
            used += sizeof(d) - at;
        }
    }
    const size_t slen = strlen(suffix);
    memcpy(out + used, suffix, slen + 1);
    return 0;
}

static void put_dump(writer *w, const char *reason, uint64_t now)
{
    const pmc_trace_context *x = &pmc_trace_ctx;
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    const int64_t real_ns = (int64_t)real.tv_sec * 1000000000 + real.tv_nsec;
    puts_(w, "{");
    key(w, "format"); put_str(w, "pymcoll-trace");
    puts_(w, ", "); key(w, "version"); puts_(w, "1");
    puts_(w, ", "); key(w, "rank"); put_i64(w, x->world_rank);
    puts_(w, ", "); key(w, "world_size"); put_i64(w, x->world_size);
    puts_(w, ", "); key(w, "pid"); put_i64(w, (int64_t)getpid());
    puts_(w, ", "); key(w, "host"); put_str(w, x->host);
    puts_(w, ", "); key(w, "cpus"); put_i64(w, x->cpus);
#ifdef PMC_CALL_PMPI
    puts_(w, ", "); key(w, "source"); put_str(w, "preload");
#else
    puts_(w, ", "); key(w, "source"); put_str(w, "python");
#endif
    puts_(w, ", "); key(w, "reason"); put_str(w, reason);
    puts_(w, ", "); key(w, "time_ns"); put_u64(w, now);
    puts_(w, ", "); key(w, "realtime_offset_ns"); put_i64(w, real_ns - (int64_t)now);
    puts_(w, ",\n"); key(w, "comms"); puts_(w, "[");
    int any = 0;
    for (int i = 0; i < PMC_TRACE_MAX_RINGS; ++i) {
        const pmc_trace_ring *r = atomic_load(&pmc_trace_ctx.rings[i]);
        if (r == NULL) continue;
        puts_(w, any ? ",\n  " : "\n  ");
        put_ring(w, r);
        any = 1;
    }
    puts_(w, "]}\n");
}

/* The event part of a file name: "SIGUSR1" -> "sigusr1". */
static void lower(char *out, size_t cap, const char *s)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; ++i) out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    out[i] = '\0';
}

static int dump_file(const char *reason, uint64_t now)
{
    char event[32], path[PMC_TRACE_DIR_MAX + 128], tmp[PMC_TRACE_DIR_MAX + 128];
    const int final = strcmp(reason, "finalize") == 0 || strcmp(reason, "request") == 0;
    lower(event, sizeof(event), final ? "" : reason);
    if (dump_path(path, sizeof(path), event, ".json") != 0 || dump_path(tmp, sizeof(tmp), event, ".json.tmp") != 0)
        return -1;
    writer w = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), .rate = pmc_trace_ns_per_tick()};
    if (w.fd < 0) return -1;
    put_dump(&w, reason, now);
    flush(&w);
    const int failed = w.failed;
    close(w.fd);
    /* Readers see the old dump or the whole new one. */
    if (failed || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Without a trace directory: a few lines on stderr per communicator. */
static void dump_summary(const char *reason, uint64_t now)
{
    writer w = {.fd = 2, .rate = pmc_trace_ns_per_tick()};
    const pmc_trace_context *x = &pmc_trace_ctx;
    for (int i = 0; i < PMC_TRACE_MAX_RINGS; ++i) {
        const pmc_trace_ring *r = atomic_load(&pmc_trace_ctx.rings[i]);
        if (r == NULL || atomic_load(&r->freed)) continue;
        const uint64_t last = atomic_load(&r->last_seq);
        puts_(&w, "pymcoll trace: rank "); put_i64(&w, x->world_rank);
        puts_(&w, " (pid "); put_i64(&w, (int64_t)getpid());
        puts_(&w, ") "); puts_(&w, reason);
        puts_(&w, ": communicator "); puts_(&w, r->id);
        puts_(&w, " (rank "); put_i64(&w, r->rank); puts_(&w, " of "); put_i64(&w, r->size); puts_(&w, "): ");
        const pmc_trace_record *t = r->rec && last > 0 ? &r->rec[last & r->mask] : NULL;
        if (t == NULL || t->seq != last) {
            puts_(&w, "no collective recorded");
        } else {
            puts_(&w, "last call "); puts_(&w, pmc_coll_name(t->coll)); puts_(&w, " #"); put_u64(&w, t->seq);
            puts_(&w, " ("); puts_(&w, status_name(t->status));
            const uint64_t end = pmc_trace_to_ns(t->t_end, w.rate);
            if (end != 0 && now >= end) {
                puts_(&w, ", ended "); put_u64(&w, (now - end) / 1000000); puts_(&w, " ms ago");
            }
            puts_(&w, ")");
        }
        const int what = r->wait ? atomic_load(&r->wait->what) : PMC_WAIT_NONE;
        puts_(&w, what == PMC_WAIT_NONE ? "; not waiting in it\n" : "; waiting: ");
        if (what != PMC_WAIT_NONE) {
            put_wait(&w, r);
            puts_(&w, "\n");
        }
    }
    puts_(&w, "pymcoll trace: set PYMCOLL_TRACE=DIR for complete dumps\n");
    flush(&w);
}

int pmc_trace_dump_now(const char *reason, int from_signal)
{
    /* Without a directory only a signal has something to say (on stderr). */
    if (pmc_trace_ctx.dir[0] == '\0' && !from_signal) return 0;
    int expected = 0;
    while (!atomic_compare_exchange_strong(&pmc_trace_ctx.dumping, &expected, 1)) {
        if (from_signal) return -1; /* another dump is on its way */
        expected = 0;
        sched_yield();
    }
    const uint64_t now = pmc_trace_now();
    int rc = 0;
    if (pmc_trace_ctx.dir[0] != '\0') rc = dump_file(reason, now);
    else if (from_signal) dump_summary(reason, now);
    atomic_store(&pmc_trace_ctx.dumping, 0);
    return rc;
}

/* Payloads of FTAR's control frames between members and the coordinator.
 * Little-endian fields and length-prefixed strings; every read is bounds
 * checked, so a short or lying payload is refused, never overrun. Internal.
 *
 * member -> coordinator (header epoch/step as noted):
 *   JOIN      i64 committed_step | u64 last_epoch | str replica_id | str ring_addr | str state_addr
 *   HEARTBEAT (empty)
 *   QUORUM    i64 step (asked) | i64 committed_step          (request of begin_step)
 *   VOTE      u8 ok                                            (header: epoch, step)
 *   ABORT     u32 status | str reason                          (a failure seen by the member; header: epoch, step)
 *   DONOR     u32 failed donor index                           (header: epoch)
 * coordinator -> member:
 *   JOIN      u32 heartbeat_ms | u32 evict_ms | u64 incarnation (welcome)
 *   HEARTBEAT (empty)
 *   QUORUM    u32 status | u32 n | u32 your_index | u32 n_healing, then n times
 *             u8 healing | i32 donor | str replica_id | str ring_addr | str state_addr
 *             (header: epoch, step = the group's step; status != OK: no quorum, n = 0)
 *   COMMIT    (header: epoch, step)
 *   ABORT     u32 status | str reason  (header: epoch, step; status FENCED: you were evicted)
 *   DONOR     i32 donor index | str state_addr (header: epoch; index -1: none left)
 */
#ifndef PMC_FTAR_PROTO_H
#define PMC_FTAR_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { PMC_PROTO_STR_MAX = 255 };

typedef struct pmc_wr {
    uint8_t *p;
    size_t len, cap;
    int overflow;
} pmc_wr;

typedef struct pmc_rd {
    const uint8_t *p;
    size_t len, pos;
    int bad;                   /* set by any read past the end or malformed string */
} pmc_rd;

static inline void pmc_wr_init(pmc_wr *w, void *buf, size_t cap)
{
    w->p = buf;
    w->len = 0;
    w->cap = cap;
    w->overflow = 0;
}

static inline void pmc_wr_bytes(pmc_wr *w, const void *src, size_t n)
{
    if (w->overflow || w->cap - w->len < n) {
        w->overflow = 1;
        return;
    }
    memcpy(w->p + w->len, src, n);
    w->len += n;
}

static inline void pmc_wr_u64(pmc_wr *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; ++i) b[i] = (uint8_t)(v >> (8 * i));
    pmc_wr_bytes(w, b, 8);
}

static inline void pmc_wr_u32(pmc_wr *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; ++i) b[i] = (uint8_t)(v >> (8 * i));
    pmc_wr_bytes(w, b, 4);
}

static inline void pmc_wr_u8(pmc_wr *w, uint8_t v) { pmc_wr_bytes(w, &v, 1); }
static inline void pmc_wr_i64(pmc_wr *w, int64_t v) { pmc_wr_u64(w, (uint64_t)v); }
static inline void pmc_wr_i32(pmc_wr *w, int32_t v) { pmc_wr_u32(w, (uint32_t)v); }

static inline void pmc_wr_str(pmc_wr *w, const char *s)
{
    const size_t n = s ? strlen(s) : 0;
    if (n > PMC_PROTO_STR_MAX) {
        w->overflow = 1;
        return;
    }
    pmc_wr_u8(w, (uint8_t)n);
    pmc_wr_bytes(w, s, n);
}

static inline void pmc_rd_init(pmc_rd *r, const void *buf, size_t len)
{
    r->p = buf;
    r->len = len;
    r->pos = 0;
    r->bad = 0;
}

static inline const uint8_t *pmc_rd_take(pmc_rd *r, size_t n)
{
    if (r->bad || r->len - r->pos < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static inline uint64_t pmc_rd_u64(pmc_rd *r)
{
    const uint8_t *q = pmc_rd_take(r, 8);
    uint64_t v = 0;
    if (q != NULL)
        for (int i = 7; i >= 0; --i) v = v << 8 | q[i];
    return v;
}

static inline uint32_t pmc_rd_u32(pmc_rd *r)
{
    const uint8_t *q = pmc_rd_take(r, 4);
    uint32_t v = 0;
    if (q != NULL)
        for (int i = 3; i >= 0; --i) v = v << 8 | q[i];
    return v;
}

static inline uint8_t pmc_rd_u8(pmc_rd *r)
{
    const uint8_t *q = pmc_rd_take(r, 1);
    return q != NULL ? q[0] : 0;
}

static inline int64_t pmc_rd_i64(pmc_rd *r) { return (int64_t)pmc_rd_u64(r); }
static inline int32_t pmc_rd_i32(pmc_rd *r) { return (int32_t)pmc_rd_u32(r); }

/* Copies a string into out[cap]; a string with a NUL or longer than cap-1 is bad. */
static inline void pmc_rd_str(pmc_rd *r, char *out, size_t cap)
{
    const size_t n = pmc_rd_u8(r);
    const uint8_t *q = pmc_rd_take(r, n);
    if (q == NULL || n >= cap || memchr(q, 0, n) != NULL) {
        r->bad = 1;
        if (cap > 0) out[0] = '\0';
        return;
    }
    memcpy(out, q, n);
    out[n] = '\0';
}

/* A payload read to its end and no further. */
static inline int pmc_rd_done(const pmc_rd *r) { return !r->bad && r->pos == r->len; }

/* Replica ids: 1..63 bytes of [A-Za-z0-9._-] (they appear in identities and logs). */
static inline int pmc_replica_id_valid(const char *id)
{
    const size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > 63) return 0;
    for (size_t i = 0; i < n; ++i) {
        const char ch = id[i];
        const int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                       ch == '.' || ch == '_' || ch == '-';
        if (!ok) return 0;
    }
    return 1;
}

#endif

/* The codec's entry points: header, compression pipeline, decompression.
 *
 * Compression: distinct rows (by their bytes) -> value range of their finite
 * values -> linear quantization of the distinct rows (code = round(x / 2b),
 * kept only where the decoded value, in the tensor's dtype, is within b of x;
 * other elements are exceptions stored exactly) -> the symbols (zigzag(code)
 * + 1, 0 marking an exception) packed at a fixed width or Huffman coded,
 * whichever is smaller (or as asked).
 *
 * Payload: [row map, rowmap.c] (when rows repeat)
 *          [symbols: EXACT raw rows | PACKED u8 width, packed | HUFFMAN row classes, classes.c]
 *          [exceptions: raw elements] */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the codec's format is written for little-endian hosts"
#endif
#include <float.h>
#if FLT_EVAL_METHOD != 0
#error "round_near needs double arithmetic evaluated in double precision"
#endif

static const uint8_t MAGIC[4] = {'P', 'M', 'C', 'Z'};
#define MAX_CODE 32767.0 /* |code| <= 32767: zigzag(code) + 1 fits 16 bits */

pmc_codec_ctx *pmc_codec_ctx_new(void) {
    pmc_codec_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx) pmc_codec_crc32_tables(ctx->crc_tables);
    return ctx;
}

void pmc_codec_ctx_free(pmc_codec_ctx *ctx) {
    if (!ctx) return;
    free(ctx->row_map);
    free(ctx->first);
    free(ctx->slots);
    free(ctx->symbols);
    free(ctx->exceptions);
    free(ctx->work);
    free(ctx->work2);
    free(ctx->repeats);
    free(ctx->remap);
    free(ctx);
}

static int err(char *msg, size_t msg_len, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int err(char *msg, size_t msg_len, int rc, const char *fmt, ...) {
    if (msg && msg_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

uint64_t pmc_codec_max_bytes(uint64_t rows, uint32_t cols, int dtype) {
    uint64_t es = pmc_codec_dtype_size(dtype), n = rows * cols;
    /* The largest candidate is EXACT (raw rows); AUTO never keeps a bigger one,
     * but a forced stage can: codes plus every element as an exception. */
    uint64_t map = pmc_codec_rowmap_max_bytes(rows);
    uint64_t coded = pmc_codec_classes_max_bytes(n, (uint32_t)rows) + 1 + pmc_codec_packed_bytes(n, 16);
    return PMC_CODEC_HEADER_BYTES + map + coded + n * es + 64;
}

/* -- header ------------------------------------------------------------------------------------------------ */

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void write_header(uint8_t *out, const pmc_codec_header *h, uint32_t payload_crc,
                         const uint32_t tables[8][256]) {
    memset(out, 0, PMC_CODEC_HEADER_BYTES);
    memcpy(out, MAGIC, 4);
    out[4] = (uint8_t)h->version;
    out[5] = (uint8_t)h->dtype;
    out[6] = (uint8_t)h->stage;
    out[7] = (uint8_t)h->flags;
    put_u64(out + 8, h->rows);
    put_u32(out + 16, h->cols);
    put_u32(out + 20, h->unique_rows);
    memcpy(out + 24, &h->bound, 8);
    memcpy(out + 32, &h->requested, 8);
    put_u32(out + 40, h->exceptions);
    put_u32(out + 44, h->code_bits);
    put_u64(out + 48, h->payload_bytes);
    put_u32(out + 56, payload_crc);
    put_u32(out + 60, pmc_codec_crc32(tables, 0, out, 60));
}

/* The payload's sections must add up to its size exactly, as the header describes them
 * (checked before any output is allocated: a header that lies about the shape is caught here). */
static int check_layout(const uint8_t *payload, const pmc_codec_header *h, char *msg, size_t msg_len) {
    uint64_t avail = h->payload_bytes, at = 0, es = pmc_codec_dtype_size((int)h->dtype);
    uint64_t n_sym = (uint64_t)h->unique_rows * h->cols;
    if (h->flags & PMC_CODEC_FLAG_DEDUP) {
        int rc = pmc_codec_rowmap_size(payload, avail, h->rows, h->unique_rows, &at, msg, msg_len);
        if (rc) return rc;
    }
    uint64_t need;
    if (h->stage == PMC_CODEC_STAGE_EXACT) {
        need = n_sym * es;
    } else if (h->stage == PMC_CODEC_STAGE_PACKED) {
        if (avail - at < 1 || payload[at] != h->code_bits)
            return err(msg, msg_len, PMC_CODEC_ECORRUPT, "invalid packed symbols");
        need = 1 + pmc_codec_packed_bytes(n_sym, h->code_bits) + (uint64_t)h->exceptions * es;
    } else {
        need = (uint64_t)h->exceptions * es;
        uint64_t section;
        int rc = pmc_codec_classes_size(payload + at, avail - at, h->unique_rows, h->cols,
                                        (h->flags & PMC_CODEC_FLAG_WIDE) != 0, &section, msg, msg_len);
        if (rc) return rc;
        at += section;
    }
    if (need != avail - at)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "payload of %llu bytes where the header implies %llu",
                   (unsigned long long)avail, (unsigned long long)(at + need));
    return PMC_CODEC_OK;
}

/* The header check, with the context's CRC tables when there is a context (bit by bit otherwise). */
static int read_header(const void *buf, uint64_t len, pmc_codec_header *h, char *msg, size_t msg_len,
                       const uint32_t (*tables)[256]);

int pmc_codec_read_header(const void *buf, uint64_t len, pmc_codec_header *h, char *msg, size_t msg_len) {
    return read_header(buf, len, h, msg, msg_len, NULL);
}

static int read_header(const void *buf, uint64_t len, pmc_codec_header *h, char *msg, size_t msg_len,
                       const uint32_t (*tables)[256]) {
    const uint8_t *p = buf;
    if (!buf || !h) return err(msg, msg_len, PMC_CODEC_EINVAL, "no buffer");
    if (len < 5 || memcmp(p, MAGIC, 4) != 0)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "not a pymcoll codec buffer (no 'PMCZ' magic)");
    if (p[4] != PMC_CODEC_VERSION)
        return err(msg, msg_len, PMC_CODEC_EVERSION, "format version %u; this build reads version %d", p[4],
                   PMC_CODEC_VERSION);
    if (len < PMC_CODEC_HEADER_BYTES)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "truncated: %llu bytes, the header alone takes %d",
                   (unsigned long long)len, PMC_CODEC_HEADER_BYTES);
    if (get_u32(p + 60) != (tables ? pmc_codec_crc32(tables, 0, p, 60) : pmc_codec_crc32_bits(0, p, 60)))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "header checksum mismatch: the buffer is corrupt");
    memset(h, 0, sizeof *h);
    h->version = p[4];
    h->dtype = p[5];
    h->stage = p[6];
    h->flags = p[7];
    h->rows = get_u64(p + 8);
    h->cols = get_u32(p + 16);
    h->unique_rows = get_u32(p + 20);
    memcpy(&h->bound, p + 24, 8);
    memcpy(&h->requested, p + 32, 8);
    h->exceptions = get_u32(p + 40);
    h->code_bits = get_u32(p + 44);
    h->payload_bytes = get_u64(p + 48);
    if (!pmc_codec_dtype_size((int)h->dtype)) return err(msg, msg_len, PMC_CODEC_ECORRUPT, "unknown dtype %u", h->dtype);
    if (h->stage > PMC_CODEC_STAGE_HUFFMAN) return err(msg, msg_len, PMC_CODEC_ECORRUPT, "unknown stage %d", h->stage);
    if (h->flags & ~7u) return err(msg, msg_len, PMC_CODEC_ECORRUPT, "unknown flags 0x%x", h->flags);
    if (h->cols == 0 || h->rows > 0xFFFFFFFFull || h->rows * h->cols > (1ull << 40))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "impossible shape %llu x %u", (unsigned long long)h->rows,
                   h->cols);
    if (h->unique_rows > h->rows || (h->rows && !h->unique_rows) ||
        (!(h->flags & PMC_CODEC_FLAG_DEDUP) && h->unique_rows != h->rows))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "%u distinct rows for %llu rows", h->unique_rows,
                   (unsigned long long)h->rows);
    if (!(h->bound >= 0) || isinf(h->bound) || isnan(h->requested))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "invalid bound %g", h->bound);
    if ((uint64_t)h->exceptions > (uint64_t)h->unique_rows * h->cols)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "%u exceptions for %llu coded elements", h->exceptions,
                   (unsigned long long)h->unique_rows * h->cols);
    if (h->stage == PMC_CODEC_STAGE_PACKED
            ? (h->code_bits < 1 || h->code_bits > ((h->flags & PMC_CODEC_FLAG_WIDE) ? 16u : 8u))
            : h->code_bits != 0)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "invalid code width %u", h->code_bits);
    if (h->stage != PMC_CODEC_STAGE_EXACT && h->unique_rows && !(h->bound > 0))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "coded stage with a zero bound");
    if (h->payload_bytes != len - PMC_CODEC_HEADER_BYTES)
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "%s: the header announces %llu payload bytes, the buffer holds %llu",
                   h->payload_bytes > len - PMC_CODEC_HEADER_BYTES ? "truncated" : "trailing bytes",
                   (unsigned long long)h->payload_bytes, (unsigned long long)(len - PMC_CODEC_HEADER_BYTES));
    return check_layout(p + PMC_CODEC_HEADER_BYTES, h, msg, msg_len);
}

/* -- compression ------------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *in;
    uint64_t rows;
    uint32_t cols;
    int dtype;
    size_t es;         /* element size */
    uint32_t unique;   /* distinct rows */
    double bound;      /* absolute */
    uint64_t n_sym;    /* unique * cols */
    uint32_t n_exc;
    uint16_t max_sym;
    uint16_t min_sym;
} plan;

/* The x86-64 baseline (SSE2) lacks the vector operations these row kernels need (unsigned
 * min/max, packed conversions of doubles); where the compiler can, it also builds an AVX2 copy
 * of them, chosen at load time by the CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) /* ifunc */
#define ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define ROW_KERNEL
#endif

/* Smallest and largest finite value of a float32 row, folded into *lo, *hi (as ordered keys:
 * the bits of a float with the magnitude bits flipped when negative compare as signed
 * integers in the floats' order). Integer selects, so that the compiler vectorizes it. */
ROW_KERNEL static void range_f32(const uint8_t *row, uint32_t cols, int32_t *lo, int32_t *hi) {
    int32_t klo = *lo, khi = *hi;
    for (uint32_t c = 0; c < cols; c++) {
        int32_t v;
        memcpy(&v, row + 4 * (size_t)c, 4);
        int32_t finite = -(int32_t)((v & 0x7F800000) != 0x7F800000); /* all ones or zero */
        int32_t key = v ^ ((v >> 31) & 0x7FFFFFFF);
        int32_t vlo = (key & finite) | (INT32_MAX & ~finite), vhi = (key & finite) | (INT32_MIN & ~finite);
        klo = vlo < klo ? vlo : klo;
        khi = vhi > khi ? vhi : khi;
    }
    *lo = klo;
    *hi = khi;
}

static float key_float(int32_t key) {
    int32_t v = key ^ ((key >> 31) & 0x7FFFFFFF);
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* Value range of the finite values of the distinct rows; 0 when there are none. */
static double value_range(const pmc_codec_ctx *ctx, const plan *pl) {
    double lo = INFINITY, hi = -INFINITY;
    size_t row_bytes = pl->es * pl->cols;
    if (pl->dtype == PMC_CODEC_F32) {
        int32_t klo = INT32_MAX, khi = INT32_MIN;
        for (uint32_t u = 0; u < pl->unique; u++)
            range_f32(pl->in + (uint64_t)ctx->first[u] * row_bytes, pl->cols, &klo, &khi);
        if (klo <= khi) { /* some value is finite */
            lo = key_float(klo);
            hi = key_float(khi);
        }
    } else {
        for (uint32_t u = 0; u < pl->unique; u++) {
            const uint8_t *row = pl->in + (uint64_t)ctx->first[u] * row_bytes;
            for (uint32_t c = 0; c < pl->cols; c++) {
                double v = pmc_codec_load(row, c, pl->dtype);
                if (isfinite(v)) {
                    lo = v < lo ? v : lo;
                    hi = v > hi ? v : hi;
                }
            }
        }
    }
    return hi >= lo ? hi - lo : 0.0;
}

/* Round to nearest (even) without a libm call: exact for |t| < 2^51, and a
 * value far from any code beyond, which the range check then rejects. */
static inline double round_near(double t) { return (t + 0x1.8p52) - 0x1.8p52; }

static inline unsigned zigzag_symbol(double q) {
    int64_t code = (int64_t)q;
    return (unsigned)(((uint64_t)code << 1) ^ (uint64_t)(code >> 63)) + 1u;
}

/* Symbols of one float32 row (0 where the element is an exception); returns whether any is one.
 * Written without branches and with 32-bit integers, so that the compiler vectorizes it: a code
 * is converted to an integer only where it is within MAX_CODE (the select keeps 0 elsewhere). */
ROW_KERNEL static unsigned quantize_row_f32(const uint8_t *restrict row, uint32_t cols, double inv, double step,
                                            double b, uint16_t *restrict sym, unsigned *max_sym, unsigned *min_sym) {
    unsigned any_exc = 0, hi = *max_sym, lo = *min_sym;
    for (uint32_t c = 0; c < cols; c++) {
        float f;
        memcpy(&f, row + 4 * (size_t)c, 4);
        double x = f, q = round_near(x * inv);
        /* fabs(x - dec) <= b is false for NaN and infinities. */
        int ok = (fabs(q) <= MAX_CODE) & (fabs(x - (double)(float)(q * step)) <= b);
        int32_t code = (int32_t)(ok ? q : 0.0);
        uint32_t s = ((((uint32_t)code << 1) ^ (uint32_t)(code >> 31)) + 1u) & (0u - (uint32_t)ok);
        any_exc |= (unsigned)!ok;
        hi = s > hi ? s : hi;
        lo = s < lo ? s : lo;
        sym[c] = (uint16_t)s;
    }
    *max_sym = hi;
    *min_sym = lo;
    return any_exc;
}

/* Symbols and exceptions of the distinct rows. */
static int quantize(pmc_codec_ctx *ctx, plan *pl) {
    if (pmc_codec_grow((void **)&ctx->symbols, &ctx->symbols_cap, pl->n_sym * 2 + 16) ||
        pmc_codec_grow((void **)&ctx->exceptions, &ctx->exceptions_cap, pl->n_sym * pl->es + 16))
        return PMC_CODEC_ENOMEM;
    const double step = 2.0 * pl->bound, inv = 1.0 / step, b = pl->bound;
    size_t row_bytes = pl->es * pl->cols;
    uint16_t *sym = ctx->symbols;
    uint8_t *exc = ctx->exceptions;
    uint32_t n_exc = 0;
    unsigned max_sym = 0, min_sym = 0xFFFF;
    for (uint32_t u = 0; u < pl->unique; u++) {
        const uint8_t *row = pl->in + (uint64_t)ctx->first[u] * row_bytes;
        if (pl->dtype == PMC_CODEC_F32) {
            /* Branch-free over the row, then the rare exceptions. */
            if (quantize_row_f32(row, pl->cols, inv, step, b, sym, &max_sym, &min_sym))
                for (uint32_t c = 0; c < pl->cols; c++)
                    if (!sym[c]) memcpy(exc + (size_t)n_exc++ * 4, row + 4 * c, 4);
            sym += pl->cols;
            continue;
        }
        for (uint32_t c = 0; c < pl->cols; c++) {
            double x = pmc_codec_load(row, c, pl->dtype), q = round_near(x * inv);
            unsigned s = 0;
            if (fabs(q) <= MAX_CODE && fabs(x - pmc_codec_round(q * step, pl->dtype)) <= b) s = zigzag_symbol(q);
            if (!s) memcpy(exc + (size_t)n_exc++ * pl->es, row + c * pl->es, pl->es);
            max_sym = s > max_sym ? s : max_sym;
            min_sym = s < min_sym ? s : min_sym;
            *sym++ = (uint16_t)s;
        }
    }
    pl->n_exc = n_exc;
    pl->max_sym = (uint16_t)max_sym;
    pl->min_sym = (uint16_t)min_sym;
    return PMC_CODEC_OK;
}

int pmc_codec_compress(pmc_codec_ctx *ctx, const void *in, uint64_t rows, uint32_t cols, int dtype, double bound,
                       int relative, int stage, void *out_v, uint64_t cap, uint64_t *written, char *msg,
                       size_t msg_len) {
    if (!ctx || !written || !out_v || (!in && rows)) return err(msg, msg_len, PMC_CODEC_EINVAL, "a null pointer");
    size_t es = pmc_codec_dtype_size(dtype);
    if (!es) return err(msg, msg_len, PMC_CODEC_EINVAL, "dtype %d: use float32, bfloat16 or float16", dtype);
    if (cols == 0) return err(msg, msg_len, PMC_CODEC_EINVAL, "cols=0: a row needs at least one element");
    if (rows > 0xFFFFFFFFull || rows * cols > (1ull << 40))
        return err(msg, msg_len, PMC_CODEC_EINVAL, "%llu x %u elements: too many for one buffer",
                   (unsigned long long)rows, cols);
    if (!(bound > 0) || isinf(bound))
        return err(msg, msg_len, PMC_CODEC_EINVAL, "bound=%g: a finite error bound > 0", bound);
    if (stage < PMC_CODEC_STAGE_AUTO || stage > PMC_CODEC_STAGE_HUFFMAN)
        return err(msg, msg_len, PMC_CODEC_EINVAL, "stage %d: use AUTO, EXACT, PACKED or HUFFMAN", stage);
    uint8_t *out = out_v;
    if (cap < PMC_CODEC_HEADER_BYTES) return err(msg, msg_len, PMC_CODEC_ESPACE, "output smaller than the header");

    plan pl = {.in = in, .rows = rows, .cols = cols, .dtype = dtype, .es = es};
    size_t row_bytes = es * cols;
    int rc = pmc_codec_dedup(ctx, in, rows, row_bytes, &pl.unique);
    if (rc) return err(msg, msg_len, rc, "out of memory (%llu rows)", (unsigned long long)rows);
    pl.n_sym = (uint64_t)pl.unique * cols;
    double absolute = relative ? bound * value_range(ctx, &pl) : bound;
    /* A bound that no code can honour (0, or below the dtype's resolution everywhere) means exact rows. */
    int exact = stage == PMC_CODEC_STAGE_EXACT || !(absolute > 0) || isinf(absolute) || absolute < 1e-300;
    pl.bound = exact ? 0.0 : absolute;
    uint32_t byte_unique = pl.unique;
    if (!exact) {
        if ((rc = quantize(ctx, &pl))) return err(msg, msg_len, rc, "out of memory");
        /* Distinct rows whose codes are the same (rows of values within the bound of each other,
         * such as the near-zero rows of rarely trained ids) are stored once too. */
        if ((rc = pmc_codec_merge_code_rows(ctx, rows, cols, &pl.unique)))
            return err(msg, msg_len, rc, "out of memory");
        pl.n_sym = (uint64_t)pl.unique * cols;
    }

    pmc_codec_header h = {.version = PMC_CODEC_VERSION, .dtype = (uint32_t)dtype, .rows = rows, .cols = cols,
                          .bound = pl.bound, .requested = bound,
                          .flags = relative ? PMC_CODEC_FLAG_RELATIVE : 0u};
    /* The codes first (into ctx->work): whether they pay decides what the row map refers to. */
    uint64_t coded = 0, exc_bytes = 0;
    if (!exact) {
        exc_bytes = (uint64_t)pl.n_exc * es;
        unsigned w = pmc_codec_bits_for(pl.max_sym);
        uint64_t packed = 1 + pmc_codec_packed_bytes(pl.n_sym, w);
        /* AUTO skips Huffman where its code lengths alone cannot beat the packed codes (small blocks),
         * unless every symbol is the same (a 2-byte block). */
        int skip_huffman = stage == PMC_CODEC_STAGE_AUTO && pl.min_sym != pl.max_sym &&
                           pmc_codec_huffman_min_bytes(pl.n_sym, pl.max_sym > 255 ? 256 : pl.max_sym + 1u) >= packed;
        uint64_t huff = 0;
        if (pmc_codec_grow((void **)&ctx->work, &ctx->work_cap, pmc_codec_classes_max_bytes(pl.n_sym, pl.unique) + packed))
            return err(msg, msg_len, PMC_CODEC_ENOMEM, "out of memory");
        if (stage != PMC_CODEC_STAGE_PACKED && !skip_huffman &&
            (rc = pmc_codec_classes_encode(ctx, pl.unique, cols, pl.max_sym > 255, ctx->work, &huff)))
            return err(msg, msg_len, rc, "out of memory");
        int chosen = stage;
        if (stage == PMC_CODEC_STAGE_AUTO)
            chosen = !skip_huffman && huff < packed ? PMC_CODEC_STAGE_HUFFMAN : PMC_CODEC_STAGE_PACKED;
        if (chosen == PMC_CODEC_STAGE_PACKED) {
            ctx->work[0] = (uint8_t)w;
            pmc_codec_pack(ctx->symbols, pl.n_sym, w, ctx->work + 1);
            h.code_bits = w;
        }
        coded = chosen == PMC_CODEC_STAGE_HUFFMAN ? huff : packed;
        h.stage = chosen;
        /* Exceptions everywhere (a bound below the resolution): the rows as they are are smaller. */
        if (stage == PMC_CODEC_STAGE_AUTO && coded + exc_bytes >= (uint64_t)byte_unique * row_bytes) exact = 1;
    }
    if (exact && pl.unique != byte_unique) { /* back to the rows' own bytes */
        if ((rc = pmc_codec_dedup(ctx, in, rows, row_bytes, &pl.unique)))
            return err(msg, msg_len, rc, "out of memory");
        pl.n_sym = (uint64_t)pl.unique * cols;
    }
    if (pl.unique < rows) h.flags |= PMC_CODEC_FLAG_DEDUP;
    h.unique_rows = pl.unique;

    uint8_t *payload = out + PMC_CODEC_HEADER_BYTES;
    uint64_t room = cap - PMC_CODEC_HEADER_BYTES, at = 0;
#define NEED(n)                                                                                                      \
    do {                                                                                                             \
        if ((uint64_t)(n) > room - at) return err(msg, msg_len, PMC_CODEC_ESPACE, "output buffer too small");       \
    } while (0)
    if (h.flags & PMC_CODEC_FLAG_DEDUP) {
        uint64_t map;
        rc = pmc_codec_rowmap_encode(ctx, rows, pl.unique, payload, room, &map);
        if (rc == PMC_CODEC_ENOMEM) return err(msg, msg_len, rc, "out of memory");
        if (rc) return err(msg, msg_len, rc, "output buffer too small");
        at += map;
    }
    if (!exact) {
        NEED(coded + exc_bytes);
        memcpy(payload + at, ctx->work, coded);
        at += coded;
        memcpy(payload + at, ctx->exceptions, exc_bytes);
        at += exc_bytes;
        h.exceptions = pl.n_exc;
        h.flags |= pl.max_sym > 255 ? PMC_CODEC_FLAG_WIDE : 0u;
    } else {
        uint64_t raw_bytes = pl.n_sym * es;
        h.stage = PMC_CODEC_STAGE_EXACT;
        h.bound = 0.0;
        h.code_bits = 0;
        NEED(raw_bytes);
        for (uint32_t u = 0; u < pl.unique; u++)
            memcpy(payload + at + (uint64_t)u * row_bytes, pl.in + (uint64_t)ctx->first[u] * row_bytes, row_bytes);
        at += raw_bytes;
    }
#undef NEED
    h.payload_bytes = at;
    write_header(out, &h, pmc_codec_crc32(ctx->crc_tables, 0, payload, at), ctx->crc_tables);
    *written = PMC_CODEC_HEADER_BYTES + at;
    return PMC_CODEC_OK;
}

/* -- decompression ----------------------------------------------------------------------------------------- */

int pmc_codec_decompress(pmc_codec_ctx *ctx, const void *buf, uint64_t len, void *out_v, uint64_t out_bytes,
                         char *msg, size_t msg_len) {
    pmc_codec_header h;
    if (!ctx || !out_v) return err(msg, msg_len, PMC_CODEC_EINVAL, "a null pointer");
    int rc = read_header(buf, len, &h, msg, msg_len, ctx->crc_tables);
    if (rc) return rc;
    size_t es = pmc_codec_dtype_size((int)h.dtype), row_bytes = es * h.cols;
    if (out_bytes != h.rows * row_bytes)
        return err(msg, msg_len, PMC_CODEC_EINVAL, "output of %llu bytes for %llu x %u elements of %zu bytes",
                   (unsigned long long)out_bytes, (unsigned long long)h.rows, h.cols, es);
    const uint8_t *payload = (const uint8_t *)buf + PMC_CODEC_HEADER_BYTES;
    uint64_t avail = h.payload_bytes, at = 0;
    if (pmc_codec_crc32(ctx->crc_tables, 0, payload, avail) != get_u32((const uint8_t *)buf + 56))
        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "payload checksum mismatch: the buffer is corrupt");
    uint8_t *out = out_v;
    uint32_t unique = h.unique_rows;
    uint64_t rows = h.rows, n_sym = (uint64_t)unique * h.cols;
    if (pmc_codec_grow((void **)&ctx->row_map, &ctx->row_map_cap, rows * 4 + 4) ||
        pmc_codec_grow((void **)&ctx->first, &ctx->first_cap, (uint64_t)unique * 4 + 4))
        return err(msg, msg_len, PMC_CODEC_ENOMEM, "out of memory");
    /* Row map: each row's distinct row; distinct rows are numbered in order of first appearance. */
    if (h.flags & PMC_CODEC_FLAG_DEDUP) {
        rc = pmc_codec_rowmap_decode(ctx, payload, avail, rows, unique, &at, msg, msg_len);
        if (rc) return rc;
    } else {
        for (uint64_t r = 0; r < rows; r++) ctx->first[r] = (uint32_t)r;
    }
    if (h.stage == PMC_CODEC_STAGE_EXACT) {
        if (avail - at != n_sym * es) return err(msg, msg_len, PMC_CODEC_ECORRUPT, "exact rows of the wrong size");
        for (uint32_t u = 0; u < unique; u++)
            memcpy(out + (uint64_t)ctx->first[u] * row_bytes, payload + at + (uint64_t)u * row_bytes, row_bytes);
    } else {
        if (pmc_codec_grow((void **)&ctx->symbols, &ctx->symbols_cap, n_sym * 2 + 16))
            return err(msg, msg_len, PMC_CODEC_ENOMEM, "out of memory");
        uint16_t *sym = ctx->symbols;
        const uint32_t *position = NULL; /* each distinct row's symbol row, when row classes reorder them */
        if (h.stage == PMC_CODEC_STAGE_PACKED) {
            if (avail - at < 1) return err(msg, msg_len, PMC_CODEC_ECORRUPT, "truncated symbols");
            unsigned w = payload[at++];
            if (w != h.code_bits || pmc_codec_packed_bytes(n_sym, w) > avail - at)
                return err(msg, msg_len, PMC_CODEC_ECORRUPT, "invalid packed symbols");
            pmc_codec_unpack(payload + at, n_sym, w, sym);
            at += pmc_codec_packed_bytes(n_sym, w);
        } else {
            uint64_t used = 0;
            rc = pmc_codec_classes_decode(ctx, payload + at, avail - at, unique, h.cols,
                                          (h.flags & PMC_CODEC_FLAG_WIDE) != 0, &used, &position, msg, msg_len);
            if (rc) return rc;
            at += used;
        }
        uint64_t exc_bytes = (uint64_t)h.exceptions * es;
        if (avail - at != exc_bytes)
            return err(msg, msg_len, PMC_CODEC_ECORRUPT, "%llu bytes of exceptions where %u need %llu",
                       (unsigned long long)(avail - at), h.exceptions, (unsigned long long)exc_bytes);
        const uint8_t *exc = payload + at;
        uint32_t used_exc = 0;
        const double step = 2.0 * h.bound;
        /* 8-bit symbols: each one's element, computed once. */
        uint8_t value[256 * 4];
        int narrow = !(h.flags & PMC_CODEC_FLAG_WIDE);
        if (narrow && es == 4) {
            for (uint32_t s = 1; s < 256; s++) {
                uint32_t z = s - 1u;
                float f = (float)((double)((int32_t)(z >> 1) ^ -(int32_t)(z & 1u)) * step);
                memcpy(value + 4 * s, &f, 4);
            }
        } else if (narrow) {
            for (uint32_t s = 1; s < 256; s++) {
                uint32_t z = s - 1u;
                pmc_codec_store(value, s, (int)h.dtype, (double)((int64_t)(z >> 1) ^ -(int64_t)(z & 1u)) * step);
            }
        }
        for (uint32_t u = 0; u < unique; u++) {
            uint8_t *row = out + (uint64_t)ctx->first[u] * row_bytes;
            const uint16_t *s = sym + (uint64_t)(position ? position[u] : u) * h.cols;
            if (narrow && es == 4) {
                /* The common case, with fixed-size copies the compiler turns into moves. */
                for (uint32_t c = 0; c < h.cols; c++) {
                    if (s[c] == 0) {
                        if (used_exc == h.exceptions)
                            return err(msg, msg_len, PMC_CODEC_ECORRUPT, "more exception marks than exceptions");
                        memcpy(row + 4 * c, exc + (uint64_t)used_exc++ * 4, 4);
                    } else {
                        memcpy(row + 4 * c, value + 4 * (size_t)(s[c] & 0xFF), 4);
                    }
                }
                continue;
            }
            for (uint32_t c = 0; c < h.cols; c++) {
                if (s[c] == 0) {
                    if (used_exc == h.exceptions)
                        return err(msg, msg_len, PMC_CODEC_ECORRUPT, "more exception marks than exceptions");
                    memcpy(row + c * es, exc + (uint64_t)used_exc++ * es, es);
                } else if (narrow) {
                    memcpy(row + c * es, value + (size_t)(s[c] & 0xFF) * es, es);
                } else {
                    uint32_t z = (uint32_t)s[c] - 1u;
                    int64_t code = (int64_t)(z >> 1) ^ -(int64_t)(z & 1u);
                    pmc_codec_store(row, c, (int)h.dtype, (double)code * step);
                }
            }
        }
        if (used_exc != h.exceptions)
            return err(msg, msg_len, PMC_CODEC_ECORRUPT, "%u exceptions stored, %u marked", h.exceptions, used_exc);
    }
    /* Repeated rows: copies of their first occurrence. */
    if (h.flags & PMC_CODEC_FLAG_DEDUP)
        for (uint64_t r = 0; r < rows; r++) {
            uint32_t src = ctx->first[ctx->row_map[r]];
            if (src != r) memcpy(out + r * row_bytes, out + (uint64_t)src * row_bytes, row_bytes);
        }
    return PMC_CODEC_OK;
}

/* The codec without Python: the error bound on every element for random
 * tensors of each dtype, bound and stage (repeated rows, constant rows,
 * NaN and infinities, extreme and subnormal values); every truncation and
 * every single-byte change of valid buffers rejected with ECORRUPT (never a
 * read out of bounds: run under AddressSanitizer and valgrind); the row map
 * of repeated rows in both its forms, the Huffman stage's row classes, and
 * payload changes and truncations behind recomputed
 * CRCs (decoded or rejected, never out of bounds); the Huffman coder on its
 * own (written in pieces or at once, every length modulo its four-symbol
 * steps, codes outside an incomplete code rejected); the value range with
 * non-finite values in every lane; bad
 * arguments; the 16-bit conversions at known values.
 *
 * PMC_TEST_QUICK=1: fewer cases (valgrind). */
#include <math.h>

#include "codec/codec_internal.h"
#include "testutil.h"

static int g_quick;
static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint64_t next_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double uniform(void) { return (double)(next_u64() >> 11) * 0x1p-53; }

/* A (rows x cols) float64 pattern of the given kind. */
static void fill(double *x, uint32_t rows, uint32_t cols, int kind) {
    uint32_t pool = 1 + (uint32_t)(next_u64() % 7);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++) {
            double v;
            switch (kind) {
            case 0: v = (uniform() - 0.5) * 0.2; break;                      /* embeddings */
            case 1: v = ((r % pool) * 31 + c) % 17 * 0.01 - 0.08; break;     /* few distinct rows */
            case 2: v = 1.25; break;                                          /* constant */
            case 3: v = (uniform() - 0.5) * 6e4; break;                      /* wide range (float16's edge) */
            case 4: v = 1.0 + uniform() * 1e-6; break;                        /* tiny range */
            case 5: v = (uniform() < 0.5 ? -1 : 1) * ldexp(uniform(), (int)(next_u64() % 200) - 100); break;
            default: v = uniform(); break;
            }
            if (kind == 6) { /* specials sprinkled in */
                uint64_t k = next_u64() % 10;
                v = k == 0 ? NAN : k == 1 ? INFINITY : k == 2 ? -INFINITY : v;
            }
            x[(size_t)r * cols + c] = v;
        }
}

static void check_roundtrip(pmc_codec_ctx *ctx, int dtype, uint32_t rows, uint32_t cols, int kind, double bound,
                            int relative, int stage) {
    size_t es = pmc_codec_dtype_size(dtype), n = (size_t)rows * cols;
    double *x = malloc(n * sizeof(double) + 8);
    uint8_t *in = malloc(n * es + 8), *dec = malloc(n * es + 8);
    uint64_t cap = pmc_codec_max_bytes(rows, cols, dtype);
    uint8_t *buf = malloc(cap);
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    fill(x, rows, cols, kind);
    for (size_t i = 0; i < n; i++) pmc_codec_store(in, i, dtype, x[i]);
    uint64_t len = 0;
    int rc = pmc_codec_compress(ctx, in, rows, cols, dtype, bound, relative, stage, buf, cap, &len, msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    pmc_codec_header h;
    rc = pmc_codec_read_header(buf, len, &h, msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    rc = pmc_codec_decompress(ctx, buf, len, dec, n * es, msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    /* The bound applied: recomputed here from the finite values. */
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = pmc_codec_load(in, i, dtype);
        if (isfinite(v)) {
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
    }
    double want = relative ? (hi >= lo ? bound * (hi - lo) : 0.0) : bound;
    if (h.stage != PMC_CODEC_STAGE_EXACT)
        CHECK(fabs(h.bound - want) <= 1e-12 * want, "bound %g, expected %g", h.bound, want);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        double a = pmc_codec_load(in, i, dtype), b = pmc_codec_load(dec, i, dtype);
        int same = (isnan(a) && isnan(b)) || a == b || fabs(a - b) <= h.bound;
        if (h.stage == PMC_CODEC_STAGE_EXACT) same = memcmp(in + i * es, dec + i * es, es) == 0;
        if (!same) {
            bad++;
            CHECK(same, "dtype %d kind %d stage %d bound %g: element %zu is %.17g, decoded %.17g (bound %g)", dtype,
                  kind, stage, bound, i, a, b, h.bound);
        }
    }
    free(x);
    free(in);
    free(dec);
    free(buf);
}

/* Every truncation and every single-byte change of a valid buffer: ECORRUPT (or EVERSION). */
static void check_corruption(pmc_codec_ctx *ctx, int stage, int kind) {
    uint32_t rows = 48, cols = 9;
    size_t n = (size_t)rows * cols;
    double *x = malloc(n * sizeof(double));
    float *in = malloc(n * 4), *dec = malloc(n * 4);
    uint64_t cap = pmc_codec_max_bytes(rows, cols, PMC_CODEC_F32);
    uint8_t *buf = malloc(cap), *copy = malloc(cap);
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    fill(x, rows, cols, kind);
    for (size_t i = 0; i < n; i++) in[i] = (float)x[i];
    uint64_t len = 0;
    int rc = pmc_codec_compress(ctx, in, rows, cols, PMC_CODEC_F32, 0.02, 1, stage, buf, cap, &len, msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    for (uint64_t cut = 0; cut < len; cut++) {
        /* An exact-size heap copy: any read past `cut` is an ASan/valgrind error. */
        uint8_t *t = malloc(cut ? cut : 1);
        memcpy(t, buf, cut);
        rc = pmc_codec_decompress(ctx, t, cut, dec, n * 4, msg, sizeof msg);
        CHECK(rc == PMC_CODEC_ECORRUPT, "truncated to %llu of %llu: status %d", (unsigned long long)cut,
              (unsigned long long)len, rc);
        free(t);
    }
    uint64_t step = g_quick ? 7 : 1;
    for (uint64_t at = 0; at < len; at += step) {
        for (int flip = 1; flip < 256; flip <<= 2) {
            memcpy(copy, buf, len);
            copy[at] ^= (uint8_t)flip;
            rc = pmc_codec_decompress(ctx, copy, len, dec, n * 4, msg, sizeof msg);
            CHECK(rc == PMC_CODEC_ECORRUPT || rc == PMC_CODEC_EVERSION, "byte %llu ^ 0x%x: status %d",
                  (unsigned long long)at, flip, rc);
        }
    }
    free(x);
    free(in);
    free(dec);
    free(buf);
    free(copy);
}

/* Both CRCs of buf[0..len) recomputed, so that a changed payload reaches the parser. */
static void fix_crcs(const pmc_codec_ctx *ctx, uint8_t *buf, uint64_t len) {
    uint32_t crc = pmc_codec_crc32(ctx->crc_tables, 0, buf + PMC_CODEC_HEADER_BYTES, len - PMC_CODEC_HEADER_BYTES);
    memcpy(buf + 56, &crc, 4);
    crc = pmc_codec_crc32(ctx->crc_tables, 0, buf, 60);
    memcpy(buf + 60, &crc, 4);
}

/* rows x cols float32 of `unique` distinct random rows, row r holding one drawn
 * from a skewed (skew != 0: about 1/(k+1)) or uniform distribution, every distinct row used. */
static float *repeated_rows(uint32_t rows, uint32_t cols, uint32_t unique, int skew) {
    float *pool = malloc((size_t)unique * cols * 4), *x = malloc((size_t)rows * cols * 4);
    for (size_t i = 0; i < (size_t)unique * cols; i++) pool[i] = (float)(uniform() - 0.5);
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t u = r < unique ? r : (uint32_t)(next_u64() % unique);
        if (skew && r >= unique) u = (uint32_t)((double)unique / (1.0 + uniform() * (double)unique)) % unique;
        memcpy(x + (size_t)r * cols, pool + (size_t)u * cols, (size_t)cols * 4);
    }
    /* Shuffle rows, so that first occurrences are spread out. */
    float *tmp = malloc((size_t)cols * 4);
    for (uint32_t r = rows - 1; r > 0; r--) {
        uint32_t o = (uint32_t)(next_u64() % (r + 1));
        memcpy(tmp, x + (size_t)r * cols, (size_t)cols * 4);
        memcpy(x + (size_t)r * cols, x + (size_t)o * cols, (size_t)cols * 4);
        memcpy(x + (size_t)o * cols, tmp, (size_t)cols * 4);
    }
    free(tmp);
    free(pool);
    return x;
}

/* The row map: each form where it is the smaller, exact round trips (escapes past 255 distinct
 * rows included), and changed payload bytes behind valid CRCs decoded or rejected cleanly. */
static void check_rowmap(pmc_codec_ctx *ctx) {
    const struct {
        uint32_t rows, unique;
        int skew, form; /* the form expected: 0 packed, 1 split */
    } cases[] = {{24, 3, 0, 0}, {2048, 600, 1, 1}, {2048, 255, 1, 1}, {2048, 256, 1, 1}, {4000, 1500, 1, 1},
                 {300, 299, 0, -1}};
    const uint32_t cols = 4;
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        uint32_t rows = cases[k].rows;
        float *x = repeated_rows(rows, cols, cases[k].unique, cases[k].skew);
        float *dec = malloc((size_t)rows * cols * 4);
        uint64_t cap = pmc_codec_max_bytes(rows, cols, PMC_CODEC_F32), len = 0;
        uint8_t *buf = malloc(cap), *copy = malloc(cap);
        /* A tiny bound: exact rows, so the decoded batch must equal the input bit for bit. */
        int rc = pmc_codec_compress(ctx, x, rows, cols, PMC_CODEC_F32, 1e-30, 0, PMC_CODEC_STAGE_AUTO, buf, cap, &len,
                                    msg, sizeof msg);
        CHECK_RC(rc, PMC_CODEC_OK, msg);
        pmc_codec_header h;
        CHECK_RC(pmc_codec_read_header(buf, len, &h, msg, sizeof msg), PMC_CODEC_OK, msg);
        CHECK(h.unique_rows == cases[k].unique, "case %zu: %u distinct rows, expected %u", k, h.unique_rows,
              cases[k].unique);
        CHECK(cases[k].form < 0 || buf[PMC_CODEC_HEADER_BYTES] == cases[k].form, "case %zu: row map form %u", k,
              buf[PMC_CODEC_HEADER_BYTES]);
        rc = pmc_codec_decompress(ctx, buf, len, dec, (uint64_t)rows * cols * 4, msg, sizeof msg);
        CHECK_RC(rc, PMC_CODEC_OK, msg);
        CHECK(memcmp(dec, x, (size_t)rows * cols * 4) == 0, "case %zu: decoded rows differ", k);
        /* Changes in the row map's bytes (it starts the payload). */
        uint64_t span = len - PMC_CODEC_HEADER_BYTES < 600 ? len - PMC_CODEC_HEADER_BYTES : 600;
        uint64_t step = g_quick ? 5 : 1;
        for (uint64_t at = PMC_CODEC_HEADER_BYTES; at < PMC_CODEC_HEADER_BYTES + span; at += step) {
            for (int flip = 1; flip < 256; flip <<= 3) {
                memcpy(copy, buf, len);
                copy[at] ^= (uint8_t)flip;
                fix_crcs(ctx, copy, len);
                rc = pmc_codec_decompress(ctx, copy, len, dec, (uint64_t)rows * cols * 4, msg, sizeof msg);
                CHECK(rc == PMC_CODEC_OK || rc == PMC_CODEC_ECORRUPT, "case %zu, byte %llu ^ 0x%x: status %d", k,
                      (unsigned long long)at, flip, rc);
            }
        }
        free(x);
        free(dec);
        free(buf);
        free(copy);
    }
}

/* Row classes: rows of very different magnitudes get more than one class (the first byte of the
 * codes when no row repeats), decode within the bound, and changed bytes behind valid CRCs are
 * decoded or rejected cleanly. */
static void check_classes(pmc_codec_ctx *ctx) {
    const uint32_t rows = 600, cols = 16;
    const double bound = 0.003; /* codes up to about 83: 8-bit symbols */
    float *x = malloc((size_t)rows * cols * 4), *dec = malloc((size_t)rows * cols * 4);
    for (uint32_t r = 0; r < rows; r++) {
        double scale = pow(10.0, -1.5 * uniform()); /* 0.03 .. 1 */
        for (uint32_t c = 0; c < cols; c++) x[(size_t)r * cols + c] = (float)((uniform() - 0.5) * scale);
    }
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    uint64_t cap = pmc_codec_max_bytes(rows, cols, PMC_CODEC_F32), len = 0;
    uint8_t *buf = malloc(cap), *copy = malloc(cap);
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    int rc = pmc_codec_compress(ctx, x, rows, cols, PMC_CODEC_F32, bound, 1, PMC_CODEC_STAGE_HUFFMAN, buf, cap, &len,
                                msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    pmc_codec_header h;
    CHECK_RC(pmc_codec_read_header(buf, len, &h, msg, sizeof msg), PMC_CODEC_OK, msg);
    CHECK(!(h.flags & PMC_CODEC_FLAG_DEDUP) && !(h.flags & PMC_CODEC_FLAG_WIDE), "flags 0x%x", h.flags);
    CHECK(buf[PMC_CODEC_HEADER_BYTES] > 1, "rows of 0.03 to 1 got %u row class(es)", buf[PMC_CODEC_HEADER_BYTES]);
    rc = pmc_codec_decompress(ctx, buf, len, dec, (uint64_t)rows * cols * 4, msg, sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    double worst = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) worst = fmax(worst, fabs((double)dec[i] - (double)x[i]));
    CHECK(worst <= bound * (hi - lo), "error %g above the bound %g", worst, bound * (hi - lo));
    uint64_t step = g_quick ? 5 : 1;
    for (uint64_t at = PMC_CODEC_HEADER_BYTES; at < len && at < PMC_CODEC_HEADER_BYTES + 400; at += step)
        for (int flip = 1; flip < 256; flip <<= 3) {
            memcpy(copy, buf, len);
            copy[at] ^= (uint8_t)flip;
            fix_crcs(ctx, copy, len);
            rc = pmc_codec_decompress(ctx, copy, len, dec, (uint64_t)rows * cols * 4, msg, sizeof msg);
            CHECK(rc == PMC_CODEC_OK || rc == PMC_CODEC_ECORRUPT, "byte %llu ^ 0x%x: status %d", (unsigned long long)at,
                  flip, rc);
        }
    /* Every truncation of the codes section (CRCs fixed, so the layout check answers). */
    for (uint64_t cut = PMC_CODEC_HEADER_BYTES; cut < len; cut += step) {
        memcpy(copy, buf, cut);
        uint64_t payload = cut - PMC_CODEC_HEADER_BYTES;
        memcpy(copy + 48, &payload, 8);
        fix_crcs(ctx, copy, cut);
        rc = pmc_codec_decompress(ctx, copy, cut, dec, (uint64_t)rows * cols * 4, msg, sizeof msg);
        CHECK(rc == PMC_CODEC_ECORRUPT, "cut at %llu: status %d", (unsigned long long)cut, rc);
    }
    free(x);
    free(dec);
    free(buf);
    free(copy);
}

static void check_bad_arguments(pmc_codec_ctx *ctx) {
    float in[4] = {1, 2, 3, 4};
    uint8_t out[512];
    uint64_t len;
    char msg[PMC_CODEC_MESSAGE_BYTES];
    CHECK(pmc_codec_compress(ctx, in, 2, 2, PMC_CODEC_F32, 0.0, 1, -1, out, sizeof out, &len, msg, sizeof msg) ==
              PMC_CODEC_EINVAL, "bound 0 accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 2, PMC_CODEC_F32, NAN, 1, -1, out, sizeof out, &len, msg, sizeof msg) ==
              PMC_CODEC_EINVAL, "NaN bound accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 2, 7, 0.1, 1, -1, out, sizeof out, &len, msg, sizeof msg) == PMC_CODEC_EINVAL,
          "dtype 7 accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 0, PMC_CODEC_F32, 0.1, 1, -1, out, sizeof out, &len, msg, sizeof msg) ==
              PMC_CODEC_EINVAL, "0 columns accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 2, PMC_CODEC_F32, 0.1, 1, 9, out, sizeof out, &len, msg, sizeof msg) ==
              PMC_CODEC_EINVAL, "stage 9 accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 2, PMC_CODEC_F32, 0.1, 1, -1, out, 65, &len, msg, sizeof msg) ==
              PMC_CODEC_ESPACE, "a too small output accepted");
    CHECK(pmc_codec_compress(ctx, in, 2, 2, PMC_CODEC_F32, 0.1, 1, -1, out, sizeof out, &len, msg, sizeof msg) ==
              PMC_CODEC_OK, "a good call after bad ones failed: %s", msg);
    float dec[4];
    CHECK(pmc_codec_decompress(ctx, out, len, dec, 12, msg, sizeof msg) == PMC_CODEC_EINVAL, "short output accepted");
    out[4] = PMC_CODEC_VERSION + 1;
    CHECK(pmc_codec_read_header(out, len, &(pmc_codec_header){0}, msg, sizeof msg) == PMC_CODEC_EVERSION,
          "a later version accepted");
}

static void check_conversions(void) {
    /* float16: the largest normal, the smallest subnormal, rounding to even, overflow. */
    uint8_t h[2];
    pmc_codec_store(h, 0, PMC_CODEC_F16, 65504.0);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_F16) == 65504.0, "f16 max");
    pmc_codec_store(h, 0, PMC_CODEC_F16, 0x1p-24);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_F16) == 0x1p-24, "f16 smallest subnormal");
    pmc_codec_store(h, 0, PMC_CODEC_F16, 1.0 + 0x1p-11);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_F16) == 1.0, "f16 ties to even");
    pmc_codec_store(h, 0, PMC_CODEC_F16, 65520.0);
    CHECK(isinf(pmc_codec_load(h, 0, PMC_CODEC_F16)), "f16 overflow");
    pmc_codec_store(h, 0, PMC_CODEC_F16, -0x1p-14);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_F16) == -0x1p-14, "f16 smallest normal");
    pmc_codec_store(h, 0, PMC_CODEC_BF16, 1.0 + 0x1p-8);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_BF16) == 1.0, "bf16 ties to even");
    pmc_codec_store(h, 0, PMC_CODEC_BF16, 3.0);
    CHECK(pmc_codec_load(h, 0, PMC_CODEC_BF16) == 3.0, "bf16 exact");
    /* CRC-32 of "123456789" is 0xCBF43926, both ways. */
    uint32_t tables[8][256];
    pmc_codec_crc32_tables(tables);
    CHECK(pmc_codec_crc32(tables, 0, "123456789", 9) == 0xCBF43926u, "crc32 sliced");
    CHECK(pmc_codec_crc32_bits(0, "123456789", 9) == 0xCBF43926u, "crc32 bitwise");
}

/* The Huffman coder alone: n symbols of a skewed alphabet (stride 1 or 2) coded at once and in
 * pieces give the same block, which decodes to the symbols for every n modulo the decoder's
 * four-symbol steps; a stream holding a code an incomplete code leaves unused is rejected,
 * wherever it sits (a four-symbol step or the tail). */
static void check_huffman(void) {
    enum { N = 20011 }; /* past the decoder's threshold for its table of several symbols a lookup */
    uint8_t *in = malloc(2 * N), *dec = malloc(2 * N);
    uint8_t *a = malloc(pmc_codec_huffman_max_bytes(N)), *b = malloc(pmc_codec_huffman_max_bytes(N));
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    for (uint64_t n = 0; n <= N; n = n < 24 ? n + 1 : n < 300 ? n + 17 : n < 8000 ? n + 2999 : n + 1999) {
        for (size_t stride = 1; stride <= 2; stride++) {
            uint64_t freq[256] = {0};
            int wide_alphabet = n % 3 == 0; /* long codes too: windows that start with no whole short code */
            for (uint64_t i = 0; i < n; i++) {
                uint64_t r = next_u64();
                in[i * stride] = (uint8_t)((r & 3) ? (r >> 8) % 3 : (r >> 8) % (wide_alphabet ? 256 : 40));
                freq[in[i * stride]]++;
            }
            uint64_t la = pmc_codec_huffman_encode(in, n, stride, a);
            pmc_huffman_encoder e;
            pmc_codec_huffman_begin(&e, freq, b);
            for (uint64_t i = 0; i < n;) { /* pieces of 1 to 7 symbols */
                uint64_t k = 1 + next_u64() % 7;
                k = k < n - i ? k : n - i;
                pmc_codec_huffman_put(&e, in + i * stride, k, stride);
                i += k;
            }
            uint64_t lb = pmc_codec_huffman_end(&e);
            CHECK(la == lb && memcmp(a, b, la) == 0, "n=%llu stride %zu: pieces give another block",
                  (unsigned long long)n, stride);
            uint64_t used = 0;
            memset(dec, 0xEE, 2 * N);
            int rc = pmc_codec_huffman_decode(a, la, n, dec, stride, &used, msg, sizeof msg);
            CHECK_RC(rc, PMC_CODEC_OK, msg);
            CHECK(used == la, "n=%llu: decoder used %llu of %llu bytes", (unsigned long long)n,
                  (unsigned long long)used, (unsigned long long)la);
            for (uint64_t i = 0; i < n; i++)
                if (dec[i * stride] != in[i * stride]) {
                    CHECK(0, "n=%llu stride %zu: symbol %llu decoded as %u, was %u", (unsigned long long)n, stride,
                          (unsigned long long)i, dec[i * stride], in[i * stride]);
                    break;
                }
            if (stride == 2) /* the other plane untouched */
                for (uint64_t i = 0; i < n; i++)
                    if (dec[2 * i + 1] != 0xEE) {
                        CHECK(0, "n=%llu: byte %llu of the other plane written", (unsigned long long)n,
                              (unsigned long long)(2 * i + 1));
                        break;
                    }
        }
    }
    /* Symbols 0 and 1 with lengths 1 and 2: code 0 is "0", code 1 "01" (bit-reversed: read "1" then
     * "0"); "11" is no code. Streams of valid codes with "11" at symbol position `bad`. */
    const unsigned counts[] = {1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 37, 40, 71, 102, 133, 164, 195, 9001, 20000};
    uint8_t *blk = malloc(7 + 2 * 20000 / 8 + 8);
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        unsigned count = counts[ci];
        for (unsigned bad = 0; bad < count; bad += (count < 40 ? 5 : count < 1000 ? 13 : 997)) {
            memset(blk, 0, 7 + 2 * 20000 / 8 + 8);
            blk[1] = 2;
            blk[2] = 0x21;
            uint64_t nbits = 0;
            for (unsigned i = 0; i < count; i++) {
                unsigned code = i == bad ? 3u : (i & 1) ? 1u : 0u, len = (i == bad || (i & 1)) ? 2u : 1u;
                for (unsigned k = 0; k < len; k++, nbits++)
                    blk[7 + nbits / 8] |= (uint8_t)(((code >> k) & 1u) << (nbits % 8));
            }
            uint32_t bytes = (uint32_t)((nbits + 7) / 8);
            memcpy(blk + 3, &bytes, 4);
            uint64_t used = 0;
            int rc = pmc_codec_huffman_decode(blk, 7 + bytes, count, dec, 1, &used, msg, sizeof msg);
            CHECK(rc == PMC_CODEC_ECORRUPT && strstr(msg, "invalid Huffman code") != NULL,
                  "no code at symbol %u of %u: status %d, %s", bad, count, rc, msg);
        }
    }
    free(blk);
    free(in);
    free(dec);
    free(a);
    free(b);
}

/* The value range ignores NaN and infinities wherever they sit in a row (the vector lanes of
 * the range kernel), and a tensor of no finite value codes every element as an exception. */
static void check_range_lanes(pmc_codec_ctx *ctx) {
    const uint32_t rows = 3, cols = 37;
    float x[3 * 37], dec[3 * 37];
    uint64_t cap = pmc_codec_max_bytes(rows, cols, PMC_CODEC_F32), len = 0;
    uint8_t *buf = malloc(cap);
    char msg[PMC_CODEC_MESSAGE_BYTES] = "";
    const float odd[3] = {NAN, INFINITY, -INFINITY};
    for (uint32_t lane = 0; lane < cols; lane++) {
        for (uint32_t i = 0; i < rows * cols; i++) x[i] = (float)(i % 7) * 0.25f - 0.5f; /* range 1.5 */
        for (uint32_t r = 0; r < rows; r++) x[r * cols + lane] = odd[(lane + r) % 3];
        int rc = pmc_codec_compress(ctx, x, rows, cols, PMC_CODEC_F32, 0.1, 1, PMC_CODEC_STAGE_AUTO, buf, cap, &len,
                                    msg, sizeof msg);
        CHECK_RC(rc, PMC_CODEC_OK, msg);
        pmc_codec_header h;
        CHECK_RC(pmc_codec_read_header(buf, len, &h, msg, sizeof msg), PMC_CODEC_OK, msg);
        CHECK(fabs(h.bound - 0.15) < 1e-12, "lane %u: bound %g, expected 0.1 x the finite range 1.5", lane, h.bound);
        CHECK(h.exceptions == rows, "lane %u: %u exceptions for %u non-finite values", lane, h.exceptions, rows);
        CHECK_RC(pmc_codec_decompress(ctx, buf, len, dec, sizeof dec, msg, sizeof msg), PMC_CODEC_OK, msg);
        CHECK(memcmp(dec + lane, x + lane, 4) == 0, "lane %u: a non-finite value not kept exactly", lane);
    }
    for (uint32_t i = 0; i < rows * cols; i++) x[i] = odd[i % 3];
    int rc = pmc_codec_compress(ctx, x, rows, cols, PMC_CODEC_F32, 0.1, 1, PMC_CODEC_STAGE_AUTO, buf, cap, &len, msg,
                                sizeof msg);
    CHECK_RC(rc, PMC_CODEC_OK, msg);
    CHECK_RC(pmc_codec_decompress(ctx, buf, len, dec, sizeof dec, msg, sizeof msg), PMC_CODEC_OK, msg);
    CHECK(memcmp(dec, x, sizeof x) == 0, "no finite value: the tensor not kept exactly");
    free(buf);
}

int main(void) {
    const char *q = getenv("PMC_TEST_QUICK");
    g_quick = q != NULL && q[0] != '\0' && strcmp(q, "0") != 0;
    pmc_codec_ctx *ctx = pmc_codec_ctx_new();
    CHECK(ctx != NULL, "no context");
    if (!ctx) return 1;
    check_conversions();
    check_bad_arguments(ctx);
    check_rowmap(ctx);
    check_classes(ctx);
    check_huffman();
    check_range_lanes(ctx);
    const double bounds[] = {1e-9, 1e-4, 0.01, 0.05, 0.5};
    const int stages[] = {PMC_CODEC_STAGE_AUTO, PMC_CODEC_STAGE_EXACT, PMC_CODEC_STAGE_PACKED, PMC_CODEC_STAGE_HUFFMAN};
    const uint32_t shapes[][2] = {{1, 1}, {3, 5}, {64, 16}, {257, 3}, {0, 4}};
    int cases = 0;
    for (int dtype = 0; dtype < 3; dtype++)
        for (int kind = 0; kind < 7; kind++)
            for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++)
                for (int s = 0; s < 4; s++)
                    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
                        if (g_quick && (next_u64() % 4)) continue;
                        check_roundtrip(ctx, dtype, shapes[sh][0], shapes[sh][1], kind, bounds[b], (int)(b & 1),
                                        stages[s]);
                        cases++;
                    }
    for (int s = 0; s < 4; s++)
        for (int kind = 0; kind < 7; kind += g_quick ? 3 : 1) check_corruption(ctx, stages[s], kind);
    pmc_codec_ctx_free(ctx);
    printf("codec: %d round trips, corruption checks: %s\n", cases, t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}

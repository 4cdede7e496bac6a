/* Large copies with streaming stores on x86-64 (SSE2 is part of its
 * baseline, so no CPU check is needed); memcpy elsewhere. */
#include "bulk_copy.h"

#include "pymcoll.h"

#include <stdio.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__x86_64__)
#include <emmintrin.h>

/* Streams the whole 64-byte runs of n bytes from s to a 16-byte-aligned d,
 * unfenced; returns the bytes done. */
static uint64_t stream_run(unsigned char *d, const unsigned char *s, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        const __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    return i;
}

static void copy_streaming(unsigned char *d, const unsigned char *s, uint64_t n)
{
    /* Streaming stores want an aligned destination; the source may be anywhere. */
    const uint64_t head = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const uint64_t i = stream_run(d, s, n);
    memcpy(d + i, s + i, n - i);
    /* Streaming stores are weakly ordered: without the fence a peer told
     * "done" by a later flag store could still read the old bytes. */
    _mm_sfence();
}
#endif

void pmc_stream_lines(void *dst, const void *src, uint64_t n)
{
#if defined(__x86_64__)
    (void)stream_run(dst, src, n);
#else
    memcpy(dst, src, n);
#endif
}

void pmc_stream_fence(void)
{
#if defined(__x86_64__)
    _mm_sfence();
#endif
}

void pmc_bulk_copy(void *dst, const void *src, uint64_t n, uint64_t stream_min)
{
#if defined(__x86_64__)
    if (n >= stream_min && n >= 64) {
        copy_streaming(dst, src, n);
        return;
    }
#else
    (void)stream_min;
#endif
    memcpy(dst, src, n);
}

/* One number from a sysfs file, with an optional K/M/G suffix; 0 if unreadable. */
static uint64_t sysfs_number(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL) return 0;
    unsigned long long v = 0;
    char unit = 0;
    const int got = fscanf(fp, "%llu%c", &v, &unit);
    fclose(fp);
    if (got < 1) return 0;
    const uint64_t scale = unit == 'K' ? 1u << 10 : unit == 'M' ? 1u << 20 : unit == 'G' ? 1u << 30 : 1;
    return (uint64_t)v * scale;
}

/* Bytes of the largest cache level of CPU 0 (Linux sysfs); 0 if unknown. */
static uint64_t llc_bytes(void)
{
    /* sysfs, not sysconf: on some virtual machines the C library reports
     * the host's whole cache (320 MiB where the guest's is 32). */
    uint64_t best_level = 0, bytes = 0;
    for (int i = 0; i < 16; ++i) {
        char path[96];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        const uint64_t level = sysfs_number(path);
        if (level == 0) continue;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        const uint64_t size = sysfs_number(path);
        if (level > best_level || (level == best_level && size > bytes)) {
            best_level = level;
            bytes = size;
        }
    }
    return bytes;
}

uint64_t pmc_stream_min_default(int local_size)
{
    const uint64_t floor = (uint64_t)1 << 20, ranks = (uint64_t)(local_size > 1 ? local_size : 1);
    const uint64_t scaled = llc_bytes() / (2 * ranks);
    return scaled > floor ? scaled : floor;
}

uint64_t pmc_cell_movsb_min_default(void)
{
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    /* Leaf 7, EBX bit 9: enhanced rep movsb/stosb. */
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 9))) return PMC_CELL_MOVSB_MIN;
#endif
    return UINT64_MAX;
}

/* Large copies with streaming stores on x86-64 (SSE2 is part of its
 * baseline, so no CPU check is needed); memcpy elsewhere. */
#include "bulk_copy.h"

#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

static void copy_streaming(unsigned char *d, const unsigned char *s, uint64_t n)
{
    /* Streaming stores want an aligned destination; the source may be anywhere. */
    const uint64_t head = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
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
    memcpy(d + i, s + i, n - i);
    /* Streaming stores are weakly ordered: without the fence a peer told
     * "done" by a later flag store could still read the old bytes. */
    _mm_sfence();
}
#endif

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

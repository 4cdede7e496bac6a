/* The Mersenne Twister (Matsumoto and Nishimura, 1998) as CPython's random
 * module seeds and reads it, so that LeCaR's draws equal its reference's. */
#include "cachesim_internal.h"

enum { MT_N = 624, MT_M = 397 };

static void seed_one(pmc_mt19937 *g, uint32_t s)
{
    g->mt[0] = s;
    for (uint32_t i = 1; i < MT_N; i++)
        g->mt[i] = 1812433253U * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + i;
    g->mti = MT_N;
}

void pmc_mt_seed(pmc_mt19937 *g, const uint32_t *key, size_t len)
{
    seed_one(g, 19650218U);
    uint32_t *mt = g->mt;
    size_t i = 1, j = 0;
    for (size_t k = (MT_N > len ? MT_N : len); k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
        i++;
        j++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
        if (j >= len)
            j = 0;
    }
    for (size_t k = MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
        i++;
        if (i >= MT_N) {
            mt[0] = mt[MT_N - 1];
            i = 1;
        }
    }
    mt[0] = 0x80000000U; /* a non-zero state */
    g->mti = MT_N;
}

static uint32_t next_word(pmc_mt19937 *g)
{
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t *mt = g->mt;
    uint32_t y;
    if (g->mti >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & 0x80000000U) | (mt[kk + 1] & 0x7fffffffU);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1U];
        }
        y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1U];
        g->mti = 0;
    }
    y = mt[g->mti++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= y >> 18;
    return y;
}

double pmc_mt_random(pmc_mt19937 *g)
{
    /* 53 random bits: 27 from one word, 26 from the next. */
    uint32_t a = next_word(g) >> 5, b = next_word(g) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

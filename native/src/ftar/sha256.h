/* SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104): the MACs and the
 * challenge-response of FTAR's connections, with no crypto library needed. */
#ifndef PMC_FTAR_SHA256_H
#define PMC_FTAR_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define PMC_SHA256_BYTES 32
#define PMC_SHA256_BLOCK 64

typedef struct pmc_sha256 {
    uint32_t h[8];
    uint64_t total;            /* bytes hashed */
    uint8_t block[PMC_SHA256_BLOCK];
    size_t used;               /* bytes waiting in block */
} pmc_sha256;

void pmc_sha256_init(pmc_sha256 *s);
void pmc_sha256_update(pmc_sha256 *s, const void *data, size_t len);
void pmc_sha256_final(pmc_sha256 *s, uint8_t out[PMC_SHA256_BYTES]);

/* HMAC in two halves, so that a MAC can cover data in several pieces. */
typedef struct pmc_hmac {
    pmc_sha256 inner, outer;
} pmc_hmac;

void pmc_hmac_init(pmc_hmac *m, const void *key, size_t keylen);
void pmc_hmac_update(pmc_hmac *m, const void *data, size_t len);
void pmc_hmac_final(pmc_hmac *m, uint8_t out[PMC_SHA256_BYTES]);

/* Comparison whose time does not depend on where the inputs differ. */
int pmc_equal_ct(const uint8_t *a, const uint8_t *b, size_t len);

#endif

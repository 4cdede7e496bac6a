/* Connection authentication with the job token: challenge-response over two
 * fresh nonces (the token never crosses the wire), and the connection's MAC
 * key derived from both nonces. */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "pymcoll_ftar.h"
#include "sha256.h"

/* Domain labels keep a client's proof from ever serving as a server's. */
static const char *const role_label[2] = {"pymcoll-ftar-1 client", "pymcoll-ftar-1 server"};

void pmc_ftar_auth_proof(const uint8_t *token, size_t tokenlen, int role, const uint8_t *nonce_server,
                         const uint8_t *nonce_client, const char *identity, uint8_t *out)
{
    pmc_hmac m;
    pmc_hmac_init(&m, token, tokenlen);
    const char *label = role_label[role == PMC_FTAR_ROLE_SERVER];
    pmc_hmac_update(&m, label, strlen(label) + 1);
    pmc_hmac_update(&m, nonce_server, PMC_FTAR_NONCE_BYTES);
    pmc_hmac_update(&m, nonce_client, PMC_FTAR_NONCE_BYTES);
    const char *id = identity != NULL ? identity : "";
    pmc_hmac_update(&m, id, strlen(id) + 1);
    pmc_hmac_final(&m, out);
}

void pmc_ftar_session_key(const uint8_t *token, size_t tokenlen, const uint8_t *nonce_server,
                          const uint8_t *nonce_client, int direction, uint8_t *out)
{
    static const char *const label[2] = {"pymcoll-ftar-1 session client->server",
                                         "pymcoll-ftar-1 session server->client"};
    const char *l = label[direction == PMC_FTAR_SERVER_TO_CLIENT];
    pmc_hmac m;
    pmc_hmac_init(&m, token, tokenlen);
    pmc_hmac_update(&m, l, strlen(l) + 1);
    pmc_hmac_update(&m, nonce_server, PMC_FTAR_NONCE_BYTES);
    pmc_hmac_update(&m, nonce_client, PMC_FTAR_NONCE_BYTES);
    pmc_hmac_final(&m, out);
}

int pmc_ftar_proof_equal(const uint8_t *a, const uint8_t *b) { return pmc_equal_ct(a, b, PMC_SHA256_BYTES); }

int pmc_ftar_random(void *out, size_t len)
{
    uint8_t *p = out;
    while (len > 0) {
        const ssize_t n = getrandom(p, len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

void pmc_ftar_sha256(const void *data, size_t len, uint8_t *out)
{
    pmc_sha256 s;
    pmc_sha256_init(&s);
    pmc_sha256_update(&s, data, len);
    pmc_sha256_final(&s, out);
}

void pmc_ftar_hmac(const uint8_t *key, size_t keylen, const void *data, size_t len, uint8_t *out)
{
    pmc_hmac m;
    pmc_hmac_init(&m, key, keylen);
    pmc_hmac_update(&m, data, len);
    pmc_hmac_final(&m, out);
}

/* A small multilayer perceptron's forward pass, BLOCK input rows at a
 * time: the rows are the vector lanes (one weight times BLOCK activations),
 * and GROUP outputs are summed at once, so that independent chains keep
 * the multipliers busy (one row at a time is bound by the latency of each
 * output's chain of multiply-adds). */
#include <math.h>
#include <string.h>

#include "cachesim_internal.h"

#define fail pmc_cachesim_fail

enum { BLOCK = 8, GROUP = 4 };

/* z[j][r] = b[j] + sum_k a[k][r] w[k][j] for the outputs j0 .. j0+GROUP-1 (all below width). */
static void outputs(float (*a)[BLOCK], uint32_t in, const float *w, const float *b, uint32_t width, uint32_t j0,
                    float (*z)[BLOCK])
{
    float acc[GROUP][BLOCK];
    for (int g = 0; g < GROUP; g++)
        for (int r = 0; r < BLOCK; r++)
            acc[g][r] = b[j0 + g];
    for (uint32_t k = 0; k < in; k++) {
        const float *wk = w + (size_t)k * width + j0;
        for (int g = 0; g < GROUP; g++)
            for (int r = 0; r < BLOCK; r++)
                acc[g][r] += a[k][r] * wk[g];
    }
    memcpy(z + j0, acc, sizeof acc);
}

static void output_one(float (*a)[BLOCK], uint32_t in, const float *w, const float *b, uint32_t width, uint32_t j,
                       float (*z)[BLOCK])
{
    float acc[BLOCK];
    for (int r = 0; r < BLOCK; r++)
        acc[r] = b[j];
    for (uint32_t k = 0; k < in; k++)
        for (int r = 0; r < BLOCK; r++)
            acc[r] += a[k][r] * w[(size_t)k * width + j];
    memcpy(z[j], acc, sizeof acc);
}

int pmc_mlp_predict(const float *x, uint64_t n, uint32_t n_layers, const uint32_t *sizes, const float *params,
                    const float *mean, const float *scale, float *out, char *msg, size_t msg_len)
{
    if (n_layers < 1 || n_layers > PMC_MLP_MAX_LAYERS || !sizes)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "n_layers must be 1..%d, got %u", PMC_MLP_MAX_LAYERS,
                    n_layers);
    for (uint32_t l = 0; l <= n_layers; l++) {
        if (sizes[l] < 1 || sizes[l] > PMC_MLP_MAX_WIDTH)
            return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "sizes[%u] = %u: widths must be 1..%d", l, sizes[l],
                        PMC_MLP_MAX_WIDTH);
    }
    if (sizes[n_layers] != 1)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "the last layer must have width 1, got %u",
                    sizes[n_layers]);
    if (n == 0)
        return PMC_CACHESIM_OK;
    if (!x || !params || !mean || !scale || !out)
        return fail(PMC_CACHESIM_EINVAL, msg, msg_len, "x, params, mean, scale and out must not be NULL");
    const float *w[PMC_MLP_MAX_LAYERS];
    for (uint32_t l = 0, off = 0; l < n_layers; l++) {
        w[l] = params + off;
        off += sizes[l] * sizes[l + 1] + sizes[l + 1];
    }
    _Static_assert(PMC_MLP_MAX_WIDTH % GROUP == 0, "whole groups");
    float a[PMC_MLP_MAX_WIDTH][BLOCK], z[PMC_MLP_MAX_WIDTH][BLOCK];
    const uint32_t n_in = sizes[0];
    for (uint64_t i0 = 0; i0 < n; i0 += BLOCK) {
        uint64_t rows = n - i0 < BLOCK ? n - i0 : BLOCK;
        /* Standardized inputs, transposed into lanes; missing rows of the last block are zeros. */
        for (uint32_t j = 0; j < n_in; j++)
            for (uint64_t r = 0; r < BLOCK; r++)
                a[j][r] = r < rows ? (x[(i0 + r) * n_in + j] - mean[j]) * scale[j] : 0.0f;
        for (uint32_t l = 0; l < n_layers; l++) {
            uint32_t in = sizes[l], width = sizes[l + 1];
            const float *wl = w[l], *b = wl + (size_t)in * width;
            uint32_t j = 0;
            for (; j + GROUP <= width; j += GROUP)
                outputs(a, in, wl, b, width, j, z);
            for (; j < width; j++)
                output_one(a, in, wl, b, width, j, z);
            int relu = l + 1 < n_layers;
            for (uint32_t jj = 0; jj < width; jj++)
                for (int r = 0; r < BLOCK; r++)
                    a[jj][r] = relu && z[jj][r] < 0.0f ? 0.0f : z[jj][r];
        }
        for (uint64_t r = 0; r < rows; r++) {
            float logit = a[0][r] < -30.0f ? -30.0f : (a[0][r] > 30.0f ? 30.0f : a[0][r]);
            out[i0 + r] = 1.0f / (1.0f + expf(-logit));
        }
    }
    return PMC_CACHESIM_OK;
}

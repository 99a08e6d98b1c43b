/* What the GGUF kernels share: the block formats' type ids, Q4_K/Q5_K scale unpacking and the
 * activation rows quantized to int8 per group of 32 inputs (d = max|x| / 127),
 * as llama.cpp quantizes them for its integer dot products. */
#ifndef INFERD_GGUF_COMMON_H
#define INFERD_GGUF_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"

#define GROUP 32
#define MAX_ROWS 8
/* Row functions are inlined with a constant M (see `products`), so their loops
 * over activation rows unroll and the accumulators stay in registers. */
#define INLINE static inline __attribute__((always_inline))

enum { Q4_0 = 2, Q5_0 = 6, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

/* Activation rows quantized per group: q [M][K], d and sum (of q) [M][K/32],
 * and the sums per 16 inputs [M][K/16] (Q6_K's sub-blocks). */
typedef struct {
    int8_t *q;
    float *d;
    int32_t *sum, *sum16;
    int64_t K, groups;
    int M;
} Acts;

/* One input of bf16 or float32 activations (or bias). */
static inline float input_at(const void *x, int is_float, int64_t i) {
    return is_float ? ((const float *)x)[i] : bf16_to_float(((const uint16_t *)x)[i]);
}

static int quantize_rows(const void *x, int x_is_float, int M, int64_t K, Acts *a) {
    a->K = K, a->M = M, a->groups = K / GROUP;
    a->q = aligned_alloc(64, (size_t)((M * K + 63) / 64 * 64));
    a->d = malloc((size_t)(M * a->groups) * sizeof(float));
    a->sum = malloc((size_t)(M * a->groups) * sizeof(int32_t));
    a->sum16 = malloc((size_t)(2 * M * a->groups) * sizeof(int32_t));
    if (!a->q || !a->d || !a->sum || !a->sum16) return -1;
    for (int64_t g = 0; g < M * a->groups; g++) {
        float v[GROUP], amax = 0;
        for (int j = 0; j < GROUP; j++) {
            v[j] = input_at(x, x_is_float, g * GROUP + j);
            amax = fmaxf(amax, fabsf(v[j]));
        }
        float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        int32_t half[2] = {0, 0};
        for (int j = 0; j < GROUP; j++) {
            int8_t q = (int8_t)lrintf(v[j] * inv);
            a->q[g * GROUP + j] = q;
            half[j / 16] += q;
        }
        a->d[g] = d, a->sum[g] = half[0] + half[1];
        a->sum16[2 * g] = half[0], a->sum16[2 * g + 1] = half[1];
    }
    return 0;
}

static void free_rows(Acts *a) { free(a->q), free(a->d), free(a->sum), free(a->sum16); }

static inline const int8_t *act_q(const Acts *a, int m, int64_t g) { return a->q + m * a->K + g * GROUP; }
static inline float act_d(const Acts *a, int m, int64_t g) { return a->d[m * a->groups + g]; }
static inline int32_t act_sum(const Acts *a, int m, int64_t g) { return a->sum[m * a->groups + g]; }
static inline int32_t act_sum16(const Acts *a, int m, int64_t s) { return a->sum16[m * 2 * a->groups + s]; }

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static inline void scale_min_k4(int j, const uint8_t *s, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63, *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

#endif

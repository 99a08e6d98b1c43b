/* Decode attention over the paged KV cache: one query token per sequence.
 *
 * For each sequence and KV head, the query heads that share it score every
 * context slot, softmax, and sum the values: in float32, reading K and V
 * straight from their cache slots (no gathered copy), skipping masked slots.
 * Each sequence is computed on its own, so batching never changes a result.
 *
 * q: bf16, row b's head h at q[b * q_row_stride + h * D]; caches: bf16
 * [slots, Hkv, D]; slots: int64 [B, L]; mask: float32 [B, L], 0 or -inf;
 * out: bf16 [B, H, D]. Threads: OpenMP over (sequence, KV head).
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

static inline float dot(const float *q, const uint16_t *k, int64_t D) {
    int64_t d = 0;
    float sum = 0;
#ifdef __AVX512F__
    __m512 acc = _mm512_setzero_ps();
    for (; d + 16 <= D; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load_bf16(k + d), acc);
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; d < D; d++) sum += q[d] * bf16_to_float(k[d]);
    return sum;
}

static inline void add_scaled(float *acc, float p, const uint16_t *v, int64_t D) {
    int64_t d = 0;
#ifdef __AVX512F__
    __m512 pv = _mm512_set1_ps(p);
    for (; d + 16 <= D; d += 16) _mm512_storeu_ps(acc + d, _mm512_fmadd_ps(pv, load_bf16(v + d), _mm512_loadu_ps(acc + d)));
#endif
    for (; d < D; d++) acc[d] += p * bf16_to_float(v[d]);
}

static int attend(const uint16_t *q, int64_t G, int64_t D, const uint16_t *k_cache, const uint16_t *v_cache,
                  int64_t Hkv, int64_t h, const int64_t *slots, const float *mask, int64_t L, float scale,
                  uint16_t *out) {
    float *qf = malloc((size_t)(G * D) * sizeof(float));
    float *acc = calloc((size_t)(G * D), sizeof(float));
    float *scores = malloc((size_t)(G * L) * sizeof(float));
    if (!qf || !acc || !scores) {
        free(qf), free(acc), free(scores);
        return -1;
    }
    for (int64_t i = 0; i < G * D; i++) qf[i] = bf16_to_float(q[i]);
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) continue;
        const uint16_t *k = k_cache + (slots[l] * Hkv + h) * D;
        for (int64_t g = 0; g < G; g++) scores[g * L + l] = dot(qf + g * D, k, D) * scale + mask[l];
    }
    for (int64_t g = 0; g < G; g++) {
        float *s = scores + g * L, top = -INFINITY, total = 0;
        for (int64_t l = 0; l < L; l++)
            if (!isinf(mask[l]) && s[l] > top) top = s[l];
        for (int64_t l = 0; l < L; l++) {
            s[l] = isinf(mask[l]) ? 0.0f : expf(s[l] - top);
            total += s[l];
        }
        float inv = total > 0 ? 1.0f / total : 0.0f; /* a fully masked row (never built) gives zeros */
        for (int64_t l = 0; l < L; l++) s[l] *= inv;
    }
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) continue;
        const uint16_t *v = v_cache + (slots[l] * Hkv + h) * D;
        for (int64_t g = 0; g < G; g++) add_scaled(acc + g * D, scores[g * L + l], v, D);
    }
    for (int64_t i = 0; i < G * D; i++) out[i] = float_to_bf16(acc[i]);
    free(qf), free(acc), free(scores);
    return 0;
}

int inferd_decode_attention(const uint16_t *q, int64_t q_row_stride, int64_t B, int64_t H, int64_t D,
                            const uint16_t *k_cache, const uint16_t *v_cache, int64_t Hkv, const int64_t *slots,
                            const float *mask, int64_t L, float scale, uint16_t *out) {
    if (Hkv <= 0 || H % Hkv) return -2;
    const int64_t G = H / Hkv; /* query heads per KV head */
    int status = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(min : status)
    for (int64_t task = 0; task < B * Hkv; task++) {
        int64_t b = task / Hkv, h = task % Hkv;
        int rc = attend(q + b * q_row_stride + h * G * D, G, D, k_cache, v_cache, Hkv, h, slots + b * L, mask + b * L,
                        L, scale, out + (b * H + h * G) * D);
        if (rc < status) status = rc;
    }
    return status;
}

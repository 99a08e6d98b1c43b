/* A layer's attention inputs from its fused QKV projection, in one pass:
 * QK-norm (optional), the rotary embedding of Q and K, and the write of K
 * and V into their KV-cache slots. Same roundings as the torch ops it
 * replaces (`rms_norm`, `apply_rotary`, two `index_copy_`), so the values
 * are identical:
 *   n = norm(x) (rms_row.h), rounded to bf16
 *   y = round(round(n * cos) + round(rotate(n) * signed_sin))
 * where rotate(n)[d] = n[(d + D/2) % D] and signed_sin carries rotate_half's sign.
 *
 * qkv: T rows, row t at qkv[t * row_stride]: H query heads, Hkv key heads,
 * Hkv value heads of D bf16 each. norm_weight: float32 [H + Hkv, D] or NULL.
 * cos, signed_sin: bf16 [T, D]. qk_out: bf16 [T, H + Hkv, D]. Caches: bf16
 * [slots, Hkv, D]; slots: int64 [T]. Threads: OpenMP over rows, for prefills.
 *
 * With `is_float` (an engine computing in float32) qkv, the tables and qk_out
 * are float32 and nothing is rounded but what the cache stores:
 *   n = norm(x) as rms_norm.c computes a float32 row
 *   y = n * cos + rotate(n) * signed_sin, each product and the sum rounded
 *       to float32 as torch's ops are (built with -ffp-contract=off: no FMA)
 * and K and V are stored rounded to bf16, as torch's cast rounds them.
 */

#include <stdint.h>
#include <string.h>

#include "rms_row.h"

static inline uint16_t rotated_value(float x, float partner, uint16_t cos, uint16_t signed_sin) {
    return float_to_bf16(round_bf16(x * bf16_to_float(cos)) + round_bf16(partner * bf16_to_float(signed_sin)));
}

/* out[i] = rotated_value(n[i], partner[i], cos[i], signed_sin[i]) for i < len. */
static void rotate_span(const float *n, const float *partner, const uint16_t *cos, const uint16_t *signed_sin,
                        int64_t len, uint16_t *out) {
    int64_t i = 0;
#if VEC_LANES
    for (; i + VEC_LANES <= len; i += VEC_LANES)
        vf_store_bf16(out + i, vf_add(vf_round_bf16(vf_mul(vf_load(n + i), vf_load_bf16(cos + i))),
                                      vf_round_bf16(vf_mul(vf_load(partner + i), vf_load_bf16(signed_sin + i)))));
#endif
    for (; i < len; i++) out[i] = rotated_value(n[i], partner[i], cos[i], signed_sin[i]);
}

static void rotate_head(const uint16_t *x, int64_t D, const float *weight, float eps, int scale_in_float,
                        const uint16_t *cos, const uint16_t *signed_sin, uint16_t *out) {
    float n[D];
    if (weight)
        normed_row(x, D, inverse_rms(x, D, eps), weight, scale_in_float, n);
    else
        for (int64_t d = 0; d < D; d++) n[d] = bf16_to_float(x[d]);
    const int64_t half = D / 2;
    rotate_span(n, n + half, cos, signed_sin, half, out);
    rotate_span(n + half, n, cos + half, signed_sin + half, D - half, out + half);
}

/* out[i] = n[i] * cos[i] + partner[i] * signed_sin[i] for i < len, each product rounded (no FMA). */
static void rotate_float_span(const float *n, const float *partner, const float *cos, const float *signed_sin,
                              int64_t len, float *out) {
    int64_t i = 0;
#if VEC_LANES
    for (; i + VEC_LANES <= len; i += VEC_LANES)
        vf_store(out + i, vf_add(vf_mul(vf_load(n + i), vf_load(cos + i)), vf_mul(vf_load(partner + i), vf_load(signed_sin + i))));
#endif
    for (; i < len; i++) out[i] = n[i] * cos[i] + partner[i] * signed_sin[i];
}

static void rotate_float_head(const float *x, int64_t D, const float *weight, float eps, const float *cos,
                              const float *signed_sin, float *out) {
    float n[D];
    float inv = weight ? inverse_rms_of(x, 1, D, eps) : 0.0f;
    for (int64_t d = 0; d < D; d++) n[d] = weight ? x[d] * inv * weight[d] : x[d];
    const int64_t half = D / 2;
    rotate_float_span(n, n + half, cos, signed_sin, half, out);
    rotate_float_span(n + half, n, cos + half, signed_sin + half, D - half, out + half);
}

static void to_bf16(const float *x, int64_t n, uint16_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = float_to_bf16(x[i]);
}

static void float_inputs(const float *qkv, int64_t row_stride, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                         const float *norm_weight, float eps, const float *cos, const float *signed_sin, float *qk_out,
                         uint16_t *k_cache, uint16_t *v_cache, const int64_t *slots) {
    const int64_t heads = H + Hkv;
#pragma omp parallel for schedule(static) if (T > 16)
    for (int64_t t = 0; t < T; t++) {
        const float *row = qkv + t * row_stride;
        float *out = qk_out + t * heads * D;
        for (int64_t h = 0; h < heads; h++)
            rotate_float_head(row + h * D, D, norm_weight ? norm_weight + h * D : NULL, eps, cos + t * D,
                              signed_sin + t * D, out + h * D);
        to_bf16(out + H * D, Hkv * D, k_cache + slots[t] * Hkv * D);
        to_bf16(row + heads * D, Hkv * D, v_cache + slots[t] * Hkv * D);
    }
}

void inferd_attention_inputs(const void *qkv_in, int64_t row_stride, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                             const float *norm_weight, float eps, int scale_in_float, const void *cos_in,
                             const void *sin_in, void *qk, uint16_t *k_cache, uint16_t *v_cache,
                             const int64_t *slots, int is_float) {
    if (is_float) {
        float_inputs(qkv_in, row_stride, T, H, Hkv, D, norm_weight, eps, cos_in, sin_in, qk, k_cache, v_cache, slots);
        return;
    }
    const uint16_t *qkv = qkv_in, *cos = cos_in, *signed_sin = sin_in;
    uint16_t *qk_out = qk;
    const int64_t heads = H + Hkv;
#pragma omp parallel for schedule(static) if (T > 16)
    for (int64_t t = 0; t < T; t++) {
        const uint16_t *row = qkv + t * row_stride;
        uint16_t *out = qk_out + t * heads * D;
        for (int64_t h = 0; h < heads; h++)
            rotate_head(row + h * D, D, norm_weight ? norm_weight + h * D : NULL, eps, scale_in_float, cos + t * D,
                        signed_sin + t * D, out + h * D);
        memcpy(k_cache + slots[t] * Hkv * D, out + H * D, (size_t)(Hkv * D) * sizeof(uint16_t));
        memcpy(v_cache + slots[t] * Hkv * D, row + heads * D, (size_t)(Hkv * D) * sizeof(uint16_t));
    }
}

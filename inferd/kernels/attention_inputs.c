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
 */

#include <stdint.h>
#include <string.h>

#include "rms_row.h"

static inline uint16_t rotated_value(float x, float partner, uint16_t cos, uint16_t signed_sin) {
    return float_to_bf16(round_bf16(x * bf16_to_float(cos)) + round_bf16(partner * bf16_to_float(signed_sin)));
}

static void rotate_head(const uint16_t *x, int64_t D, const float *weight, float eps, int scale_in_float,
                        const uint16_t *cos, const uint16_t *signed_sin, uint16_t *out) {
    float n[D];
    float inv = weight ? inverse_rms(x, D, eps) : 0.0f;
    for (int64_t d = 0; d < D; d++) n[d] = weight ? normed_value(bf16_to_float(x[d]), inv, weight[d], scale_in_float)
                                                  : bf16_to_float(x[d]);
    const int64_t half = D / 2;
    for (int64_t d = 0; d < half; d++) out[d] = rotated_value(n[d], n[d + half], cos[d], signed_sin[d]);
    for (int64_t d = half; d < D; d++) out[d] = rotated_value(n[d], n[d - half], cos[d], signed_sin[d]);
}

void inferd_attention_inputs(const uint16_t *qkv, int64_t row_stride, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                             const float *norm_weight, float eps, int scale_in_float, const uint16_t *cos,
                             const uint16_t *signed_sin, uint16_t *qk_out, uint16_t *k_cache, uint16_t *v_cache,
                             const int64_t *slots) {
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

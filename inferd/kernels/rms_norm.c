/* RMSNorm of bf16 rows in one pass, optionally added to a residual:
 *   out = [residual +] round(x / rms(x) * weight)
 * in float32, as `inferd.arch.layers.rms_norm` computes it with four torch ops
 * (the row arithmetic is in rms_row.h). With `is_float` x, residual and out are
 * float32 (an engine computing in float32): nothing rounds, and the residual
 * add is fused, residual + normed * weight in one rounding.
 *
 * x: T tokens of W rows of D bf16 values (W heads for a joint Q/K norm, else
 * 1), token t's rows contiguous from x[t * token_stride]; weight: float32
 * [W, D], one row per head; out (and residual): bf16 [T, W, D], contiguous.
 * The residual add rounds once more, as a bf16 tensor add does.
 */

#include <stdint.h>

#include "rms_row.h"

/* One bf16 row: out = [residual +] normed, rounded. */
static void bf16_row(const uint16_t *x, int64_t D, float inv, const float *w, int scale_in_float,
                     const uint16_t *residual, uint16_t *out) {
    int64_t d = 0;
#if VEC_LANES
    for (; d + VEC_LANES <= D; d += VEC_LANES) {
        vf y = vf_normed_value(vf_load_bf16(x + d), vf_set1(inv), vf_load(w + d), scale_in_float);
        vf_store_bf16(out + d, residual ? vf_add(vf_load_bf16(residual + d), y) : y);
    }
#endif
    for (; d < D; d++) {
        float y = normed_value(bf16_to_float(x[d]), inv, w[d], scale_in_float);
        out[d] = float_to_bf16(residual ? bf16_to_float(residual[d]) + y : y);
    }
}

/* One float32 row: out = [residual +] x * inv * w, the residual added in the same rounding. */
static void float_row(const float *x, int64_t D, float inv, const float *w, const float *residual, float *out) {
    int64_t d = 0;
#if VEC_LANES
    for (; d + VEC_LANES <= D; d += VEC_LANES) {
        const vf normed = vf_mul(vf_load(x + d), vf_set1(inv));
        vf_store(out + d, residual ? vf_fmadd(normed, vf_load(w + d), vf_load(residual + d)) : vf_mul(normed, vf_load(w + d)));
    }
#endif
    for (; d < D; d++) out[d] = residual ? fmaf(x[d] * inv, w[d], residual[d]) : x[d] * inv * w[d];
}

void inferd_rms_norm(const void *x, int64_t token_stride, int64_t T, int64_t W, int64_t D, const float *weight,
                     float eps, int scale_in_float, const void *residual, void *out, int is_float) {
#pragma omp parallel for schedule(static) if (T * W * D > 65536)
    for (int64_t r = 0; r < T * W; r++) {
        const int64_t at = (r / W) * token_stride + (r % W) * D;
        const float *w = weight + (r % W) * D;
        if (is_float) {
            const float *row = (const float *)x + at;
            float_row(row, D, inverse_rms_of(row, 1, D, eps), w, residual ? (const float *)residual + r * D : NULL,
                      (float *)out + r * D);
        } else {
            const uint16_t *row = (const uint16_t *)x + at;
            bf16_row(row, D, inverse_rms(row, D, eps), w, scale_in_float,
                     residual ? (const uint16_t *)residual + r * D : NULL, (uint16_t *)out + r * D);
        }
    }
}

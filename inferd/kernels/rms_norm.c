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

void inferd_rms_norm(const void *x, int64_t token_stride, int64_t T, int64_t W, int64_t D, const float *weight,
                     float eps, int scale_in_float, const void *residual, void *out, int is_float) {
#pragma omp parallel for schedule(static) if (T * W * D > 65536)
    for (int64_t r = 0; r < T * W; r++) {
        const int64_t at = (r / W) * token_stride + (r % W) * D;
        const float *w = weight + (r % W) * D;
        if (is_float) {
            const float *row = (const float *)x + at, *res = residual ? (const float *)residual + r * D : NULL;
            float *y = (float *)out + r * D, inv = inverse_rms_of(row, 1, D, eps);
            for (int64_t d = 0; d < D; d++) y[d] = res ? fmaf(row[d] * inv, w[d], res[d]) : row[d] * inv * w[d];
            continue;
        }
        const uint16_t *row = (const uint16_t *)x + at;
        float inv = inverse_rms(row, D, eps);
        for (int64_t d = 0; d < D; d++) {
            float y = normed_value(bf16_to_float(row[d]), inv, w[d], scale_in_float);
            if (residual) y = bf16_to_float(((const uint16_t *)residual)[r * D + d]) + y;
            ((uint16_t *)out)[r * D + d] = float_to_bf16(y);
        }
    }
}

/* RMSNorm of bf16 rows in one pass, optionally added to a residual:
 *   out = [residual +] round(x / rms(x) * weight)
 * in float32, as `inferd.arch.layers.rms_norm` computes it with four torch ops
 * (the row arithmetic is in rms_row.h).
 *
 * x: T tokens of W rows of D bf16 values (W heads for a joint Q/K norm, else
 * 1), token t's rows contiguous from x[t * token_stride]; weight: float32
 * [W, D], one row per head; out (and residual): bf16 [T, W, D], contiguous.
 * The residual add rounds once more, as a bf16 tensor add does.
 */

#include <stdint.h>

#include "rms_row.h"

void inferd_rms_norm(const uint16_t *x, int64_t token_stride, int64_t T, int64_t W, int64_t D, const float *weight,
                     float eps, int scale_in_float, const uint16_t *residual, uint16_t *out) {
#pragma omp parallel for schedule(static) if (T * W * D > 65536)
    for (int64_t r = 0; r < T * W; r++) {
        const uint16_t *row = x + (r / W) * token_stride + (r % W) * D;
        const float *w = weight + (r % W) * D;
        float inv = inverse_rms(row, D, eps);
        for (int64_t d = 0; d < D; d++) {
            float y = normed_value(bf16_to_float(row[d]), inv, w[d], scale_in_float);
            if (residual) y = bf16_to_float(residual[r * D + d]) + y;
            out[r * D + d] = float_to_bf16(y);
        }
    }
}

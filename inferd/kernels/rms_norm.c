/* RMSNorm of bf16 rows in one pass, optionally added to a residual:
 *   out = [residual +] round(x / rms(x) * weight)
 * in float32, as `inferd.arch.layers.rms_norm` computes it with four torch ops.
 *
 * x: T tokens of W rows of D bf16 values (W heads for a joint Q/K norm, else
 * 1), token t's rows contiguous from x[t * token_stride]; weight: float32
 * [W, D], one row per head; out (and residual): bf16 [T, W, D], contiguous.
 * `scale_in_float` multiplies by the weight before rounding to bf16 (Gemma);
 * otherwise the normed value is rounded, then multiplied by the bf16-rounded
 * weight and rounded again (Llama). The residual add rounds once more, as a bf16 tensor add does.
 */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

static inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

void inferd_rms_norm(const uint16_t *x, int64_t token_stride, int64_t T, int64_t W, int64_t D, const float *weight,
                     float eps, int scale_in_float, const uint16_t *residual, uint16_t *out) {
#pragma omp parallel for schedule(static) if (T * W * D > 65536)
    for (int64_t r = 0; r < T * W; r++) {
        const uint16_t *row = x + (r / W) * token_stride + (r % W) * D;
        const float *w = weight + (r % W) * D;
        float lanes[16] = {0}, squares = 0; /* 16 partial sums: the loop vectorizes */
        int64_t d = 0;
        for (; d + 16 <= D; d += 16)
            for (int j = 0; j < 16; j++) lanes[j] += bf16_to_float(row[d + j]) * bf16_to_float(row[d + j]);
        for (; d < D; d++) squares += bf16_to_float(row[d]) * bf16_to_float(row[d]);
        for (int j = 0; j < 16; j++) squares += lanes[j];
        float inv = 1.0f / sqrtf(squares / (float)D + eps);
        for (d = 0; d < D; d++) {
            float normed = bf16_to_float(row[d]) * inv;
            float y = scale_in_float ? round_bf16(normed * w[d]) : round_bf16(round_bf16(w[d]) * round_bf16(normed));
            if (residual) y = bf16_to_float(residual[r * D + d]) + y;
            out[r * D + d] = float_to_bf16(y);
        }
    }
}

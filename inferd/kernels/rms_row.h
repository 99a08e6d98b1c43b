/* The arithmetic of one RMSNorm row, shared by the kernels that norm:
 * rms_norm.c and attention_inputs.c give the same values for the same row. */
#ifndef INFERD_RMS_ROW_H
#define INFERD_RMS_ROW_H

#include <math.h>
#include <stdint.h>

#include "bf16.h"

/* 1 / rms(row) of bf16 (or, with `is_float`, float32) values, the squares summed
 * in 16 partial sums by fused multiply-adds (the loop vectorizes; every build
 * sums alike). */
static inline float inverse_rms_of(const void *row, int is_float, int64_t D, float eps) {
    float lanes[16] = {0}, squares = 0;
    int64_t d = 0;
#define VALUE(i) (is_float ? ((const float *)row)[i] : bf16_to_float(((const uint16_t *)row)[i]))
    for (; d + 16 <= D; d += 16)
        for (int j = 0; j < 16; j++) lanes[j] = fmaf(VALUE(d + j), VALUE(d + j), lanes[j]);
    for (; d < D; d++) squares = fmaf(VALUE(d), VALUE(d), squares);
#undef VALUE
    for (int j = 0; j < 16; j++) squares += lanes[j];
    return 1.0f / sqrtf(squares / (float)D + eps);
}

static inline float inverse_rms(const uint16_t *row, int64_t D, float eps) { return inverse_rms_of(row, 0, D, eps); }

/* One normed value, rounded to bf16. `scale_in_float` multiplies by the
 * weight before rounding (Gemma); otherwise the normed value is rounded,
 * then multiplied by the bf16-rounded weight and rounded again (Llama). */
static inline float normed_value(float x, float inv, float w, int scale_in_float) {
    float normed = x * inv;
    return scale_in_float ? round_bf16(normed * w) : round_bf16(round_bf16(w) * round_bf16(normed));
}

#endif

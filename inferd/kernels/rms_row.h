/* The arithmetic of one RMSNorm row, shared by the kernels that norm:
 * rms_norm.c and attention_inputs.c give the same values for the same row. */
#ifndef INFERD_RMS_ROW_H
#define INFERD_RMS_ROW_H

#include <math.h>
#include <stdint.h>

#include "bf16.h"
#include "vec.h"

/* 1 / rms(row) of bf16 (or, with `is_float`, float32) values, the squares summed
 * in 16 partial sums by fused multiply-adds (in vector lanes where the build has
 * them; every build sums alike), then the tail's, then the 16 in order. */
static inline float inverse_rms_of(const void *row, int is_float, int64_t D, float eps) {
    float lanes[16] = {0}, squares = 0;
    int64_t d = 0;
#define VALUE(i) (is_float ? ((const float *)row)[i] : bf16_to_float(((const uint16_t *)row)[i]))
#if VEC_LANES
#define VLOAD(i) (is_float ? vf_load((const float *)row + (i)) : vf_load_bf16((const uint16_t *)row + (i)))
    vf sums[16 / VEC_LANES];
    for (int v = 0; v < 16 / VEC_LANES; v++) sums[v] = vf_zero();
    for (; d + 16 <= D; d += 16)
        for (int v = 0; v < 16 / VEC_LANES; v++) {
            const vf x = VLOAD(d + v * VEC_LANES);
            sums[v] = vf_fmadd(x, x, sums[v]);
        }
    for (int v = 0; v < 16 / VEC_LANES; v++) vf_store(lanes + v * VEC_LANES, sums[v]);
#undef VLOAD
#else
    for (; d + 16 <= D; d += 16)
        for (int j = 0; j < 16; j++) lanes[j] = fmaf(VALUE(d + j), VALUE(d + j), lanes[j]);
#endif
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

#if VEC_LANES
static inline vf vf_normed_value(vf x, vf inv, vf w, int scale_in_float) {
    vf normed = vf_mul(x, inv);
    return scale_in_float ? vf_round_bf16(vf_mul(normed, w)) : vf_round_bf16(vf_mul(vf_round_bf16(w), vf_round_bf16(normed)));
}
#endif

/* A bf16 row normed: n[d] = normed_value(x[d], inv, w[d], scale_in_float). */
static inline void normed_row(const uint16_t *x, int64_t D, float inv, const float *w, int scale_in_float, float *n) {
    int64_t d = 0;
#if VEC_LANES
    for (; d + VEC_LANES <= D; d += VEC_LANES)
        vf_store(n + d, vf_normed_value(vf_load_bf16(x + d), vf_set1(inv), vf_load(w + d), scale_in_float));
#endif
    for (; d < D; d++) n[d] = normed_value(bf16_to_float(x[d]), inv, w[d], scale_in_float);
}

#endif

/* The gated activation of an MLP, act(gate) * up, in one pass over the fused
 * gate-up projection's output, as two torch ops compute it in bf16:
 *   out = round(round(act(gate)) * up)
 * act(x) = x * sigmoid(a * x + b * x^3), which is SiLU for (a, b) = (1, 0)
 * and the tanh form of GELU for a = 2 sqrt(2/pi), b = 0.044715 a: the same
 * function as 0.5 x (1 + tanh(...)), without its cancellation for negative x.
 *
 * In float32 (an engine computing in it), nothing is rounded: out = act(gate) * up.
 * exp is vec.h's polynomial in vector lanes and scalar tails alike, so every
 * build computes the same values.
 *
 * gate_up: T rows of [gate (I), up (I)] bf16 (or float32); out: [T, I] of the
 * same type. Threads: OpenMP over rows, only for large inputs (a decode
 * step's rows are small).
 */

#include <math.h>
#include <stdint.h>

#include "bf16.h"
#include "vec.h"

static inline float activation(float x, float a, float b) { return x / (1.0f + f_exp(-(x * fmaf(b * x, x, a)))); }

#if VEC_LANES
static inline vf vf_activation(vf x, vf a, vf b) {
    vf z = vf_mul(x, vf_fmadd(vf_mul(b, x), x, a)); /* a x + b x^3 */
    return vf_div(x, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_zero(), z))));
}
#endif

static void bf16_row(const uint16_t *gate, const uint16_t *up, int64_t I, float a, float b, uint16_t *row) {
    int64_t i = 0;
#if VEC_LANES
    for (; i + VEC_LANES <= I; i += VEC_LANES) {
        vf act = vf_activation(vf_load_bf16(gate + i), vf_set1(a), vf_set1(b));
        vf_store_bf16(row + i, vf_mul(vf_round_bf16(act), vf_load_bf16(up + i)));
    }
#endif
    for (; i < I; i++) row[i] = float_to_bf16(round_bf16(activation(bf16_to_float(gate[i]), a, b)) * bf16_to_float(up[i]));
}

static void float_row(const float *gate, const float *up, int64_t I, float a, float b, float *row) {
    int64_t i = 0;
#if VEC_LANES
    for (; i + VEC_LANES <= I; i += VEC_LANES)
        vf_store(row + i, vf_mul(vf_activation(vf_load(gate + i), vf_set1(a), vf_set1(b)), vf_load(up + i)));
#endif
    for (; i < I; i++) row[i] = activation(gate[i], a, b) * up[i];
}

void inferd_gated_activation(const void *gate_up, int64_t T, int64_t I, float a, float b, void *out, int is_float) {
#pragma omp parallel for schedule(static) if (T * I > 262144)
    for (int64_t t = 0; t < T; t++) {
        if (is_float) {
            const float *gate = (const float *)gate_up + t * 2 * I;
            float_row(gate, gate + I, I, a, b, (float *)out + t * I);
        } else {
            const uint16_t *gate = (const uint16_t *)gate_up + t * 2 * I;
            bf16_row(gate, gate + I, I, a, b, (uint16_t *)out + t * I);
        }
    }
}

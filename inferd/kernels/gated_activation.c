/* The gated activation of an MLP, act(gate) * up, in one pass over the fused
 * gate-up projection's output, as two torch ops compute it in bf16:
 *   out = round(round(act(gate)) * up)
 * act(x) = x * sigmoid(a * x + b * x^3), which is SiLU for (a, b) = (1, 0)
 * and the tanh form of GELU for a = 2 sqrt(2/pi), b = 0.044715 a: the same
 * function as 0.5 x (1 + tanh(...)), without its cancellation for negative x.
 *
 * gate_up: T rows of [gate (I), up (I)] bf16; out: [T, I] bf16. Threads:
 * OpenMP over rows, only for large inputs (a decode step's rows are small).
 */

#include <math.h>
#include <stdint.h>

#include "bf16.h"
#include "vec.h"

static inline float activation(float x, float a, float b) { return x / (1.0f + expf(-(a * x + b * x * x * x))); }

void inferd_gated_activation(const uint16_t *gate_up, int64_t T, int64_t I, float a, float b, uint16_t *out) {
#pragma omp parallel for schedule(static) if (T * I > 262144)
    for (int64_t t = 0; t < T; t++) {
        const uint16_t *gate = gate_up + t * 2 * I, *up = gate + I;
        uint16_t *row = out + t * I;
        int64_t i = 0;
#if VEC_LANES
        const vf va = vf_set1(a), vb = vf_set1(b), one = vf_set1(1.0f);
        for (; i + VEC_LANES <= I; i += VEC_LANES) {
            vf x = vf_load_bf16(gate + i);
            vf z = vf_mul(x, vf_fmadd(vf_mul(vb, x), x, va)); /* a x + b x^3 */
            vf act = vf_div(x, vf_add(one, vf_exp(vf_sub(vf_zero(), z))));
            vf_store_bf16(row + i, vf_mul(vf_round_bf16(act), vf_load_bf16(up + i)));
        }
#endif
        for (; i < I; i++) row[i] = float_to_bf16(round_bf16(activation(bf16_to_float(gate[i]), a, b)) * bf16_to_float(up[i]));
    }
}

/* Attention of an encoder's short packed sequences, read straight from the
 * fused QKV projection's output: no per-head copies, no padding, no mask.
 *
 * For a few dozen tokens a sequence, torch's attention is mostly per-head
 * overhead (a small matrix product call each for scores and for values);
 * here each (sequence, head) scores, softmaxes and sums in one pass, in
 * float32. Each sequence is computed on its own, so batching never changes
 * a result.
 *
 * qkv: float32 rows of [query | key | value], each [H, D], a row every
 * row_stride floats; out: float32 rows of [H, D], a row every out_stride.
 * Groups: counts[g] sequences of lengths[g] tokens, one after another from
 * row starts[g]. Threads: OpenMP over sequences.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "vec.h"

#define ENCODER_ATTENTION_MAX_LEN 64

#if !VEC_LANES
static float dot(const float *a, const float *b, int64_t D) {
    float sum = 0;
    for (int64_t d = 0; d < D; d++) sum += a[d] * b[d];
    return sum;
}

/* e^(s - top) in place; returns their sum. */
static float exp_shifted(float *s, int64_t L, float top) {
    float total = 0;
    for (int64_t l = 0; l < L; l++) {
        s[l] = expf(s[l] - top);
        total += s[l];
    }
    return total;
}
#endif

/* out = (sum_l p_l v_l) * scale for one query row. */
static void sum_values(const float *p, const float *v, int64_t row_stride, int64_t L, int64_t D, float scale,
                       float *out) {
    int64_t d = 0;
#if VEC_LANES
    for (; d + 2 * VEC_LANES <= D; d += 2 * VEC_LANES) {
        vf lo = vf_zero(), hi = vf_zero(), lo2 = vf_zero(), hi2 = vf_zero(); /* even and odd l: two chains each */
        int64_t l = 0;
        for (; l + 2 <= L; l += 2) {
            vf weight = vf_set1(p[l]), weight2 = vf_set1(p[l + 1]);
            lo = vf_fmadd(weight, vf_load(v + l * row_stride + d), lo);
            hi = vf_fmadd(weight, vf_load(v + l * row_stride + d + VEC_LANES), hi);
            lo2 = vf_fmadd(weight2, vf_load(v + (l + 1) * row_stride + d), lo2);
            hi2 = vf_fmadd(weight2, vf_load(v + (l + 1) * row_stride + d + VEC_LANES), hi2);
        }
        if (l < L) {
            vf weight = vf_set1(p[l]);
            lo = vf_fmadd(weight, vf_load(v + l * row_stride + d), lo);
            hi = vf_fmadd(weight, vf_load(v + l * row_stride + d + VEC_LANES), hi);
        }
        vf_store(out + d, vf_mul(vf_add(lo, lo2), vf_set1(scale)));
        vf_store(out + d + VEC_LANES, vf_mul(vf_add(hi, hi2), vf_set1(scale)));
    }
#endif
    for (; d < D; d++) {
        float sum = 0;
        for (int64_t l = 0; l < L; l++) sum += p[l] * v[l * row_stride + d];
        out[d] = sum * scale;
    }
}

#if VEC_LANES
/* One sequence, every head: keys stored transposed ([H][D][Lp], scaled, zero
 * past L) by reading each key row once, whole; then each query row's scores,
 * VEC_LANES keys at a time (no horizontal sums), softmax and values. */
static void one_sequence(const float *qkv, int64_t row_stride, int64_t H, int64_t D, int64_t start, int64_t L,
                         float scale, float *out, int64_t out_stride, float *kt) {
    float s[ENCODER_ATTENTION_MAX_LEN + VEC_LANES];
    const int64_t Lp = (L + VEC_LANES - 1) / VEC_LANES * VEC_LANES, HD = H * D;
    const float *rows = qkv + start * row_stride;
    for (int64_t l = 0; l < Lp; l++) {
        const float *k = rows + l * row_stride + HD;
        for (int64_t hd = 0; hd < HD; hd++) kt[hd * Lp + l] = l < L ? k[hd] * scale : 0.0f;
    }
    for (int64_t h = 0; h < H; h++) {
        const float *q = rows + h * D, *v = rows + 2 * HD + h * D, *kh = kt + h * D * Lp;
        for (int64_t i = 0; i < L; i++) {
            const float *qi = q + i * row_stride;
            for (int64_t l = 0; l < Lp; l += VEC_LANES) {
                vf acc[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()}; /* four chains: FMA latency, not a wait */
                int64_t d = 0;
                for (; d + 4 <= D; d += 4)
                    for (int c = 0; c < 4; c++) acc[c] = vf_fmadd(vf_set1(qi[d + c]), vf_load(kh + (d + c) * Lp + l), acc[c]);
                for (; d < D; d++) acc[0] = vf_fmadd(vf_set1(qi[d]), vf_load(kh + d * Lp + l), acc[0]);
                vf_store(s + l, vf_add(vf_add(acc[0], acc[1]), vf_add(acc[2], acc[3])));
            }
            for (int64_t l = L; l < Lp; l++) s[l] = -INFINITY; /* padding keys weigh 0 */
            vf tops = vf_load(s);
            for (int64_t l = VEC_LANES; l < Lp; l += VEC_LANES) tops = vf_max(tops, vf_load(s + l));
            vf shift = vf_set1(vf_top(tops)), sums = vf_zero();
            for (int64_t l = 0; l < Lp; l += VEC_LANES) {
                vf x = vf_load(s + l), e = vf_zero_at_neg_inf(x, vf_exp(vf_sub(x, shift)));
                vf_store(s + l, e);
                sums = vf_add(sums, e);
            }
            sum_values(s, v, row_stride, L, D, 1.0f / vf_sum(sums), out + (start + i) * out_stride + h * D);
        }
    }
}
#else
static void one_sequence(const float *qkv, int64_t row_stride, int64_t H, int64_t D, int64_t start, int64_t L,
                         float scale, float *out, int64_t out_stride, float *unused) {
    float s[ENCODER_ATTENTION_MAX_LEN];
    (void)unused;
    for (int64_t h = 0; h < H; h++) {
        const float *q = qkv + start * row_stride + h * D, *k = q + H * D, *v = k + H * D;
        for (int64_t i = 0; i < L; i++) {
            float top = -INFINITY;
            for (int64_t l = 0; l < L; l++) {
                s[l] = dot(q + i * row_stride, k + l * row_stride, D) * scale;
                top = fmaxf(top, s[l]);
            }
            float total = exp_shifted(s, L, top);
            sum_values(s, v, row_stride, L, D, 1.0f / total, out + (start + i) * out_stride + h * D);
        }
    }
}
#endif

/* 0; 1 when a group's sequences are longer than ENCODER_ATTENTION_MAX_LEN (nothing
 * computed); -1 when the transposed keys' buffer cannot be allocated. */
int inferd_encoder_attention(const float *qkv, int64_t row_stride, int64_t H, int64_t D, const int64_t *starts,
                             const int64_t *counts, const int64_t *lengths, int64_t groups, float scale,
                             float *out, int64_t out_stride) {
    for (int64_t g = 0; g < groups; g++)
        if (lengths[g] > ENCODER_ATTENTION_MAX_LEN || lengths[g] < 1) return 1;
    int failed = 0;
#pragma omp parallel
    {
        float *kt = malloc((size_t)(H * D * (ENCODER_ATTENTION_MAX_LEN + 16)) * sizeof(float));
        if (!kt) {
#pragma omp atomic write
            failed = 1;
        }
        for (int64_t g = 0; g < groups; g++) {
#pragma omp for schedule(static)
            for (int64_t n = 0; n < counts[g]; n++)
                if (kt) one_sequence(qkv, row_stride, H, D, starts[g] + n * lengths[g], lengths[g], scale, out, out_stride, kt);
        }
        free(kt);
    }
    return failed ? -1 : 0;
}

/* Decode attention over the paged KV cache: one query token per sequence.
 *
 * For each sequence and KV head, the query heads that share it score every
 * context slot, softmax, and sum the values: in float32, reading K and V
 * straight from their cache slots (no gathered copy), skipping masked slots.
 * Each sequence is computed on its own, so batching never changes a result.
 *
 * q: bf16, row b's head h at q[b * q_row_stride + h * D]; caches: bf16
 * [slots, Hkv, D]; slots: int64 [B, L]; mask: float32 [B, L], 0 or -inf;
 * out: bf16 [B, H, D]. Threads: OpenMP over (sequence, KV head).
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "vec.h"

/* Query heads are taken four at a time (padded with zero heads), and head
 * dimensions two vectors at a time (32 with AVX-512, 16 with AVX2), so the
 * vector loops keep their sums in registers and read each K and V row once
 * per group of heads. */
#define HEADS 4
#define LANES (2 * VEC_LANES)

#if VEC_LANES
/* scores[g][l] = q[g] . k_l for the four heads of qf, every unmasked slot. */
static void score_slots(const float *qf, int64_t D, const uint16_t *k_cache, int64_t Hkv, int64_t h,
                        const int64_t *slots, const float *mask, int64_t L, float scale, float *scores) {
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) {
            for (int g = 0; g < HEADS; g++) scores[g * L + l] = -INFINITY;
            continue;
        }
        const uint16_t *k = k_cache + (slots[l] * Hkv + h) * D;
        vf even[HEADS], odd[HEADS]; /* two sums per head: half the dependency chain */
        for (int g = 0; g < HEADS; g++) even[g] = odd[g] = vf_zero();
        for (int64_t d = 0; d < D; d += LANES) {
            vf k0 = vf_load_bf16(k + d), k1 = vf_load_bf16(k + d + VEC_LANES);
            for (int g = 0; g < HEADS; g++) {
                even[g] = vf_fmadd(vf_load(qf + g * D + d), k0, even[g]);
                odd[g] = vf_fmadd(vf_load(qf + g * D + d + VEC_LANES), k1, odd[g]);
            }
        }
        for (int g = 0; g < HEADS; g++) scores[g * L + l] = vf_sum(vf_add(even[g], odd[g])) * scale + mask[l];
    }
}

/* Softmax of each head's scores in place; masked slots hold -inf and get 0. */
static void softmax_vector(float *scores, int heads, int64_t L) {
    for (int g = 0; g < heads; g++) {
        float *s = scores + g * L, top = -INFINITY, total = 0;
        int64_t l = 0;
        vf tops = vf_set1(-INFINITY);
        for (; l + VEC_LANES <= L; l += VEC_LANES) tops = vf_max(tops, vf_load(s + l));
        top = vf_top(tops);
        for (; l < L; l++) top = fmaxf(top, s[l]);
        if (isinf(top)) { /* every slot masked (never built): zeros */
            memset(s, 0, (size_t)L * sizeof(float));
            continue;
        }
        vf sums = vf_zero(), shift = vf_set1(top);
        for (l = 0; l + VEC_LANES <= L; l += VEC_LANES) {
            vf v = vf_load(s + l);
            vf e = vf_zero_at_neg_inf(v, vf_exp(vf_sub(v, shift)));
            vf_store(s + l, e);
            sums = vf_add(sums, e);
        }
        total = vf_sum(sums);
        for (; l < L; l++) {
            s[l] = isinf(s[l]) ? 0.0f : f_exp(s[l] - top);
            total += s[l];
        }
        const vf inv = vf_set1(1.0f / total);
        for (l = 0; l + VEC_LANES <= L; l += VEC_LANES) vf_store(s + l, vf_mul(vf_load(s + l), inv));
        for (; l < L; l++) s[l] *= 1.0f / total;
    }
}

/* out[g] = sum_l p[g][l] v_l for the first `heads` of four, LANES dimensions at a time. */
static void sum_values(const float *p, int heads, int64_t D, const uint16_t *v_cache, int64_t Hkv, int64_t h,
                       const int64_t *slots, const float *mask, int64_t L, uint16_t *out) {
    for (int64_t d = 0; d < D; d += LANES) {
        vf lo[HEADS], hi[HEADS];
        for (int g = 0; g < HEADS; g++) lo[g] = hi[g] = vf_zero();
        for (int64_t l = 0; l < L; l++) {
            if (isinf(mask[l])) continue;
            const uint16_t *v = v_cache + (slots[l] * Hkv + h) * D + d;
            vf v0 = vf_load_bf16(v), v1 = vf_load_bf16(v + VEC_LANES);
            for (int g = 0; g < HEADS; g++) {
                vf weight = vf_set1(p[g * L + l]);
                lo[g] = vf_fmadd(weight, v0, lo[g]);
                hi[g] = vf_fmadd(weight, v1, hi[g]);
            }
        }
        for (int g = 0; g < heads; g++) {
            vf_store_bf16(out + g * D + d, lo[g]);
            vf_store_bf16(out + g * D + d + VEC_LANES, hi[g]);
        }
    }
}
#endif

/* The same sums, one value at a time (other CPUs, and head sizes not a multiple of 32). */
static void score_slots_scalar(const float *qf, int heads, int64_t D, const uint16_t *k_cache, int64_t Hkv, int64_t h,
                               const int64_t *slots, const float *mask, int64_t L, float scale, float *scores) {
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) continue;
        const uint16_t *k = k_cache + (slots[l] * Hkv + h) * D;
        for (int g = 0; g < heads; g++) {
            float sum = 0;
            for (int64_t d = 0; d < D; d++) sum += qf[g * D + d] * bf16_to_float(k[d]);
            scores[g * L + l] = sum * scale + mask[l];
        }
    }
}

static void sum_values_scalar(const float *p, int heads, int64_t D, const uint16_t *v_cache, int64_t Hkv, int64_t h,
                              const int64_t *slots, const float *mask, int64_t L, float *acc, uint16_t *out) {
    memset(acc, 0, (size_t)(heads * D) * sizeof(float));
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) continue;
        const uint16_t *v = v_cache + (slots[l] * Hkv + h) * D;
        for (int g = 0; g < heads; g++)
            for (int64_t d = 0; d < D; d++) acc[g * D + d] += p[g * L + l] * bf16_to_float(v[d]);
    }
    for (int64_t i = 0; i < heads * D; i++) out[i] = float_to_bf16(acc[i]);
}

/* Softmax of each head's scores over the unmasked slots, in place (the portable path). */
static void softmax(float *scores, int heads, const float *mask, int64_t L) {
    for (int g = 0; g < heads; g++) {
        float *s = scores + g * L, top = -INFINITY, total = 0;
        for (int64_t l = 0; l < L; l++)
            if (!isinf(mask[l]) && s[l] > top) top = s[l];
        for (int64_t l = 0; l < L; l++) {
            s[l] = isinf(mask[l]) ? 0.0f : f_exp(s[l] - top);
            total += s[l];
        }
        float inv = total > 0 ? 1.0f / total : 0.0f; /* a fully masked row (never built) gives zeros */
        for (int64_t l = 0; l < L; l++) s[l] *= inv;
    }
}

/* The G query heads sharing KV head h, four at a time. */
static int attend(const uint16_t *q, int64_t G, int64_t D, const uint16_t *k_cache, const uint16_t *v_cache,
                  int64_t Hkv, int64_t h, const int64_t *slots, const float *mask, int64_t L, float scale,
                  uint16_t *out) {
    float *qf = malloc((size_t)(HEADS * D) * sizeof(float)); /* a group's heads, then zeros */
    float *scores = calloc((size_t)(HEADS * L), sizeof(float));
    float *acc = malloc((size_t)(HEADS * D) * sizeof(float));
    if (!qf || !scores || !acc) {
        free(qf), free(scores), free(acc);
        return -1;
    }
    for (int64_t g0 = 0; g0 < G; g0 += HEADS) {
        const int heads = (int)(G - g0 < HEADS ? G - g0 : HEADS);
        memset(qf, 0, (size_t)(HEADS * D) * sizeof(float));
        for (int64_t i = 0; i < heads * D; i++) qf[i] = bf16_to_float(q[g0 * D + i]);
#if VEC_LANES
        if (D % LANES == 0) {
            score_slots(qf, D, k_cache, Hkv, h, slots, mask, L, scale, scores);
            softmax_vector(scores, heads, L);
            sum_values(scores, heads, D, v_cache, Hkv, h, slots, mask, L, out + g0 * D);
            continue;
        }
#endif
        score_slots_scalar(qf, heads, D, k_cache, Hkv, h, slots, mask, L, scale, scores);
        softmax(scores, heads, mask, L);
        sum_values_scalar(scores, heads, D, v_cache, Hkv, h, slots, mask, L, acc, out + g0 * D);
    }
    free(qf), free(scores), free(acc);
    return 0;
}

int inferd_decode_attention(const uint16_t *q, int64_t q_row_stride, int64_t B, int64_t H, int64_t D,
                            const uint16_t *k_cache, const uint16_t *v_cache, int64_t Hkv, const int64_t *slots,
                            const float *mask, int64_t L, float scale, uint16_t *out) {
    if (Hkv <= 0 || H % Hkv) return -2;
    const int64_t G = H / Hkv; /* query heads per KV head */
    int status = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(min : status)
    for (int64_t task = 0; task < B * Hkv; task++) {
        int64_t b = task / Hkv, h = task % Hkv;
        int rc = attend(q + b * q_row_stride + h * G * D, G, D, k_cache, v_cache, Hkv, h, slots + b * L, mask + b * L,
                        L, scale, out + (b * H + h * G) * D);
        if (rc < status) status = rc;
    }
    return status;
}

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

/* Query heads are taken four at a time (padded with zero heads), so each K
 * and V row is read once per group of heads.
 *
 * Every build computes the same bits: sums across lanes run over sixteen
 * float32 lanes (one AVX-512 vector, two AVX2 ones, or sixteen floats) and
 * reduce in one fixed order; products are fused multiply-adds everywhere;
 * exponentials are vec.h's polynomial. */
#define HEADS 4
#define W 16 /* lanes of an f16x */
/* Vectors of each value row summed per pass over the slots: as many as the registers hold
 * beside the four heads' sums (AVX-512's 32: 64 dimensions a pass, so a 256-wide head walks
 * its slots 4 times, not 8; AVX2's 16: 16 dimensions). */
#if VEC_LANES == 16
#define PASS_VECS 4
#else
#define PASS_VECS 2
#endif

typedef struct {
#if VEC_LANES == 16
    vf v;
#elif VEC_LANES == 8
    vf lo, hi;
#else
    float f[W];
#endif
} f16x;

static inline f16x f16_zero(void) {
    f16x r;
#if VEC_LANES == 16
    r.v = vf_zero();
#elif VEC_LANES == 8
    r.lo = r.hi = vf_zero();
#else
    for (int i = 0; i < W; i++) r.f[i] = 0;
#endif
    return r;
}

static inline f16x f16_load(const float *p) {
    f16x r;
#if VEC_LANES == 16
    r.v = vf_load(p);
#elif VEC_LANES == 8
    r.lo = vf_load(p), r.hi = vf_load(p + 8);
#else
    for (int i = 0; i < W; i++) r.f[i] = p[i];
#endif
    return r;
}

static inline f16x f16_load_bf16(const uint16_t *p) {
    f16x r;
#if VEC_LANES == 16
    r.v = vf_load_bf16(p);
#elif VEC_LANES == 8
    r.lo = vf_load_bf16(p), r.hi = vf_load_bf16(p + 8);
#else
    for (int i = 0; i < W; i++) r.f[i] = bf16_to_float(p[i]);
#endif
    return r;
}

static inline f16x f16_fmadd(f16x a, f16x b, f16x c) {
#if VEC_LANES == 16
    c.v = vf_fmadd(a.v, b.v, c.v);
#elif VEC_LANES == 8
    c.lo = vf_fmadd(a.lo, b.lo, c.lo), c.hi = vf_fmadd(a.hi, b.hi, c.hi);
#else
    for (int i = 0; i < W; i++) c.f[i] = fmaf(a.f[i], b.f[i], c.f[i]);
#endif
    return c;
}

/* The lanes' sum: halves added pairwise, 16 -> 8 -> 4 -> 2 -> 1. */
static inline float f16_sum(f16x a) {
#if VEC_LANES
#if VEC_LANES == 16
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
#else
    __m256 s8 = _mm256_add_ps(a.lo, a.hi);
#endif
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
#else
    float s8[8], s4[4];
    for (int i = 0; i < 8; i++) s8[i] = a.f[i] + a.f[i + 8];
    for (int i = 0; i < 4; i++) s4[i] = s8[i] + s8[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
}

/* e^(x - top) for each lane, 0 where x is -inf (a masked slot); stored back to p. */
static inline f16x f16_exp_shifted(const float *p, float top, float *out) {
    f16x r;
#if VEC_LANES
    const vf shift = vf_set1(top);
    for (int half = 0; half < W / VEC_LANES; half++) {
        vf v = vf_load(p + half * VEC_LANES);
        vf_store(out + half * VEC_LANES, vf_zero_at_neg_inf(v, vf_exp(vf_sub(v, shift))));
    }
    r = f16_load(out);
#else
    for (int i = 0; i < W; i++) r.f[i] = out[i] = isinf(p[i]) ? 0.0f : f_exp(p[i] - top);
#endif
    return r;
}

static inline f16x f16_add(f16x a, f16x b) {
#if VEC_LANES == 16
    a.v = vf_add(a.v, b.v);
#elif VEC_LANES == 8
    a.lo = vf_add(a.lo, b.lo), a.hi = vf_add(a.hi, b.hi);
#else
    for (int i = 0; i < W; i++) a.f[i] += b.f[i];
#endif
    return a;
}

/* scores[g][l] = q[g] . k_l * scale + mask[l] for the four heads of qf, every unmasked slot. */
static void score_slots(const float *qf, int64_t D, const uint16_t *k_cache, int64_t Hkv, int64_t h,
                        const int64_t *slots, const float *mask, int64_t L, float scale, float *scores) {
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) {
            for (int g = 0; g < HEADS; g++) scores[g * L + l] = -INFINITY;
            continue;
        }
        const uint16_t *k = k_cache + (slots[l] * Hkv + h) * D;
        if (D % W) { /* an odd head size: one sum in order, the same on every build */
            for (int g = 0; g < HEADS; g++) {
                float sum = 0;
                for (int64_t d = 0; d < D; d++) sum = fmaf(qf[g * D + d], bf16_to_float(k[d]), sum);
                scores[g * L + l] = fmaf(sum, scale, mask[l]);
            }
            continue;
        }
        f16x acc[HEADS];
        for (int g = 0; g < HEADS; g++) acc[g] = f16_zero();
        for (int64_t d = 0; d < D; d += W) {
            const f16x kd = f16_load_bf16(k + d);
            for (int g = 0; g < HEADS; g++) acc[g] = f16_fmadd(f16_load(qf + g * D + d), kd, acc[g]);
        }
        for (int g = 0; g < HEADS; g++) scores[g * L + l] = fmaf(f16_sum(acc[g]), scale, mask[l]);
    }
}

/* Softmax of each head's scores in place; masked slots hold -inf and get 0. */
static void softmax(float *scores, int heads, int64_t L) {
    for (int g = 0; g < heads; g++) {
        float *s = scores + g * L, top = -INFINITY;
        for (int64_t l = 0; l < L; l++) top = fmaxf(top, s[l]);
        if (isinf(top)) { /* every slot masked (never built): zeros */
            memset(s, 0, (size_t)L * sizeof(float));
            continue;
        }
        f16x sums = f16_zero();
        int64_t l = 0;
        for (; l + W <= L; l += W) sums = f16_add(sums, f16_exp_shifted(s + l, top, s + l));
        float total = f16_sum(sums);
        for (; l < L; l++) {
            s[l] = isinf(s[l]) ? 0.0f : f_exp(s[l] - top);
            total += s[l];
        }
        const float inv = 1.0f / total;
        for (l = 0; l < L; l++) s[l] *= inv;
    }
}

/* out[g] = sum_l p[g][l] v_l for the first `heads` of four: each dimension's
 * sum in slot order, so vector width does not change it. */
static void sum_values(const float *p, int heads, int64_t D, const uint16_t *v_cache, int64_t Hkv, int64_t h,
                       const int64_t *slots, const float *mask, int64_t L, float *acc, uint16_t *out) {
#if VEC_LANES
    if (D % (PASS_VECS * VEC_LANES) == 0) {
        for (int64_t d = 0; d < D; d += PASS_VECS * VEC_LANES) {
            vf sums[HEADS][PASS_VECS];
            for (int g = 0; g < HEADS; g++)
                for (int j = 0; j < PASS_VECS; j++) sums[g][j] = vf_zero();
            for (int64_t l = 0; l < L; l++) {
                if (isinf(mask[l])) continue;
                const uint16_t *v = v_cache + (slots[l] * Hkv + h) * D + d;
                vf vs[PASS_VECS];
                for (int j = 0; j < PASS_VECS; j++) vs[j] = vf_load_bf16(v + j * VEC_LANES);
                for (int g = 0; g < HEADS; g++) {
                    vf weight = vf_set1(p[g * L + l]);
                    for (int j = 0; j < PASS_VECS; j++) sums[g][j] = vf_fmadd(weight, vs[j], sums[g][j]);
                }
            }
            for (int g = 0; g < heads; g++)
                for (int j = 0; j < PASS_VECS; j++) vf_store_bf16(out + g * D + d + j * VEC_LANES, sums[g][j]);
        }
        return;
    }
#endif
    memset(acc, 0, (size_t)(heads * D) * sizeof(float));
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) continue;
        const uint16_t *v = v_cache + (slots[l] * Hkv + h) * D;
        for (int g = 0; g < heads; g++)
            for (int64_t d = 0; d < D; d++) acc[g * D + d] = fmaf(p[g * L + l], bf16_to_float(v[d]), acc[g * D + d]);
    }
    for (int64_t i = 0; i < heads * D; i++) out[i] = float_to_bf16(acc[i]);
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
        score_slots(qf, D, k_cache, Hkv, h, slots, mask, L, scale, scores);
        softmax(scores, heads, L);
        sum_values(scores, heads, D, v_cache, Hkv, h, slots, mask, L, acc, out + g0 * D);
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

/* Decode attention over the paged KV cache: one query token per sequence.
 *
 * For each sequence and KV head, the query heads that share it score every
 * context slot, softmax, and sum the values: in float32, reading K and V
 * straight from their cache slots (no gathered copy), skipping masked slots.
 * Query-key products go by pairs of bf16 elements (vdpbf16ps where the CPU has
 * AVX512-BF16), each slot's key and value rows are asked of memory a few slots
 * ahead (the context's pages lie scattered), and each sequence is computed on
 * its own, so batching never changes a result.
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

/* Query-key dots by pairs of bf16 elements. A row's elements go 32 at a time (a chunk; a
 * last one of 16 is zero-padded), lane i of 16 taking elements 2i and 2i + 1, and each lane adds
 * its odd product and then its even one to its running sum, each fused: what AVX512-BF16's
 * vdpbf16ps computes (a product of bf16 values is exact in float32), one instruction for 32
 * products, and what the other builds compute with two fused multiply-adds (checked bit for bit
 * on Zen 4; the instruction also counts denormal bf16 values, below 2^-126, as zero, which keys
 * and queries out of their norms never are). */
#if VEC_LANES == 16 && defined(__AVX512BF16__)
#define NATIVE_PAIRS 1
#else
#define NATIVE_PAIRS 0
#endif

/* One key chunk, loaded once for the four heads. */
typedef struct {
#if NATIVE_PAIRS
    __m512i raw;
#elif VEC_LANES == 16
    vf odd, even;
#elif VEC_LANES == 8
    vf odd_lo, even_lo, odd_hi, even_hi;
#else
    float odd[W], even[W];
#endif
} KeyPairs;

/* Key chunk at k (16 elements if `half`, the rest zero). As dwords, an odd element's float is
 * the dword's high half with zero below, the even one's the low half moved up. */
static inline KeyPairs key_pairs(const uint16_t *k, int half) {
    KeyPairs r;
#if NATIVE_PAIRS
    r.raw = half ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)k)) : _mm512_loadu_si512(k);
#elif VEC_LANES == 16
    const __m512i raw = half ? _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)k)) : _mm512_loadu_si512(k);
    r.odd = _mm512_castsi512_ps(_mm512_and_si512(raw, _mm512_set1_epi32((int)0xffff0000)));
    r.even = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
#elif VEC_LANES == 8
    const __m256i lo = _mm256_loadu_si256((const __m256i *)k),
                  hi = half ? _mm256_setzero_si256() : _mm256_loadu_si256((const __m256i *)(k + 16));
    r.odd_lo = _mm256_castsi256_ps(_mm256_and_si256(lo, _mm256_set1_epi32((int)0xffff0000)));
    r.even_lo = _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16));
    r.odd_hi = _mm256_castsi256_ps(_mm256_and_si256(hi, _mm256_set1_epi32((int)0xffff0000)));
    r.even_hi = _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16));
#else
    for (int i = 0; i < W; i++) {
        const int in = !half || i < W / 2;
        r.odd[i] = in ? bf16_to_float(k[2 * i + 1]) : 0.0f;
        r.even[i] = in ? bf16_to_float(k[2 * i]) : 0.0f;
    }
#endif
    return r;
}

/* A group's four query heads by pairs: raw bf16 chunks for vdpbf16ps, else each chunk's odd and
 * even elements as floats; zero past D and for missing heads. `Dp`: D rounded up to 32. */
typedef struct {
    int64_t Dp;
#if NATIVE_PAIRS
    uint16_t *raw; /* [HEADS][Dp] */
#else
    float *odd, *even; /* [HEADS][Dp / 2] */
#endif
} QueryPairs;

static void query_pairs(QueryPairs *qp, const uint16_t *q, int heads, int64_t D) {
    for (int g = 0; g < HEADS; g++) {
        for (int64_t e = 0; e < qp->Dp; e++) {
            const uint16_t v = g < heads && e < D ? q[g * D + e] : 0;
#if NATIVE_PAIRS
            qp->raw[g * qp->Dp + e] = v;
#else
            (e % 2 ? qp->odd : qp->even)[g * qp->Dp / 2 + e / 2] = bf16_to_float(v);
#endif
        }
    }
}

/* acc + head g's pair products with key chunk c. */
static inline f16x pairs_dot(f16x acc, const QueryPairs *qp, int g, int64_t c, const KeyPairs *k) {
#if NATIVE_PAIRS
    acc.v = _mm512_dpbf16_ps(acc.v, (__m512bh)_mm512_loadu_si512(qp->raw + g * qp->Dp + 32 * c), (__m512bh)k->raw);
#else
    const int64_t at = g * qp->Dp / 2 + W * c;
#if VEC_LANES == 16
    acc.v = vf_fmadd(vf_load(qp->odd + at), k->odd, acc.v);
    acc.v = vf_fmadd(vf_load(qp->even + at), k->even, acc.v);
#elif VEC_LANES == 8
    acc.lo = vf_fmadd(vf_load(qp->odd + at), k->odd_lo, acc.lo);
    acc.lo = vf_fmadd(vf_load(qp->even + at), k->even_lo, acc.lo);
    acc.hi = vf_fmadd(vf_load(qp->odd + at + 8), k->odd_hi, acc.hi);
    acc.hi = vf_fmadd(vf_load(qp->even + at + 8), k->even_hi, acc.hi);
#else
    for (int i = 0; i < W; i++) {
        acc.f[i] = fmaf(qp->odd[at + i], k->odd[i], acc.f[i]);
        acc.f[i] = fmaf(qp->even[at + i], k->even[i], acc.f[i]);
    }
#endif
#endif
    return acc;
}

/* Slots ahead of the one being scored whose key and value rows are asked of memory now: a
 * context's slots lie in pages of a few rows scattered over the cache, so the hardware's
 * prefetchers lose the stream at every page. */
#define FETCH_AHEAD 6

static inline void fetch_ahead(const uint16_t *k_cache, const uint16_t *v_cache, int64_t Hkv, int64_t h, int64_t D,
                               const int64_t *slots, int64_t l) {
    const char *k = (const char *)(k_cache + (slots[l] * Hkv + h) * D), *v = (const char *)(v_cache + (slots[l] * Hkv + h) * D);
    for (int64_t at = 0; at < D * 2; at += 64) {
        __builtin_prefetch(k + at, 0, 3);
        __builtin_prefetch(v + at, 0, 2);
    }
}

/* scores[g][l] = q[g] . k_l * scale + mask[l] for the four heads, every unmasked slot. `qf`: the
 * heads as floats, for a head size that is not a multiple of 16 (one sum in order). */
static void score_slots(const QueryPairs *qp, const float *qf, int64_t D, const uint16_t *k_cache,
                        const uint16_t *v_cache, int64_t Hkv, int64_t h, const int64_t *slots, const float *mask,
                        int64_t L, float scale, float *scores) {
    for (int64_t l = 0; l < L; l++) {
        if (isinf(mask[l])) {
            for (int g = 0; g < HEADS; g++) scores[g * L + l] = -INFINITY;
            continue;
        }
        const uint16_t *k = k_cache + (slots[l] * Hkv + h) * D;
        fetch_ahead(k_cache, v_cache, Hkv, h, D, slots, l + FETCH_AHEAD < L ? l + FETCH_AHEAD : l);
        if (D % 16) { /* an odd head size: one sum in order, the same on every build */
            for (int g = 0; g < HEADS; g++) {
                float sum = 0;
                for (int64_t d = 0; d < D; d++) sum = fmaf(qf[g * D + d], bf16_to_float(k[d]), sum);
                scores[g * L + l] = fmaf(sum, scale, mask[l]);
            }
            continue;
        }
        f16x acc[HEADS];
        for (int g = 0; g < HEADS; g++) acc[g] = f16_zero();
        for (int64_t c = 0; 32 * c < D; c++) {
            const KeyPairs kc = key_pairs(k + 32 * c, D - 32 * c < 32);
            for (int g = 0; g < HEADS; g++) acc[g] = pairs_dot(acc[g], qp, g, c, &kc);
        }
        for (int g = 0; g < HEADS; g++) scores[g * L + l] = fmaf(f16_sum(acc[g]), scale, mask[l]);
    }
}

/* Softmax of each head's scores in place; masked slots hold -inf and get 0. */
static void softmax(float *scores, int heads, int64_t L) {
    for (int g = 0; g < heads; g++) {
        float *s = scores + g * L, top = -INFINITY;
        for (int64_t l = 0; l < L; l++) top = s[l] > top ? s[l] : top; /* fmaxf's value, without its call */
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
    QueryPairs qp = {.Dp = (D + 31) / 32 * 32};
    float *qf = malloc((size_t)(HEADS * D) * sizeof(float)); /* a group's heads, then zeros */
    float *scores = calloc((size_t)(HEADS * L), sizeof(float));
    float *acc = malloc((size_t)(HEADS * D) * sizeof(float));
    float *pairs = malloc((size_t)(HEADS * qp.Dp) * sizeof(float)); /* room for either form of QueryPairs */
    if (!qf || !scores || !acc || !pairs) {
        free(qf), free(scores), free(acc), free(pairs);
        return -1;
    }
#if NATIVE_PAIRS
    qp.raw = (uint16_t *)pairs;
#else
    qp.odd = pairs, qp.even = pairs + HEADS * qp.Dp / 2;
#endif
    for (int64_t g0 = 0; g0 < G; g0 += HEADS) {
        const int heads = (int)(G - g0 < HEADS ? G - g0 : HEADS);
        if (D % 16) { /* only the in-order sum of an odd head size reads the heads as floats */
            memset(qf, 0, (size_t)(HEADS * D) * sizeof(float));
            for (int64_t i = 0; i < heads * D; i++) qf[i] = bf16_to_float(q[g0 * D + i]);
        }
        query_pairs(&qp, q + g0 * D, heads, D);
        score_slots(&qp, qf, D, k_cache, v_cache, Hkv, h, slots, mask, L, scale, scores);
        softmax(scores, heads, L);
        sum_values(scores, heads, D, v_cache, Hkv, h, slots, mask, L, acc, out + g0 * D);
    }
    free(qf), free(scores), free(acc), free(pairs);
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

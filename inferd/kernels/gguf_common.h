/* What the GGUF kernels share: the block formats' type ids, Q4_K/Q5_K scale unpacking and the
 * activation rows quantized to int8 per group of 32 inputs (d = max|x| / 127),
 * as llama.cpp quantizes them for its integer dot products. */
#ifndef INFERD_GGUF_COMMON_H
#define INFERD_GGUF_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "bf16.h"

#define GROUP 32
#define MAX_ROWS 8
/* Row functions are inlined with a constant M (see `products`), so their loops
 * over activation rows unroll and the accumulators stay in registers. */
#define INLINE static inline __attribute__((always_inline))

enum { Q4_0 = 2, Q5_0 = 6, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14 };

/* Activation rows quantized per group, group-major so that a group's rows lie
 * together (a kernel reaches every row of a group from one pointer): q
 * [K/32][M][32], d and sum (of q) [K/32][M], and the sums per 16 inputs
 * [K/32][M][2] (Q6_K's sub-blocks), and the factor of Q4_K's and Q5_K's mins,
 * -(d sum) [K/32][M]: computed once here, a broadcast from memory in the tiled
 * kernels, where its scalar arithmetic per group and row cost them 6% at 8 rows.
 * Read them through act_q and its kin. */
typedef struct {
    int8_t *q;
    float *d, *min_factor;
    int32_t *sum, *sum16;
    int64_t K, groups;
    int M;
} Acts;

/* Each activation row's first argmax over the outputs a thread has seen, in place of writing
 * them (a greedy step needs only that): the largest value, the lowest output index holding it,
 * and whether a NaN was seen. `base`: the output index of the part being computed. */
typedef struct {
    float value[MAX_ROWS];
    int64_t index[MAX_ROWS];
    int nan[MAX_ROWS];
    int64_t base;
} Best;

static inline void best_init(Best *b) {
    for (int m = 0; m < MAX_ROWS; m++) b->value[m] = -INFINITY, b->index[m] = INT64_MAX, b->nan[m] = 0;
    b->base = 0;
}

/* Output n of row m is v: kept where it is larger, or equal at a lower index. */
static inline void best_keep(Best *b, int m, int64_t n, float v) {
    if (v != v)
        b->nan[m] = 1;
    else if (v > b->value[m] || (v == b->value[m] && n < b->index[m]))
        b->value[m] = v, b->index[m] = n;
}

/* Each row of the pass's argmax from every thread's: the largest value, the lowest index holding it. */
static inline void merge_best(Best *into, const Best *from, int rows) {
    for (int m = 0; m < rows; m++) {
        into->nan[m] |= from->nan[m];
        if (from->value[m] > into->value[m] || (from->value[m] == into->value[m] && from->index[m] < into->index[m]))
            into->value[m] = from->value[m], into->index[m] = from->index[m];
    }
}

/* One input of bf16 or float32 activations (or bias). */
static inline float input_at(const void *x, int is_float, int64_t i) {
    return is_float ? ((const float *)x)[i] : bf16_to_float(((const uint16_t *)x)[i]);
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* 8 inputs from i on, as floats. */
static inline __m256 inputs8(const void *x, int is_float, int64_t i) {
    if (is_float) return _mm256_loadu_ps((const float *)x + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)x + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline int32_t sum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}
#endif

/* One group of 32 inputs: q, its scale d, and the sums of its two halves. A NaN input is
 * left out of max|x| and quantizes to 0, as fmaxf and lrintf's int8 truncation have it. */
static void quantize_group(const void *x, int x_is_float, int64_t g, int8_t *q, float *d_out, int32_t half[2]) {
#if defined(__AVX2__) && defined(__FMA__)
    __m256 v[4], amax = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int k = 0; k < 4; k++) {
        v[k] = inputs8(x, x_is_float, g * GROUP + 8 * k);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), amax); /* amax second: a NaN lane keeps it */
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
    __m256i n[4];
    for (int k = 0; k < 4; k++) {
        n[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(inv))); /* nearest even, as lrintf */
        n[k] = _mm256_and_si256(n[k], _mm256_cmpgt_epi32(n[k], _mm256_set1_epi32(INT32_MIN))); /* NaN -> 0 */
    }
    const __m256i words = _mm256_packs_epi32(n[0], n[1]), words2 = _mm256_packs_epi32(n[2], n[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, bytes);
    *d_out = d;
    half[0] = sum8(_mm256_add_epi32(n[0], n[1])), half[1] = sum8(_mm256_add_epi32(n[2], n[3]));
#else
    float v[GROUP], amax = 0;
    for (int j = 0; j < GROUP; j++) {
        v[j] = input_at(x, x_is_float, g * GROUP + j);
        amax = fmaxf(amax, fabsf(v[j]));
    }
    const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
    half[0] = half[1] = 0;
    for (int j = 0; j < GROUP; j++) {
        q[j] = (int8_t)lrintf(v[j] * inv);
        half[j / 16] += q[j];
    }
    *d_out = d;
#endif
}

/* Room for M rows of K inputs; 0, or -1 out of memory (free_rows frees what was had). */
static int alloc_rows(int M, int64_t K, Acts *a) {
    a->K = K, a->M = M, a->groups = K / GROUP;
    a->q = aligned_alloc(64, (size_t)((M * K + 63) / 64 * 64));
    const size_t n = (size_t)(M * a->groups); /* d, min_factor, sum, sum16 in one allocation, 4 bytes each */
    a->d = malloc(5 * n * sizeof(float));
    if (!a->q || !a->d) return -1;
    a->min_factor = a->d + n, a->sum = (int32_t *)(a->d + 2 * n), a->sum16 = a->sum + n;
    return 0;
}

/* The group at place `at` (group-major: group at / M of row at % M) from x, whose groups lie row by row. */
static inline void quantize_one(const void *x, int x_is_float, Acts *a, int64_t at) {
    const int64_t g = (at % a->M) * a->groups + at / a->M;
    int32_t half[2];
    quantize_group(x, x_is_float, g, a->q + at * GROUP, &a->d[at], half);
    a->sum[at] = half[0] + half[1];
    a->sum16[2 * at] = half[0], a->sum16[2 * at + 1] = half[1];
    a->min_factor[at] = -(a->d[at] * (float)a->sum[at]);
}

static int quantize_rows(const void *x, int x_is_float, int M, int64_t K, Acts *a) {
    if (alloc_rows(M, K, a)) return -1;
    for (int64_t at = 0; at < M * a->groups; at++) quantize_one(x, x_is_float, a, at);
    return 0;
}

static void free_rows(Acts *a) { free(a->q), free(a->d); }

static inline const int8_t *act_q(const Acts *a, int m, int64_t g) { return a->q + (g * a->M + m) * GROUP; }
static inline float act_d(const Acts *a, int m, int64_t g) { return a->d[g * a->M + m]; }
static inline int32_t act_sum(const Acts *a, int m, int64_t g) { return a->sum[g * a->M + m]; }
/* Sub-block s (0 .. K/16-1) of row m: the half s % 2 of group s / 2. */
static inline int32_t act_sum16(const Acts *a, int m, int64_t s) { return a->sum16[((s / 2) * a->M + m) * 2 + s % 2]; }
static inline float act_min_factor(const Acts *a, int m, int64_t g) { return a->min_factor[g * a->M + m]; }

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. */
static inline void scale_min_k4(int j, const uint8_t *s, int *scale, int *min) {
    if (j < 4) {
        *scale = s[j] & 63, *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

#endif

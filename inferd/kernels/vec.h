/* float32 vectors of the widest kind a build targets, so a kernel is written
 * once for every instruction set: AVX-512 (VEC_LANES 16), AVX2 with FMA (8),
 * or none (VEC_LANES 0: the kernel's portable C runs instead).
 *
 * vf_exp is e^x by 2^n * 2^f with |f| <= 1/2 and 2^f by its degree-6 Taylor
 * polynomial (relative error under 2e-7, below float32's step); overflow
 * gives inf, underflow 0; f_exp is the same for one value. vf_store_bf16 rounds to nearest even as torch does.
 */
#ifndef INFERD_VEC_H
#define INFERD_VEC_H

#include <stdint.h>
#include "bf16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define VEC_LANES 16
typedef __m512 vf;

static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm512_set1_ps(x); }
static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vf_sum(vf v) { return _mm512_reduce_add_ps(v); }
static inline float vf_top(vf v) { return _mm512_reduce_max_ps(v); }
/* 0 where `where` is -inf, else v. */
static inline vf vf_zero_at_neg_inf(vf where, vf v) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(where, _mm512_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ), v);
}
/* p 2^n for whole n. */
static inline vf vf_ldexp(vf p, vf n) { return _mm512_scalef_ps(p, n); }
static inline vf vf_round_int(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline vf vf_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
/* Each lane's bf16 (rounded to nearest even; NaN stays a quiet NaN) in its low 16 bits. */
static inline __m512i vf_bf16_bits(vf v) {
    __m512i u = _mm512_castps_si512(v), high = _mm512_srli_epi32(u, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
}
static inline void vf_store_bf16(uint16_t *p, vf v) { _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(vf_bf16_bits(v))); }
static inline vf vf_round_bf16(vf v) { return _mm512_castsi512_ps(_mm512_slli_epi32(vf_bf16_bits(v), 16)); }

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VEC_LANES 8
typedef __m256 vf;

static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_set1(float x) { return _mm256_set1_ps(x); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float vf_sum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vf_top(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vf vf_zero_at_neg_inf(vf where, vf v) {
    return _mm256_and_ps(_mm256_cmp_ps(where, _mm256_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ), v);
}
/* p 2^n for whole n in [-150, 128], by two factors in turn, each a normal
 * float: results near the ends of float32's range round once, as scalef's do. */
static inline vf vf_ldexp(vf p, vf n) {
    __m256i whole = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(whole, 1), bias = _mm256_set1_epi32(127);
    __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(whole, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}
static inline vf vf_round_int(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

static inline vf vf_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline __m256i vf_bf16_bits(vf v) { return bf16_bits8(v); }
static inline void vf_store_bf16(uint16_t *p, vf v) { bf16_store8(p, v); }
static inline vf vf_round_bf16(vf v) { return _mm256_castsi256_ps(_mm256_slli_epi32(vf_bf16_bits(v), 16)); }

#else
#define VEC_LANES 0
#endif

#include <math.h>

/* vf_exp for one value, the same operations in the same order, so scalar
 * tails and the portable path compute what a vector lane does. */
static inline float f_exp(float x) {
    float t = fmaxf(x, -104.0f) * 1.44269504088896341f, n = rintf(t), f = (t - n) * 0.693147180559945309f;
    float p = 1.0f / 720;
    p = fmaf(p, f, 1.0f / 120);
    p = fmaf(p, f, 1.0f / 24);
    p = fmaf(p, f, 1.0f / 6);
    p = fmaf(p, f, 0.5f);
    p = fmaf(p, f, 1.0f);
    p = fmaf(p, f, 1.0f);
    return ldexpf(p, (int)fminf(n, 128.0f));
}

#if VEC_LANES
static inline vf vf_exp(vf x) {
    vf t = vf_mul(vf_max(x, vf_set1(-104.0f)), vf_set1(1.44269504088896341f));
    vf n = vf_round_int(t);
    vf f = vf_mul(vf_sub(t, n), vf_set1(0.693147180559945309f)); /* f ln 2, |.| <= 0.347 */
    vf p = vf_set1(1.0f / 720);
    p = vf_fmadd(p, f, vf_set1(1.0f / 120));
    p = vf_fmadd(p, f, vf_set1(1.0f / 24));
    p = vf_fmadd(p, f, vf_set1(1.0f / 6));
    p = vf_fmadd(p, f, vf_set1(0.5f));
    p = vf_fmadd(p, f, vf_set1(1.0f));
    p = vf_fmadd(p, f, vf_set1(1.0f));
    return vf_ldexp(p, vf_min(n, vf_set1(128.0f))); /* beyond 2^128 it is inf anyway */
}
#endif

#endif

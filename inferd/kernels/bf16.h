/* bf16 <-> float32, shared by the kernels. bf16 is the top half of a float32. */
#ifndef INFERD_BF16_H
#define INFERD_BF16_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, as torch's casts do; NaN stays a (quiet) NaN.
 * Branch-free, so loops over it vectorize. */
static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

static inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

#ifdef __AVX512F__
#include <immintrin.h>

/* 16 bf16 values as float32 lanes. */
static inline __m512 load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* float_to_bf16 on 16 lanes. */
static inline __m256i to_bf16(__m512 v) {
    __m512i u = _mm512_castps_si512(v), high = _mm512_srli_epi32(u, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40)));
}

static inline void store_bf16(uint16_t *p, __m512 v) { _mm256_storeu_si256((__m256i *)p, to_bf16(v)); }
#endif

#endif

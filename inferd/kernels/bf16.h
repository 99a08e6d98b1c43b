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

#if defined(__AVX2__)
#include <immintrin.h>
/* float_to_bf16 of 8 lanes, each in its lane's low 16 bits. */
static inline __m256i bf16_bits8(__m256 v) {
    __m256i u = _mm256_castps_si256(v), high = _mm256_srli_epi32(u, 16);
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)))), 16);
    /* |u| above inf's bits is a NaN; both sides are non-negative, so the signed compare holds */
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
}

static inline void bf16_store8(uint16_t *p, __m256 v) {
    __m256i bits = bf16_bits8(v); /* every lane <= 0xffff: the unsigned saturating pack only narrows */
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)));
}
#endif

#endif

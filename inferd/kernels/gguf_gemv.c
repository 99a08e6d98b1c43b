/* Matrix products over a GGUF file's own quantized blocks, for decoding:
 * y = x @ W.T, each row of W exactly the file's bytes, no second quantization.
 *
 * Formats (ggml's block layouts and dequantization; w = weight):
 * - Q8_0, 34 bytes per 32: fp16 d, int8 q[32];                 w = d q
 * - Q4_0, 18 bytes per 32: fp16 d, nibbles (low: 0..15, high: 16..31); w = d (q - 8)
 * - Q5_0, 22 bytes per 32: fp16 d, 32 high bits, nibbles as Q4_0;      w = d (q - 16)
 * - Q4_K, 144 bytes per 256: fp16 d, dmin, 12 bytes of 6-bit scales and
 *   mins for eight sub-blocks of 32, 128 bytes of nibbles;   w = d sc q - dmin m
 * - Q5_K, 176 bytes per 256: as Q4_K, plus 32 bytes of fifth bits
 * - Q6_K, 210 bytes per 256: 128 bytes of low nibbles, 64 of 2-bit highs,
 *   int8 scales for sixteen sub-blocks of 16, fp16 d;        w = d sc (q - 32)
 *
 * Activations are quantized to int8 per group of 32 inputs (d = max|x| / 127),
 * so every product is an integer dot product of 32 bytes, scaled once: the
 * arithmetic llama.cpp does, at the bandwidth a decode step needs. Each
 * weight block is unpacked once and applied to every activation row (up to
 * MAX_ROWS). Vector paths: AVX2 (u8 x s8 pairs), AVX-512 VNNI or AVX-VNNI
 * (vpdpbusd); the portable path computes the same sums in scalar C.
 *
 * Parts whose rows fill tiles of 8 are held in tiles (gguf_tiles.h: several
 * times faster); this file's row kernels serve the rest.
 *
 * W: one or more parts of N rows of row_bytes; x: [M, K] and bias: [N] or
 * NULL, both bf16 or both float32 (the engine's dtype: float32 on CPUs
 * without native bf16); y: [M, N] float32 or bf16, each part writing its own columns.
 * Threads: OpenMP over output rows, in one parallel region for all the parts, which
 * also shares the activations' quantizing where there is enough of it.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "half.h"

#if defined(__AVX2__) && defined(__FMA__)
#define VECTORIZED 1
#include <immintrin.h>
#else
#define VECTORIZED 0
#endif

#include "gguf_common.h"
#include "gguf_tiles.h"
#include "head_screen.h"

int inferd_gguf_gemv_vectorized(void) { return VECTORIZED; }

/* The most activation rows for which a Q8_0 head's greedy pick pays for reading its screen first
 * (head_screen.h). On vector builds whose dot products take signed bytes by the sign trick (no
 * VNNI), the screen's small unsigned weights need half the instructions: it pays at any count.
 * With VNNI the head's products cost what the screen's do, so the screen pays where the head is
 * bound by memory, at one or two rows (1.1-1.3x there; 0.9x at four and eight). */
#if TILES_VECTORIZED && Q8_OFFSET == 0
int inferd_gguf_screen_rows(void) { return 1 << 30; }
#elif TILES_VECTORIZED
int inferd_gguf_screen_rows(void) { return 2; }
#else
int inferd_gguf_screen_rows(void) { return 0; }
#endif

#if VECTORIZED
/* Eight int32 sums of four u8 x s8 products each (u <= 128, so AVX2's int16 pairs cannot saturate). */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* The same for two signed operands: |w| times x carrying w's sign. */
static inline __m256i dot_s8s8(__m256i w, __m256i x) { return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline float sum_lanes(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* 16 bytes of nibbles -> 32 bytes: the low nibbles, then the high ones. */
static inline __m256i split_nibbles16(const uint8_t *p) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

/* Bit i of a 32-bit word -> byte i: `value` where set, else 0. */
static inline __m256i spread_bits(uint32_t bits, char value) {
    const __m256i which = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), which); /* byte i holds bits 8(i/8).. */
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(value));
}

/* Two accumulators per row, for alternate blocks: half the chain of dependent adds. */
#define ACC_INIT __m256 acc[2][MAX_ROWS]; for (int m = 0; m < M; m++) acc[0][m] = acc[1][m] = _mm256_setzero_ps()
#define ACC_ADD(i, m, ints, scale) \
    acc[i][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ints), _mm256_set1_ps(scale), acc[i][m])
#define ACC_STORE for (int m = 0; m < M; m++) y[m] = sum_lanes(_mm256_add_ps(acc[0][m], acc[1][m])) - offset[m]
#else
/* The vector paths' arithmetic in scalar C, so every build gives the same bits: a block's
 * 32 products summed in 8 lanes of 4, each lane scaled into one of two accumulators, the
 * lanes summed at the end in the vector paths' order. */
#define ACC_INIT float acc[2][MAX_ROWS][8] = {{{0}}}
#define ACC_STORE for (int m = 0; m < M; m++) y[m] = sum_lanes(acc[0][m], acc[1][m]) - offset[m]

/* acc[l] += (sum of q[4l..4l+3] x[4l..4l+3]) * scale, lanes 0-3 by `low`, 4-7 by `high`. */
static inline void lanes_add(float *acc, const int *q, const int8_t *x, float low, float high) {
    for (int l = 0; l < 8; l++) {
        int32_t dot = 0;
        for (int j = 0; j < 4; j++) dot += q[4 * l + j] * x[4 * l + j];
        acc[l] = fmaf((float)dot, l < 4 ? low : high, acc[l]);
    }
}

static inline float sum_lanes(const float *a, const float *b) {
    float v[8], s4[4];
    for (int l = 0; l < 8; l++) v[l] = a[l] + b[l];
    for (int i = 0; i < 4; i++) s4[i] = v[i] + v[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}
#endif

/* Q4_K / Q5_K: a pair of sub-blocks' mins, dmin (m0 d0 s0 + m1 d1 s1), added to `offset`
 * by fused multiply-adds on every build. */
static inline float add_mins(float offset, float dmin, int m0, float d0, int32_t s0, int m1, float d1, int32_t s1) {
    return fmaf(dmin, fmaf((float)m1 * d1, (float)s1, ((float)m0 * d0) * (float)s0), offset);
}

/* One output row of each type: y[m] = sum_k w[k] x[m][k], for the M activation rows. */

INLINE void row_q8_0(const uint8_t *w, const Acts *a, const int M, float *y) {
    float offset[MAX_ROWS] = {0};
#if VECTORIZED
    ACC_INIT;
    for (int64_t b = 0; b < a->groups; b++) {
        const uint8_t *blk = w + b * 34;
        const float d = load_half(blk);
        const __m256i q = load32(blk + 2);
        for (int m = 0; m < M; m++) ACC_ADD(b & 1, m, dot_s8s8(q, load32(act_q(a, m, b))), d * act_d(a, m, b));
    }
    ACC_STORE;
#else
    ACC_INIT;
    for (int64_t b = 0; b < a->groups; b++) {
        const uint8_t *blk = w + b * 34;
        const float d = load_half(blk);
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = (int8_t)blk[2 + j];
        for (int m = 0; m < M; m++) lanes_add(acc[b & 1][m], q, act_q(a, m, b), d * act_d(a, m, b), d * act_d(a, m, b));
    }
    ACC_STORE;
#endif
}

/* Q4_0 and Q5_0: q (with Q5_0's fifth bit) minus `zero`. */
INLINE void row_q4_q5_0(const uint8_t *w, const Acts *a, const int M, float *y, const int five) {
    const int size = five ? 22 : 18, zero = five ? 16 : 8;
    float offset[MAX_ROWS] = {0};
#if VECTORIZED
    ACC_INIT;
    for (int64_t b = 0; b < a->groups; b++) {
        const uint8_t *blk = w + b * size;
        const float d = load_half(blk);
        __m256i q = split_nibbles16(blk + size - 16);
        if (five) {
            uint32_t high;
            memcpy(&high, blk + 2, 4);
            q = _mm256_or_si256(q, spread_bits(high, 16));
        }
        q = _mm256_sub_epi8(q, _mm256_set1_epi8((char)zero));
        for (int m = 0; m < M; m++) ACC_ADD(b & 1, m, dot_s8s8(q, load32(act_q(a, m, b))), d * act_d(a, m, b));
    }
    ACC_STORE;
#else
    ACC_INIT;
    for (int64_t b = 0; b < a->groups; b++) {
        const uint8_t *blk = w + b * size, *nibbles = blk + size - 16;
        const float d = load_half(blk);
        uint32_t high = 0;
        if (five) memcpy(&high, blk + 2, 4);
        int q[32];
        for (int j = 0; j < 16; j++) {
            q[j] = (nibbles[j] & 0xf) + (int)(((high >> j) & 1) << 4) - zero;
            q[j + 16] = (nibbles[j] >> 4) + (int)(((high >> (j + 16)) & 1) << 4) - zero;
        }
        for (int m = 0; m < M; m++) lanes_add(acc[b & 1][m], q, act_q(a, m, b), d * act_d(a, m, b), d * act_d(a, m, b));
    }
    ACC_STORE;
#endif
}

/* Q4_K and Q5_K: per pair of sub-blocks, 32 bytes whose low nibbles are the
 * first sub-block and high nibbles the second (Q5_K: plus 16 where its bits say). */
INLINE void row_q4_q5_k(const uint8_t *w, const Acts *a, const int M, float *y, const int five) {
    const int size = five ? 176 : 144;
    const int64_t blocks = a->K / 256;
    float offset[MAX_ROWS] = {0};
    ACC_INIT;
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = w + b * size, *packed = blk + 4, *high = blk + 16, *nibbles = blk + (five ? 48 : 16);
        const float d = load_half(blk), dmin = load_half(blk + 2);
        int scale[8], min[8];
        for (int j = 0; j < 8; j++) scale_min_k4(j, packed, &scale[j], &min[j]);
        for (int pair = 0; pair < 4; pair++) {
            const int64_t g = b * 8 + 2 * pair;
            const uint8_t *qs = nibbles + 32 * pair;
#if VECTORIZED
            const __m256i raw = load32(qs), mask = _mm256_set1_epi8(0x0f);
            __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
            if (five) {
                const __m256i bits = load32(high), b0 = _mm256_set1_epi8((char)(1 << (2 * pair))),
                              b1 = _mm256_set1_epi8((char)(1 << (2 * pair + 1))), sixteen = _mm256_set1_epi8(16);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, b0), b0), sixteen));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, b1), b1), sixteen));
            }
            for (int m = 0; m < M; m++) {
                const float d0 = act_d(a, m, g), d1 = act_d(a, m, g + 1);
                ACC_ADD(0, m, dot_u8s8(lo, load32(act_q(a, m, g))), d * scale[2 * pair] * d0);
                ACC_ADD(1, m, dot_u8s8(hi, load32(act_q(a, m, g + 1))), d * scale[2 * pair + 1] * d1);
                offset[m] = add_mins(offset[m], dmin, min[2 * pair], d0, act_sum(a, m, g), min[2 * pair + 1], d1,
                                     act_sum(a, m, g + 1));
            }
#else
            int q0[32], q1[32];
            for (int l = 0; l < 32; l++) {
                q0[l] = (qs[l] & 0xf) + (five && (high[l] >> (2 * pair) & 1) ? 16 : 0);
                q1[l] = (qs[l] >> 4) + (five && (high[l] >> (2 * pair + 1) & 1) ? 16 : 0);
            }
            for (int m = 0; m < M; m++) {
                const float d0 = act_d(a, m, g), d1 = act_d(a, m, g + 1);
                lanes_add(acc[0][m], q0, act_q(a, m, g), d * scale[2 * pair] * d0, d * scale[2 * pair] * d0);
                lanes_add(acc[1][m], q1, act_q(a, m, g + 1), d * scale[2 * pair + 1] * d1, d * scale[2 * pair + 1] * d1);
                offset[m] = add_mins(offset[m], dmin, min[2 * pair], d0, act_sum(a, m, g), min[2 * pair + 1], d1,
                                     act_sum(a, m, g + 1));
            }
#endif
        }
    }
    ACC_STORE;
}

/* Q6_K: each half of a block is four chunks of 32; chunk c takes low or high
 * nibbles of 32 bytes and two bits of each qh byte, and its two 16-value
 * halves have their own scales. */
INLINE void row_q6_k(const uint8_t *w, const Acts *a, const int M, float *y) {
    const int64_t blocks = a->K / 256;
    float offset[MAX_ROWS] = {0};
    ACC_INIT;
    for (int64_t b = 0; b < blocks; b++) {
        const uint8_t *blk = w + b * 210;
        const int8_t *scales = (const int8_t *)(blk + 192);
        const float d = load_half(blk + 208);
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = blk + 64 * half, *qh = blk + 128 + 32 * half;
            const int8_t *sc = scales + 8 * half;
#if VECTORIZED
            const __m256i mask = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3), l0 = load32(ql),
                          l1 = load32(ql + 32), h = load32(qh), zero = _mm256_set1_epi8(32);
            __m256i chunks[4] = {
                _mm256_and_si256(l0, mask), _mm256_and_si256(l1, mask),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), mask), _mm256_and_si256(_mm256_srli_epi16(l1, 4), mask),
            };
            for (int c = 0; c < 4; c++) {
                __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), two), 4);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(chunks[c], top), zero);
                const int64_t g = b * 8 + 4 * half + c;
                for (int m = 0; m < M; m++) {
                    const float dx = d * act_d(a, m, g);
                    const __m256 scale = _mm256_set_m128(_mm_set1_ps(dx * sc[2 * c + 1]), _mm_set1_ps(dx * sc[2 * c]));
                    acc[c & 1][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8s8(q, load32(act_q(a, m, g)))), scale,
                                                    acc[c & 1][m]);
                }
            }
#else
            for (int c = 0; c < 4; c++) {
                int q[32];
                for (int l = 0; l < 32; l++) {
                    const int low = c & 1 ? ql[l + 32] : ql[l];
                    q[l] = ((c < 2 ? low & 0xf : low >> 4) | (((qh[l] >> (2 * c)) & 3) << 4)) - 32;
                }
                const int64_t g = b * 8 + 4 * half + c;
                for (int m = 0; m < M; m++) {
                    const float dx = d * act_d(a, m, g);
                    lanes_add(acc[c & 1][m], q, act_q(a, m, g), dx * sc[2 * c], dx * sc[2 * c + 1]);
                }
            }
#endif
        }
    }
    ACC_STORE;
}

static int64_t row_bytes(int type, int64_t K) {
    switch (type) {
    case Q8_0: return K / 32 * 34;
    case Q4_0: return K / 32 * 18;
    case Q5_0: return K / 32 * 22;
    case Q4_K: return K / 256 * 144;
    case Q5_K: return K / 256 * 176;
    case Q6_K: return K / 256 * 210;
    default: return -1;
    }
}

/* Every output row for M activation rows (a constant once inlined), starting at activation row m0;
 * shared among the threads of a parallel region, as tile_products is. */
INLINE void products(int type, const uint8_t *w, int64_t stride, int64_t N, const Acts *a, const int M,
                     const void *bias, int in_is_float, void *y, int64_t ldy, int y_is_float, int64_t m0, Best *best) {
#pragma omp for schedule(static) nowait
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = w + n * stride;
        float out[MAX_ROWS];
        switch (type) {
        case Q8_0: row_q8_0(row, a, M, out); break;
        case Q4_0: row_q4_q5_0(row, a, M, out, 0); break;
        case Q5_0: row_q4_q5_0(row, a, M, out, 1); break;
        case Q4_K: row_q4_q5_k(row, a, M, out, 0); break;
        case Q5_K: row_q4_q5_k(row, a, M, out, 1); break;
        default: row_q6_k(row, a, M, out); break;
        }
        for (int m = 0; m < M; m++) {
            const float v = bias ? out[m] + input_at(bias, in_is_float, n) : out[m];
            if (best)
                best_keep(best, m, best->base + n, y_is_float ? v : round_bf16(v));
            else if (y_is_float)
                ((float *)y)[(m0 + m) * ldy + n] = v;
            else
                ((uint16_t *)y)[(m0 + m) * ldy + n] = float_to_bf16(v);
        }
    }
}

/* Parts held in tiles (gguf_tiles.h) carry this flag beside their type. */
#define TILED 0x100

/* Every part's share of the calling thread for one pass of `rows` activation rows
 * (with `best`, its argmax of each row instead of y). */
static void all_parts(int parts, const int *types, const uint8_t *const *ws, const int64_t *rows_of, int64_t K,
                      const Acts *a, int rows, const void *bias, int in_is_float, void *y, int64_t ldy, int y_is_float,
                      int64_t m0, Best *best) {
    int64_t col = 0;
    for (int p = 0; p < parts; p++) {
        if (best) best->base = col;
        const int type = types[p] & ~TILED;
        const int64_t N = rows_of[p], stride = row_bytes(type, K);
        const void *b = !bias ? NULL : in_is_float ? (const void *)((const float *)bias + col)
                                                     : (const void *)((const uint16_t *)bias + col);
        void *out = !y ? NULL : y_is_float ? (void *)((float *)y + col) : (void *)((uint16_t *)y + col);
#define CALL(R) (types[p] & TILED ? tile_products(type, ws[p], N, a, R, b, in_is_float, out, ldy, y_is_float, m0, best) \
                                  : products(type, ws[p], stride, N, a, R, b, in_is_float, out, ldy, y_is_float, m0, best))
        switch (rows) {
        case 1: CALL(1); break;
        case 2: CALL(2); break;
        case 3: CALL(3); break;
        case 4: CALL(4); break;
        case 5: CALL(5); break;
        case 6: CALL(6); break;
        case 7: CALL(7); break;
        default: CALL(8); break;
        }
#undef CALL
        col += N;
    }
}

/* Activation groups from which the threads quantize them together, each a share, before the
 * products (a barrier between): about 3 us of quantizing alone, where sharing it saves more than
 * the threads' meeting costs. Fewer are quantized by the calling thread before the region. */
#define SHARED_QUANTIZE_GROUPS 128

/* Called by every thread of a parallel region: each quantizes a stretch of the `groups` places
 * (its own cache lines of the scales and sums), and all wait until every group is done. */
static void quantize_shared(const void *x, int x_is_float, Acts *a, int64_t groups) {
    if (!groups) return;
#pragma omp for schedule(static)
    for (int64_t at = 0; at < groups; at++) quantize_one(x, x_is_float, a, at);
}

/* One pass over the weights per MAX_ROWS activation rows, writing y, or with `tokens` (y NULL)
 * each row's first argmax of what y would hold. */
static int products_of(int parts, const int *types, const uint8_t *const *ws, const int64_t *rows_of, int64_t K,
                       const void *x, int64_t M, const void *bias, int in_is_float, void *y, int y_is_float,
                       int64_t *tokens) {
    int64_t ldy = 0;
    for (int p = 0; p < parts; p++) {
        const int type = types[p] & ~TILED;
        const int64_t block = type == Q4_K || type == Q5_K || type == Q6_K ? 256 : 32;
        if (row_bytes(type, K) < 0 || K % block || (types[p] & TILED && !inferd_gguf_tiled(type, rows_of[p])))
            return -2;
        ldy += rows_of[p];
    }
    if (M < 1) return -2;
    for (int64_t m0 = 0; m0 < M; m0 += MAX_ROWS) {
        const int rows = (int)(M - m0 < MAX_ROWS ? M - m0 : MAX_ROWS);
        Acts a;
        const void *xm = in_is_float ? (const void *)((const float *)x + m0 * K) : (const void *)((const uint16_t *)x + m0 * K);
        if (alloc_rows(rows, K, &a)) {
            free_rows(&a);
            return -1;
        }
        const int64_t groups = rows * a.groups;
        const int shared = groups >= SHARED_QUANTIZE_GROUPS;
        for (int64_t at = 0; !shared && at < groups; at++) quantize_one(xm, in_is_float, &a, at);
        /* One parallel region for all the parts: a thread done with its share of one part starts
         * on the next, and the threads meet once, at the region's end, not once a part. */
        if (!tokens) {
#pragma omp parallel
            {
                quantize_shared(xm, in_is_float, &a, shared ? groups : 0);
                all_parts(parts, types, ws, rows_of, K, &a, rows, bias, in_is_float, y, ldy, y_is_float, m0, NULL);
            }
        } else {
            Best all;
            best_init(&all);
#pragma omp parallel
            {
                Best mine;
                best_init(&mine);
                quantize_shared(xm, in_is_float, &a, shared ? groups : 0);
                all_parts(parts, types, ws, rows_of, K, &a, rows, bias, in_is_float, NULL, ldy, y_is_float, m0, &mine);
#pragma omp critical(inferd_gguf_best)
                merge_best(&all, &mine, rows);
            }
            for (int m = 0; m < rows; m++) tokens[m0 + m] = all.nan[m] || !isfinite(all.value[m]) ? -1 : all.index[m];
        }
        free_rows(&a);
    }
    return 0;
}

/* y = x @ W.T where W is `parts` matrices stacked by rows (a fused projection
 * whose tensors may differ in format), each with its own type, bytes and row
 * count; the activations are quantized once for all of them.
 * 0 on success; -1 out of memory; -2 an unsupported type or shape. */
int inferd_gguf_gemv(int parts, const int *types, const uint8_t *const *ws, const int64_t *rows_of, int64_t K,
                     const void *x, int64_t M, const void *bias, int in_is_float, void *y, int y_is_float) {
    return products_of(parts, types, ws, rows_of, K, x, M, bias, in_is_float, y, y_is_float, NULL);
}

/* tokens[m]: the first index of row m's largest value in what inferd_gguf_gemv would write to y
 * (float32, or bf16 where y_is_float is 0), or -1 where the row has no finite maximum (a NaN,
 * +inf, or every value -inf), as the sampler's greedy pick finds it there; y itself is never
 * written, nor read back. Returns as inferd_gguf_gemv. */
int inferd_gguf_argmax(int parts, const int *types, const uint8_t *const *ws, const int64_t *rows_of, int64_t K,
                       const void *x, int64_t M, const void *bias, int in_is_float, int y_is_float, int64_t *tokens) {
    return products_of(parts, types, ws, rows_of, K, x, M, bias, in_is_float, NULL, y_is_float, tokens);
}

/* The screen of a head of N rows of K inputs in Q8_0 tiles (see head_screen.h), into
 * `screen`: N rows of inferd_gguf_tiled_row_bytes(Q5_0, K). 0, or -2 for another shape. */
int inferd_gguf_screen_of(const uint8_t *head, int64_t N, int64_t K, uint8_t *screen) {
    if (!inferd_gguf_tiled(Q8_0, N) || K < GROUP || K % GROUP) return -2;
    screen_of(head, N, K, screen);
    return 0;
}

/* inferd_gguf_argmax's tokens for a head of N rows of K inputs in Q8_0 tiles, no bias,
 * found through its screen (head_screen.h). scratch: N / 8 * MAX_ROWS floats, then
 * N / 8 int32. Returns as inferd_gguf_argmax, but 1 where some pass of MAX_ROWS rows
 * computed the whole head instead (still with its tokens). */
int inferd_gguf_screened_argmax(const uint8_t *head, const uint8_t *screen, int64_t N, int64_t K, const void *x,
                                int64_t M, int in_is_float, int y_is_float, void *scratch, int64_t *tokens) {
    if (!inferd_gguf_tiled(Q8_0, N) || K < GROUP || K % GROUP || M < 1) return -2;
    const int64_t tiles = N / TILE;
    float *top = scratch;
    int32_t *kept = (int32_t *)(top + tiles * MAX_ROWS);
    const int type = Q8_0 | TILED;
    int whole_head = 0;
    for (int64_t m0 = 0; m0 < M; m0 += MAX_ROWS) {
        const int rows = (int)(M - m0 < MAX_ROWS ? M - m0 : MAX_ROWS);
        const void *xm = in_is_float ? (const void *)((const float *)x + m0 * K) : (const void *)((const uint16_t *)x + m0 * K);
        Acts a;
        if (quantize_rows(xm, in_is_float, rows, K, &a)) {
            free_rows(&a);
            return -1;
        }
        const int whole = screened_pass(head, screen, tiles, &a, rows, y_is_float, top, kept, tokens + m0);
        free_rows(&a);
        if (whole) {
            const int status = products_of(1, &type, &head, &N, K, xm, rows, NULL, in_is_float, NULL, y_is_float, tokens + m0);
            if (status) return status;
            whole_head = 1;
        }
    }
    return whole_head;
}

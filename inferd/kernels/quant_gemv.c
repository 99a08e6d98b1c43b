/* Weight-only quantized matrix products for decoding on CPU: y = x @ W.T.
 *
 * Decoding reads every weight once per step, so a step is bound by weight
 * bytes over memory bandwidth. These kernels read each weight once per call,
 * apply it to up to eight activation rows, and keep the arithmetic cheap
 * enough to run at bandwidth: activations are quantized to int8 per group of
 * 32 inputs (as llama.cpp's Q8 activations), and products are summed in
 * int32 four at a time (AVX-512 VNNI `vpdpbusd`, u8 x s8).
 *
 * Layouts (N a multiple of 16, K of 32): output rows come in tiles of 16,
 * one per 32-bit vector lane, so a tile's 16 results fill one register.
 * - int8: [N/16][K/4][16][4] int8, w = q * scale[n] (bf16 [N]).
 * - int4: [N/16][K/32][4][16][4] bytes; in block j of a group the low
 *   nibbles are inputs 4j..4j+3 and the high nibbles 16+4j..16+4j+3 of each
 *   of the 16 rows. params [N/16][K/32][2][16] bf16: scale, then min;
 *   w = q * scale + min, q in 0..15.
 * Activations x [M, K] are bf16 and outputs y [M, N] bf16 or float32, row-major.
 *
 * Vector paths (`inferd_quant_gemv_vectorized`): 1, AVX-512 VNNI, a tile in
 * one register; 2, AVX2 with FMA, a tile in two halves of 8 rows, products
 * of pairs by `vpmaddubsw` (int8 weights as |w| times x carrying w's sign,
 * so no pair sum can saturate int16). The portable path computes the same
 * sums in scalar C.
 * Threads: OpenMP over chunks of tiles, linked to the libgomp torch loads, so it shares
 * torch's thread pool and thread count.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "vec.h"
#include "work_chunks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define VECTORIZED 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__)
#define VECTORIZED 2
#include <immintrin.h>
#else
#define VECTORIZED 0
#endif

#define TILE 16
#define GROUP 32
#define MAX_ROWS 8 /* activation rows applied per weight load */
/* Weights stream from memory once per step; at eight rows the arithmetic per
 * byte outlasts what the hardware prefetcher runs ahead, so the loops ask for
 * the weights this far ahead themselves (past the end is harmless: a
 * prefetch never faults). */
#define PREFETCH_BYTES 8192

int inferd_quant_gemv_vectorized(void) { return VECTORIZED; }

/* x quantized per group of 32: xq = round(x / d), d = max|x| / 127; with
 * each group's scale d and its exact float sum (which carries int4's mins). */
typedef struct {
    int8_t *q;
    float *scale, *sum;
    float *offset; /* per row: 128 * sum of d * xq, what int8's unsigned shift adds */
} Activations;

static int quantize_activations(const uint16_t *x, int64_t M, int64_t K, Activations *a) {
    int64_t count = M * K, groups = count / GROUP;
    a->q = aligned_alloc(64, (size_t)((count + 63) / 64 * 64));
    a->scale = malloc((size_t)groups * sizeof(float));
    a->sum = malloc((size_t)groups * sizeof(float));
    a->offset = calloc((size_t)M, sizeof(float));
    if (!a->q || !a->scale || !a->sum || !a->offset) return -1;
    for (int64_t g = 0; g < groups; g++) {
        float d, sum;
        int32_t qsum;
#if VECTORIZED == 1
        __m512 v0 = vf_load_bf16(x + g * GROUP), v1 = vf_load_bf16(x + g * GROUP + 16);
        d = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127.0f;
        sum = _mm512_reduce_add_ps(_mm512_add_ps(v0, v1));
        __m512 inv = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
        _mm_storeu_si128((__m128i *)(a->q + g * GROUP), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(a->q + g * GROUP + 16), _mm512_cvtepi32_epi8(q1));
        qsum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#else
        float v[GROUP], amax = 0;
        sum = 0;
        for (int j = 0; j < GROUP; j++) {
            v[j] = bf16_to_float(x[g * GROUP + j]);
            amax = fmaxf(amax, fabsf(v[j]));
            sum += v[j];
        }
        d = amax / 127.0f;
        float inv = d > 0 ? 1.0f / d : 0.0f;
        qsum = 0;
        for (int j = 0; j < GROUP; j++) {
            a->q[g * GROUP + j] = (int8_t)lrintf(v[j] * inv);
            qsum += a->q[g * GROUP + j];
        }
#endif
        a->scale[g] = d;
        a->sum[g] = sum;
        a->offset[g * GROUP / K] += 128.0f * (float)qsum * d;
    }
    return 0;
}

static void free_activations(Activations *a) {
    free(a->q);
    free(a->scale);
    free(a->sum);
    free(a->offset);
}

/* Outputs are bf16, or float32 for logits (which the sampler reads in float32 anyway). */
typedef struct {
    void *data;
    int64_t N;
    int is_float;
} Output;

static inline void store_row(const Output *y, int64_t row, int64_t col, const float *v, const uint16_t *bias) {
    float sum[TILE];
    for (int i = 0; i < TILE; i++) sum[i] = bias ? v[i] + bf16_to_float(bias[col + i]) : v[i];
    if (y->is_float)
        memcpy((float *)y->data + row * y->N + col, sum, sizeof sum);
    else
        for (int i = 0; i < TILE; i++) ((uint16_t *)y->data)[row * y->N + col + i] = float_to_bf16(sum[i]);
}

/* ---- int8 ---------------------------------------------------------------- */

/* Inlined with a constant `rows` (see SPECIALIZE), so the row loops unroll and the accumulators stay in registers. */
static inline __attribute__((always_inline)) void q8_tile_rows(const Activations *a, const int rows, int64_t K,
                                                               const int8_t *w, const uint16_t *scales,
                                                               const uint16_t *bias, int64_t tile,
                                                               const Output *y) {
    const int64_t groups = K / GROUP;
    const int8_t *wt = w + tile * TILE * K;
    float out[MAX_ROWS][TILE];
#if VECTORIZED == 2
    __m256 acc[MAX_ROWS][2];
    for (int m = 0; m < rows; m++) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < groups; g++) {
        const int8_t *wg = wt + g * 8 * 64;
        for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wg + j * 64 + PREFETCH_BYTES), _MM_HINT_T0);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = a->q + m * K + g * GROUP;
            for (int half = 0; half < 2; half++) {
                __m256i isum = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    const __m256i w8 = _mm256_loadu_si256((const __m256i *)(wg + j * 64 + half * 32));
                    const __m256i x4 = _mm256_set1_epi32(*(const int32_t *)(xq + 4 * j));
                    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w8, w8), _mm256_sign_epi8(x4, w8));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
                }
                acc[m][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(a->scale[m * groups + g]),
                                               acc[m][half]);
            }
        }
    }
    for (int half = 0; half < 2; half++) {
        const __m256 scale = vf_load_bf16(scales + tile * TILE + half * 8);
        for (int m = 0; m < rows; m++) _mm256_storeu_ps(out[m] + half * 8, _mm256_mul_ps(acc[m][half], scale));
    }
#elif VECTORIZED == 1
    __m512 acc[MAX_ROWS];
    for (int m = 0; m < rows; m++) acc[m] = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8((char)0x80); /* s8 -> u8 + 128, for vpdpbusd's unsigned operand */
    for (int64_t g = 0; g < groups; g++) {
        __m512i wv[8];
        for (int j = 0; j < 8; j++) _mm_prefetch((const char *)(wt + (g * 8 + j) * 64 + PREFETCH_BYTES), _MM_HINT_T0);
        for (int j = 0; j < 8; j++) wv[j] = _mm512_xor_si512(_mm512_loadu_si512(wt + (g * 8 + j) * 64), flip);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = a->q + m * K + g * GROUP;
            __m512i isum = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++) isum = _mm512_dpbusd_epi32(isum, wv[j], _mm512_set1_epi32(*(const int32_t *)(xq + 4 * j)));
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(a->scale[m * groups + g]), acc[m]);
        }
    }
    __m512 scale = vf_load_bf16(scales + tile * TILE);
    for (int m = 0; m < rows; m++) /* (q + 128) * xq over-counts by the row's offset, the same for all of W */
        _mm512_storeu_ps(out[m], _mm512_mul_ps(_mm512_sub_ps(acc[m], _mm512_set1_ps(a->offset[m])), scale));
#else
    for (int m = 0; m < rows; m++)
        for (int i = 0; i < TILE; i++) {
            float total = 0;
            for (int64_t g = 0; g < groups; g++) {
                int32_t s = 0;
                for (int j = 0; j < GROUP; j++) {
                    int64_t k = g * GROUP + j;
                    s += (int32_t)wt[(k / 4) * TILE * 4 + i * 4 + k % 4] * a->q[m * K + k];
                }
                total += (float)s * a->scale[m * groups + g];
            }
            out[m][i] = total * bf16_to_float(scales[tile * TILE + i]);
        }
#endif
    for (int m = 0; m < rows; m++) store_row(y, m, tile * TILE, out[m], bias);
}

/* ---- int4 ---------------------------------------------------------------- */

static inline __attribute__((always_inline)) void q4_tile_rows(const Activations *a, const int rows, int64_t K,
                                                               const uint8_t *w, const uint16_t *params,
                                                               const uint16_t *bias, int64_t tile,
                                                               const Output *y) {
    const int64_t groups = K / GROUP;
    const uint8_t *wt = w + tile * TILE * K / 2;
    const uint16_t *pt = params + tile * groups * 2 * TILE;
    float out[MAX_ROWS][TILE];
#if VECTORIZED == 2
    __m256 acc[MAX_ROWS][2];
    for (int m = 0; m < rows; m++) acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    const __m256i nibble = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < groups; g++) {
        const uint8_t *wg = wt + g * 4 * 64;
        for (int j = 0; j < 4; j++) _mm_prefetch((const char *)(wg + j * 64 + PREFETCH_BYTES), _MM_HINT_T0);
        const uint16_t *pg = pt + g * 2 * TILE;
        for (int half = 0; half < 2; half++) {
            __m256i lo[4], hi[4];
            for (int j = 0; j < 4; j++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(wg + j * 64 + half * 32));
                lo[j] = _mm256_and_si256(v, nibble);
                hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
            }
            const __m256 scale = vf_load_bf16(pg + half * 8), min = vf_load_bf16(pg + TILE + half * 8);
            for (int m = 0; m < rows; m++) {
                const int8_t *xq = a->q + m * K + g * GROUP;
                __m256i isum = _mm256_setzero_si256();
                for (int j = 0; j < 4; j++) { /* nibbles are 0..15: no pair sum comes near int16's limit */
                    const __m256i pairs = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo[j], _mm256_set1_epi32(*(const int32_t *)(xq + 4 * j))),
                        _mm256_maddubs_epi16(hi[j], _mm256_set1_epi32(*(const int32_t *)(xq + 16 + 4 * j))));
                    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, ones));
                }
                const __m256 ds = _mm256_mul_ps(scale, _mm256_set1_ps(a->scale[m * groups + g]));
                acc[m][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), ds, acc[m][half]);
                acc[m][half] = _mm256_fmadd_ps(min, _mm256_set1_ps(a->sum[m * groups + g]), acc[m][half]);
            }
        }
    }
    for (int m = 0; m < rows; m++) {
        _mm256_storeu_ps(out[m], acc[m][0]);
        _mm256_storeu_ps(out[m] + 8, acc[m][1]);
    }
#elif VECTORIZED == 1
    __m512 acc[MAX_ROWS];
    for (int m = 0; m < rows; m++) acc[m] = _mm512_setzero_ps();
    const __m512i nibble = _mm512_set1_epi8(0x0f);
    for (int64_t g = 0; g < groups; g++) {
        __m512i lo[4], hi[4];
        for (int j = 0; j < 4; j++) {
            _mm_prefetch((const char *)(wt + (g * 4 + j) * 64 + PREFETCH_BYTES), _MM_HINT_T0);
            __m512i v = _mm512_loadu_si512(wt + (g * 4 + j) * 64);
            lo[j] = _mm512_and_si512(v, nibble);
            hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
        }
        const uint16_t *pg = pt + g * 2 * TILE;
        __m512 scale = vf_load_bf16(pg), min = vf_load_bf16(pg + TILE);
        for (int m = 0; m < rows; m++) {
            const int8_t *xq = a->q + m * K + g * GROUP;
            __m512i isum = _mm512_setzero_si512();
            for (int j = 0; j < 4; j++) {
                isum = _mm512_dpbusd_epi32(isum, lo[j], _mm512_set1_epi32(*(const int32_t *)(xq + 4 * j)));
                isum = _mm512_dpbusd_epi32(isum, hi[j], _mm512_set1_epi32(*(const int32_t *)(xq + 16 + 4 * j)));
            }
            __m512 ds = _mm512_mul_ps(scale, _mm512_set1_ps(a->scale[m * groups + g]));
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), ds, acc[m]);
            acc[m] = _mm512_fmadd_ps(min, _mm512_set1_ps(a->sum[m * groups + g]), acc[m]);
        }
    }
    for (int m = 0; m < rows; m++) _mm512_storeu_ps(out[m], acc[m]);
#else
    for (int m = 0; m < rows; m++)
        for (int i = 0; i < TILE; i++) {
            float total = 0;
            for (int64_t g = 0; g < groups; g++) {
                int32_t s = 0;
                for (int j = 0; j < 16; j++) {
                    uint8_t byte = wt[(g * 4 + j / 4) * 64 + i * 4 + j % 4];
                    s += (byte & 0xf) * a->q[m * K + g * GROUP + j] + (byte >> 4) * a->q[m * K + g * GROUP + 16 + j];
                }
                const uint16_t *pg = pt + g * 2 * TILE;
                total += (float)s * bf16_to_float(pg[i]) * a->scale[m * groups + g];
                total += bf16_to_float(pg[TILE + i]) * a->sum[m * groups + g];
            }
            out[m][i] = total;
        }
#endif
    for (int m = 0; m < rows; m++) store_row(y, m, tile * TILE, out[m], bias);
}

/* ---- entry points ---------------------------------------------------------- */

#define SPECIALIZE(name, weight_type)                                                                                 \
    static void name(const Activations *a, int rows, int64_t K, const weight_type *w, const uint16_t *params,      \
                     const uint16_t *bias, int64_t tile, const Output *y) {                                          \
        switch (rows) {                                                                                               \
        case 1: name##_rows(a, 1, K, w, params, bias, tile, y); break;                                                \
        case 2: name##_rows(a, 2, K, w, params, bias, tile, y); break;                                                \
        case 3: name##_rows(a, 3, K, w, params, bias, tile, y); break;                                                \
        case 4: name##_rows(a, 4, K, w, params, bias, tile, y); break;                                                \
        case 5: name##_rows(a, 5, K, w, params, bias, tile, y); break;                                                \
        case 6: name##_rows(a, 6, K, w, params, bias, tile, y); break;                                                \
        case 7: name##_rows(a, 7, K, w, params, bias, tile, y); break;                                                \
        default: name##_rows(a, 8, K, w, params, bias, tile, y); break;                                               \
        }                                                                                                             \
    }
SPECIALIZE(q8_tile, int8_t)
SPECIALIZE(q4_tile, uint8_t)

typedef void (*TileFn)(const Activations *, int, int64_t, const void *, const uint16_t *, const uint16_t *, int64_t,
                       const Output *);

static int gemv(TileFn tile_fn, const uint16_t *x, int64_t M, int64_t K, const void *w, const uint16_t *params,
                int64_t N, const uint16_t *bias, void *y, int float_output) {
    if (K % GROUP || N % TILE) return -2;
    Activations a = {0};
    if (quantize_activations(x, M, K, &a)) {
        free_activations(&a);
        return -1;
    }
    const int64_t groups = K / GROUP;
    const size_t row_bytes = (size_t)N * (float_output ? sizeof(float) : sizeof(uint16_t));
    for (int64_t m0 = 0; m0 < M; m0 += MAX_ROWS) {
        int rows = (int)(M - m0 < MAX_ROWS ? M - m0 : MAX_ROWS);
        Activations am = {a.q + m0 * K, a.scale + m0 * groups, a.sum + m0 * groups, a.offset + m0};
        Output out = {(char *)y + m0 * row_bytes, N, float_output};
        const int64_t tiles = N / TILE, chunk = work_chunk(tiles);
#pragma omp parallel for schedule(dynamic, chunk)
        for (int64_t tile = 0; tile < tiles; tile++) tile_fn(&am, rows, K, w, params, bias, tile, &out);
    }
    free_activations(&a);
    return 0;
}

/* y: [M, N] bf16, or float32 when `float_output`. */
int inferd_q8_gemv(const uint16_t *x, int64_t M, int64_t K, const int8_t *w, const uint16_t *scales, int64_t N,
                   const uint16_t *bias, void *y, int float_output) {
    return gemv((TileFn)q8_tile, x, M, K, w, scales, N, bias, y, float_output);
}

int inferd_q4_gemv(const uint16_t *x, int64_t M, int64_t K, const uint8_t *w, const uint16_t *params, int64_t N,
                   const uint16_t *bias, void *y, int float_output) {
    return gemv((TileFn)q4_tile, x, M, K, w, params, N, bias, y, float_output);
}

/* Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K weights in tiles of 8 output rows: the
 * file's values and scales unchanged, reordered at load so that one 32-byte
 * vector holds 4 consecutive weights of each of the 8 rows. A dot product
 * with 4 activation bytes broadcast to every lane then sums 8 rows at once,
 * one per int32 lane, and a tile's 8 outputs leave as one vector: no
 * horizontal sums, no per-row unpacking (llama.cpp's repacked layouts work
 * the same way).
 *
 * A tile is the row's groups of 32 weights in order; each group of a tile:
 *   16 bytes: the 8 rows' fp16 scales d
 *   Q8_0: 256 bytes, chunk c (0..7) = for each row r, its weights 4c..4c+3
 *   Q5_0: 32 bytes of fifth bits, byte 4r+j bit c = the fifth bit of weight 4c+j of row r
 *   Q4_0, Q5_0: 128 bytes of nibbles, pair p (0..3) = for each row r, the file's
 *         nibble bytes 4p..4p+3 (low nibbles: weights 4p.., high: 16+4p..)
 * so a tile group takes 8 times a row block's bytes, and a tiled tensor the file's size.
 * K tiles go by blocks of 256 weights:
 *   Q4_K: 16 bytes d, 16 bytes dmin, 64 bytes of scales and 64 of mins (sub-block j's
 *         for the 8 rows at 8j..8j+7, unpacked from 6 bits), 1024 bytes of nibbles:
 *         (pair p, step i) = for each row, the file's bytes 32p+4i..+3 (low nibbles:
 *         sub-block 2p, high: 2p+1); 148 bytes a row where the file has 144
 *   Q5_K: as Q4_K with, before the nibbles, 256 bytes of fifth bits: step i = each
 *         row's qh bytes 4i..4i+3 (bit j: sub-block j's); 180 bytes a row for 176
 *   Q6_K: 16 bytes d, 128 bytes of int8 scales (sub-block s of 16 at 8s), then each
 *         weight's 6 bits (0..63) joined into a byte of its own, 2048 bytes: (part p,
 *         step i) = for each row, its weights 32p+4i..+3; 274 bytes a row for the file's
 *         210. The bits are the file's; joining them at load rather than in every
 *         product made Q6_K's products 1.16-1.39x faster at 1 to 8 rows on AVX2 and
 *         AVX-512 (VNNI), the bytes read notwithstanding.
 *
 * Sums are exact integers and the scaling the same float operations on every
 * path (AVX-512 VNNI or AVX-VNNI, AVX2, portable), so every build gives the
 * same bits.
 */
#ifndef INFERD_GGUF_TILES_H
#define INFERD_GGUF_TILES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf_common.h"
#include "half.h"
#include "work_chunks.h"

#define TILE 8

#if defined(__AVX2__) && defined(__FMA__)
#define TILES_VECTORIZED 1
#include <immintrin.h>
#else
#define TILES_VECTORIZED 0
#endif

/* Spans of two tiles in 512-bit vectors where AVX-512 has VNNI (tile_kernels.h, `tile_place`). */
#if TILES_VECTORIZED && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define TILES_WIDE 1
#else
#define TILES_WIDE 0
#endif

/* A tensor is held in tiles when its format has a tiled kernel and its rows fill whole tiles. */
int inferd_gguf_tiled(int type, int64_t rows) {
    return (type == Q8_0 || type == Q4_0 || type == Q5_0 || type == Q4_K || type == Q5_K || type == Q6_K) &&
           rows % TILE == 0;
}

static int is_k(int type) { return type == Q4_K || type == Q5_K || type == Q6_K; }

/* Bytes of one tile group: 32 weights of 8 rows, or 256 for the K formats. */
static int tile_group_bytes(int type) {
    switch (type) {
    case Q8_0: return 8 * 34;
    case Q5_0: return 8 * 22;
    case Q4_0: return 8 * 18;
    case Q4_K: return 8 * 148;
    case Q5_K: return 8 * 180;
    default: return 8 * 274;
    }
}

/* A row's bytes in tiles (the file's, but for Q4_K's and Q5_K's unpacked scales and Q6_K's joined weights). */
int64_t inferd_gguf_tiled_row_bytes(int type, int64_t K) { return K / (is_k(type) ? 256 : GROUP) * tile_group_bytes(type) / TILE; }

/* Where a tile lies. On builds with 512-bit spans the formats of 32 weights a scale keep their
 * tiles in pairs whose groups alternate (tile 2p's group g, then tile 2p + 1's), so that a span
 * reads both from one stretch of memory: two tiles a tile apart streamed from memory at about
 * half the rate of one stretch, and a tile read alone from a pair (a 256-bit build) no better.
 * Elsewhere, and for the K formats (whose 256-weight blocks stream well a tile apart), each tile
 * lies whole, and a span's second tile a tile after its first. An odd count's last tile lies by
 * itself either way. */
#define TILE_PAIRS TILES_WIDE

typedef struct {
    int64_t at;     /* the tile's first group */
    int64_t stride; /* from one of its groups to the next */
    int64_t next;   /* the first tile of a span of two: from its group to its partner's; else 0 */
} TilePlace;

static inline TilePlace tile_place(const int type, const int64_t t, const int64_t tiles, const int64_t K) {
    const int64_t bytes = tile_group_bytes(type), groups = K / (is_k(type) ? 256 : GROUP);
    const int first_of_two = t % 2 == 0 && t + 1 < tiles, lone = t >= tiles / 2 * 2;
    if (!TILE_PAIRS || is_k(type) || lone) return (TilePlace){t * groups * bytes, bytes, first_of_two ? groups * bytes : 0};
    return (TilePlace){t / 2 * 2 * groups * bytes + t % 2 * bytes, 2 * bytes, first_of_two ? bytes : 0};
}

/* 1 where this build lays tiles out in pairs: tiles made by one build are read by builds alike. */
int inferd_gguf_tile_pairs(void) { return TILE_PAIRS; }

/* Where a Q6_K tile block's values start. */
#define Q6_VALUES 144

/* Where a Q4_K or Q5_K tile block's nibbles start. */
static inline int k_nibbles_at(int type) { return type == Q5_K ? 416 : 160; }

/* One row's block of 256 into its place in a K tile. */
static void tile_k_block(int type, const uint8_t *blk, int r, uint8_t *out) {
    if (type == Q4_K || type == Q5_K) {
        const int five = type == Q5_K;
        memcpy(out + 2 * r, blk, 2), memcpy(out + 16 + 2 * r, blk + 2, 2);
        for (int j = 0; j < 8; j++) {
            int scale, min;
            scale_min_k4(j, blk + 4, &scale, &min);
            out[32 + 8 * j + r] = (uint8_t)scale, out[96 + 8 * j + r] = (uint8_t)min;
        }
        for (int i = 0; five && i < 8; i++) memcpy(out + 160 + 32 * i + 4 * r, blk + 16 + 4 * i, 4);
        for (int p = 0; p < 4; p++)
            for (int i = 0; i < 8; i++)
                memcpy(out + k_nibbles_at(type) + 256 * p + 32 * i + 4 * r, blk + (five ? 48 : 16) + 32 * p + 4 * i, 4);
        return;
    }
    memcpy(out + 2 * r, blk + 208, 2);
    for (int sub = 0; sub < 16; sub++) out[16 + 8 * sub + r] = blk[192 + sub];
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = blk + 64 * h, *qh = blk + 128 + 32 * h;
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) { /* weight 128h + 32c + l, as ggml's dequantize_row_q6_K reads it */
                const uint8_t low = c < 2 ? ql[32 * c + l] & 0xf : ql[32 * (c - 2) + l] >> 4;
                out[Q6_VALUES + 256 * (4 * h + c) + 32 * (l / 4) + 4 * r + l % 4] = (uint8_t)(low | ((qh[l] >> (2 * c)) & 3) << 4);
            }
        }
    }
}

/* file rows [N][row bytes] -> tiles, the same number of bytes. 0, or -2 if not tiled. */
int inferd_gguf_to_tiles(int type, const uint8_t *src, int64_t N, int64_t K, uint8_t *dst) {
    const int64_t block = is_k(type) ? 256 : GROUP;
    if (!inferd_gguf_tiled(type, N) || K % block) return -2;
    const int64_t groups = K / block, tiles = N / TILE;
    const int64_t size = type == Q4_K ? 144 : type == Q5_K ? 176 : type == Q6_K ? 210 : tile_group_bytes(type) / TILE;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++) {
        const TilePlace place = tile_place(type, t, tiles, K);
        for (int64_t g = 0; g < groups; g++) {
            uint8_t *out = dst + place.at + g * place.stride;
            for (int r = 0; r < TILE; r++) {
                const uint8_t *blk = src + (t * TILE + r) * groups * size + g * size;
                if (is_k(type)) {
                    tile_k_block(type, blk, r, out);
                    continue;
                }
                memcpy(out + 2 * r, blk, 2);
                if (type == Q8_0) {
                    for (int c = 0; c < 8; c++) memcpy(out + 16 + 32 * c + 4 * r, blk + 2 + 4 * c, 4);
                    continue;
                }
                const uint8_t *nibbles = blk + size - 16;
                uint8_t *tiled = out + (type == Q5_0 ? 48 : 16);
                for (int p = 0; p < 4; p++) memcpy(tiled + 32 * p + 4 * r, nibbles + 4 * p, 4);
                if (type == Q5_0) {
                    uint32_t high;
                    memcpy(&high, blk + 2, 4);
                    for (int j = 0; j < 4; j++) {
                        uint8_t bits = 0;
                        for (int c = 0; c < 8; c++) bits |= (uint8_t)(((high >> (4 * c + j)) & 1) << c);
                        out[16 + 4 * r + j] = bits;
                    }
                }
            }
        }
    }
    return 0;
}

/* Activation rows handled per pass over a tile: the accumulators fit AVX-512's 32 registers,
 * half of them AVX2's 16. */
#if defined(__AVX512F__)
#define TILE_PASS_ROWS 8
#else
#define TILE_PASS_ROWS 4
#endif

#if TILES_VECTORIZED
/* With VNNI, Q8_0's signed weights go into the dot products as w + 128 (tile_dot_signed). */
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define Q8_OFFSET 128
#else
#define Q8_OFFSET 0
#endif
#define TILE_SPAN 1
#include "tile_kernels.h"
#undef TILE_SPAN
#if TILES_WIDE
#define TILE_SPAN 2
#include "tile_kernels.h"
#undef TILE_SPAN
#endif
#else
/* The same sums in scalar C: exact integer dots, then the vector paths' float operations. */
static void tile_rows_portable_32(const int type, const uint8_t *tile, const int64_t stride, const Acts *a, const int m0,
                                  const int M, float *acc) {
    const int zero = type == Q8_0 ? 0 : type == Q5_0 ? 16 : 8;
    for (int64_t g = 0; g < a->groups; g++) {
        const uint8_t *group = tile + g * stride;
        for (int r = 0; r < TILE; r++) {
            int q[32];
            for (int k = 0; k < 32; k++) {
                const int c = k / 4, j = k % 4;
                if (type == Q8_0) {
                    q[k] = (int8_t)group[16 + 32 * c + 4 * r + j];
                } else {
                    const int p = c % 4;
                    const uint8_t byte = group[(type == Q5_0 ? 48 : 16) + 32 * p + 4 * r + j];
                    q[k] = c < 4 ? byte & 0xf : byte >> 4;
                    if (type == Q5_0) q[k] |= ((group[16 + 4 * r + j] >> c) & 1) << 4;
                }
            }
            const float d = load_half(group + 2 * r);
            for (int m = 0; m < M; m++) {
                const int8_t *x = act_q(a, m0 + m, g);
                int32_t dot = -zero * act_sum(a, m0 + m, g);
                for (int k = 0; k < 32; k++) dot += q[k] * x[k];
                acc[m * TILE + r] = fmaf((float)dot, d * act_d(a, m0 + m, g), acc[m * TILE + r]);
            }
        }
    }
}

static int32_t dot_ints(const int *q, const int8_t *x, int n) {
    int32_t dot = 0;
    for (int k = 0; k < n; k++) dot += q[k] * x[k];
    return dot;
}

static void tile_rows_portable_k(const int type, const uint8_t *tile, const int64_t stride, const Acts *a, const int m0,
                                 const int M, float *acc) {
    for (int64_t b = 0; b < a->groups / 8; b++) {
        const uint8_t *blk = tile + b * stride;
        for (int r = 0; r < TILE; r++) {
            const float d = load_half(blk + 2 * r);
            for (int part = 0; part < 8; part++) { /* Q4_K, Q5_K: (pair, half); Q6_K: (half, chunk) */
                int q[32];
                const int64_t g = 8 * b + part;
                for (int l = 0; l < 32; l++) {
                    const int i = l / 4, j = l % 4;
                    if (type != Q6_K) {
                        const uint8_t byte = blk[k_nibbles_at(type) + 256 * (part / 2) + 32 * i + 4 * r + j];
                        q[l] = part % 2 ? byte >> 4 : byte & 0xf;
                        if (type == Q5_K) q[l] |= ((blk[160 + 32 * i + 4 * r + j] >> part) & 1) << 4;
                    } else {
                        q[l] = blk[Q6_VALUES + 256 * part + 32 * i + 4 * r + j];
                    }
                }
                for (int m = 0; m < M; m++) {
                    const int8_t *x = act_q(a, m0 + m, g);
                    const float dx = act_d(a, m0 + m, g);
                    float *out = &acc[m * TILE + r];
                    if (type != Q6_K) {
                        const float scale = d * (float)blk[32 + 8 * part + r], min = load_half(blk + 16 + 2 * r) * (float)blk[96 + 8 * part + r];
                        *out = fmaf((float)dot_ints(q, x, 32), scale * dx, *out);
                        *out = fmaf(min, -(dx * (float)act_sum(a, m0 + m, g)), *out);
                    } else {
                        const int8_t *sc = (const int8_t *)(blk + 16);
                        const int first = -32 * act_sum16(a, m0 + m, 2 * g) + dot_ints(q, x, 16);
                        const int second = -32 * act_sum16(a, m0 + m, 2 * g + 1) + dot_ints(q + 16, x + 16, 16);
                        *out = fmaf((float)first, (d * (float)sc[8 * (2 * part) + r]) * dx, *out);
                        *out = fmaf((float)second, (d * (float)sc[8 * (2 * part + 1) + r]) * dx, *out);
                    }
                }
            }
        }
    }
}

static void tile_rows_portable(const int type, const uint8_t *tile, const int64_t stride, const Acts *a, const int m0,
                               const int M, float *acc) {
    for (int i = 0; i < M * TILE; i++) acc[i] = 0;
    if (is_k(type))
        tile_rows_portable_k(type, tile, stride, a, m0, M, acc);
    else
        tile_rows_portable_32(type, tile, stride, a, m0, M, acc);
}
#endif

/* The tiles a product takes at a time: two where the build has 512-bit spans, where a dot
 * product does twice the multiply-accumulates and an activation's broadcast serves 16 rows:
 * 1.05-1.2x at 8 rows streamed from memory for the formats of 32 weights a scale (their tiles
 * in pairs, `tile_place`; a tile apart they were no faster), 10-29% for the K formats. */
static inline int tile_span_of(void) { return TILES_WIDE ? 2 : 1; }

/* A tile's 8 float32 outputs v for activation row m, the first at output n0, into the thread's
 * argmax: one comparison of all 8 with the best so far; only one at least as large (a tie may
 * be at a lower index) or a NaN takes the scalar path. */
static inline void best_keep_tile(Best *b, const int m, const int64_t n0, const float *v) {
#if TILES_VECTORIZED
    const __m256 x = _mm256_loadu_ps(v);
    if (!_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(b->value[m]), _CMP_NLT_UQ))) return;
#endif
    for (int r = 0; r < TILE; r++) best_keep(b, m, n0 + r, v[r]);
}

/* Every output row of a tiled tensor of N rows for M activation rows (a constant once inlined),
 * a span of tiles at a time (an odd tensor's last span of two has its one tile twice). Called
 * by every thread of a parallel region (inferd_gguf_gemv's), which share its spans and go on
 * to the next tensor without waiting. With `best`, the outputs (as y would hold them) update
 * the thread's argmax of each row instead of being written. */
INLINE void tile_products(const int type, const uint8_t *w, const int64_t N, const Acts *a, const int M,
                          const void *bias, const int in_is_float, void *y, const int64_t ldy, const int y_is_float,
                          const int64_t row0, Best *best) {
    const int64_t tiles = N / TILE;
    const int width = tile_span_of();
    const int64_t spans = (tiles + width - 1) / width, chunk = work_chunk(spans);
#pragma omp for schedule(dynamic, chunk) nowait
    for (int64_t span = 0; span < spans; span++) {
        const int64_t t0 = span * width;
        const TilePlace place = tile_place(type, t0, tiles, a->K);
        const int64_t next = width == 2 ? place.next : 0;
        const uint8_t *tile = w + place.at;
        float out[MAX_ROWS * TILE * 2]; /* [m][tile of the span][row] */
#if TILES_WIDE
        if (width == 2)
            tile_span_2(type, tile, next, place.stride, a, M, out);
        else
#endif
#if TILES_VECTORIZED
            tile_span_1(type, tile, next, place.stride, a, M, out);
#else
        (void)next;
        for (int m0 = 0; m0 < M; m0 += TILE_PASS_ROWS)
            tile_rows_portable(type, tile, place.stride, a, m0, M - m0 < TILE_PASS_ROWS ? M - m0 : TILE_PASS_ROWS,
                               out + m0 * TILE);
#endif
        for (int s = 0; s < width && t0 + s < tiles; s++) {
            if (best && !bias && y_is_float) { /* the outputs as computed: a tile's 8 at a time */
                for (int m = 0; m < M; m++) best_keep_tile(best, m, best->base + (t0 + s) * TILE, out + (m * width + s) * TILE);
                continue;
            }
#if TILES_VECTORIZED
            if (!best) { /* a tile's 8 outputs at a time: the bias added and bf16 rounded as the scalar path does */
                const int64_t n0 = (t0 + s) * TILE;
                for (int m = 0; m < M; m++) {
                    __m256 v = _mm256_loadu_ps(out + (m * width + s) * TILE);
                    if (bias) v = _mm256_add_ps(v, inputs8(bias, in_is_float, n0));
                    if (y_is_float)
                        _mm256_storeu_ps((float *)y + (row0 + m) * ldy + n0, v);
                    else
                        bf16_store8((uint16_t *)y + (row0 + m) * ldy + n0, v);
                }
                continue;
            }
#endif
            for (int m = 0; m < M; m++) {
                for (int r = 0; r < TILE; r++) {
                    const int64_t n = (t0 + s) * TILE + r;
                    const float sum = out[(m * width + s) * TILE + r];
                    const float v = bias ? sum + input_at(bias, in_is_float, n) : sum;
                    if (best)
                        best_keep(best, m, best->base + n, y_is_float ? v : round_bf16(v));
                    else if (y_is_float)
                        ((float *)y)[(row0 + m) * ldy + n] = v;
                    else
                        ((uint16_t *)y)[(row0 + m) * ldy + n] = float_to_bf16(v);
                }
            }
        }
    }
}

#endif

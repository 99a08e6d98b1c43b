/* A greedy step's argmax over a tiled Q8_0 head, read mostly from a smaller copy of it.
 *
 * The screen holds each weight's top five bits, h = q >> 3, in Q5_0's tiles (the file's
 * scale d, values h + 16), so it reads 65% of the head's bytes, and on builds without
 * VNNI its dot products take about half the instructions (small unsigned weights sum in
 * int16). The file's value is 8 h + l with l = q & 7 in 0..7, so a row's logit e and 8
 * times its screen sum s differ by sum_g d_g dx_g sum_i l_i x_i, which lies in
 * [0, 7 sum_g d_g pos_g], pos_g the group's positive quantized activations summed (and
 * scaled by dx_g): e <= 8 s + U. U also covers both sums' float rounding (abs_g / 128 a
 * group, over ten times what 20 groups' fused multiply-adds can err by).
 *
 * One pass over the screen gives every row's bound U and each activation row's probe
 * (its largest s + U); the probe's logit computed from the file's blocks is a value the
 * argmax must reach, so only tiles with a row whose bound reaches it (less a margin for
 * bf16 rounding) can hold the argmax. Those tiles are computed with the head kernel's
 * own arithmetic, so the pick is the head's to the bit: ties, bf16 rounding and NaN
 * included. Where more than an eighth of the tiles remain, or an activation is not
 * finite, the whole head is computed instead. */
#ifndef INFERD_HEAD_SCREEN_H
#define INFERD_HEAD_SCREEN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_common.h"
#include "gguf_tiles.h"

/* A tile's 8 sums for each of M activation rows, out[m * TILE + r]: the tiled kernel's own path. */
static void tile_sums(const int type, const uint8_t *w, const int64_t t, const int64_t tiles, const Acts *a, const int M,
                      float *out) {
    const TilePlace place = tile_place(type, t, tiles, a->K);
#if TILES_VECTORIZED
    tile_span_1(type, w + place.at, 0, place.stride, a, M, out);
#else
    for (int m0 = 0; m0 < M; m0 += TILE_PASS_ROWS)
        tile_rows_portable(type, w + place.at, place.stride, a, m0, M - m0 < TILE_PASS_ROWS ? M - m0 : TILE_PASS_ROWS,
                           out + m0 * TILE);
#endif
}

/* Each group's weight in the bound U, u[g * M + m] = 7 pos + abs / 128. */
static void bound_weights(const Acts *a, const int M, float *u) {
    for (int64_t g = 0; g < a->groups; g++) {
        for (int m = 0; m < M; m++) {
            const int8_t *x = act_q(a, m, g);
            int32_t pos = 0, abs = 0;
            for (int i = 0; i < GROUP; i++) pos += x[i] > 0 ? x[i] : 0, abs += x[i] > 0 ? x[i] : -x[i];
            u[g * M + m] = act_d(a, m, g) * (7.0f * (float)pos + (float)abs / 128.0f);
        }
    }
}

/* Tile t's bounds from its screen sums (row m's 8 at s + m * ld): top[t * M + m] the largest, and
 * `probe` keeps each row's largest bound and where it is. */
static void bound_tile(const uint8_t *tile, const int64_t stride, const int64_t t, const Acts *a, const int M,
                       const float *u, float *s, const int64_t ld, float *top, Best *probe) {
#if TILES_VECTORIZED
    __m256 bound[MAX_ROWS];
    for (int m = 0; m < M; m++) bound[m] = _mm256_mul_ps(_mm256_loadu_ps(s + m * ld), _mm256_set1_ps(8.0f));
    for (int64_t g = 0; g < a->groups; g++) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(tile + g * stride)));
        for (int m = 0; m < M; m++) bound[m] = _mm256_fmadd_ps(d, _mm256_set1_ps(u[g * M + m]), bound[m]);
    }
    for (int m = 0; m < M; m++) { /* the scalar path only for a tile that may hold a new probe, or a NaN */
        const __m256 v = bound[m];
        __m256 most = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
        most = _mm256_max_ps(most, _mm256_shuffle_ps(most, most, 0x4e));
        most = _mm256_max_ps(most, _mm256_shuffle_ps(most, most, 0xb1));
        const int nan = _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        top[t * M + m] = nan ? NAN : _mm256_cvtss_f32(most);
        if (nan || !(_mm256_cvtss_f32(most) < probe->value[m])) {
            _mm256_storeu_ps(s + m * ld, v);
            for (int r = 0; r < TILE; r++) best_keep(probe, m, t * TILE + r, s[m * ld + r]);
        }
    }
#else
    for (int m = 0; m < M; m++)
        for (int r = 0; r < TILE; r++) s[m * ld + r] *= 8.0f;
    for (int64_t g = 0; g < a->groups; g++)
        for (int r = 0; r < TILE; r++) {
            const float d = load_half(tile + g * stride + 2 * r);
            for (int m = 0; m < M; m++) s[m * ld + r] = fmaf(d, u[g * M + m], s[m * ld + r]);
        }
    for (int m = 0; m < M; m++) {
        float most = s[m * ld];
        for (int r = 0; r < TILE; r++) {
            most = s[m * ld + r] > most || s[m * ld + r] != s[m * ld + r] ? s[m * ld + r] : most;
            best_keep(probe, m, t * TILE + r, s[m * ld + r]);
        }
        top[t * M + m] = most;
    }
#endif
}

/* The screen's pass, shared by the region's threads, a span of tiles at a time as the head's
 * products go (two in 512-bit vectors where the build has them: the screen's tiles lie in pairs
 * there, and read one at a time they stream at half the rate): top[t * M + m] the largest bound
 * of tile t for row m, and in `probe` each row's largest bound and where it is. */
static void screen_pass(const uint8_t *screen, const int64_t tiles, const Acts *a, const int M, const float *u,
                        float *top, Best *probe) {
    const int width = tile_span_of();
    const int64_t spans = (tiles + width - 1) / width, chunk = work_chunk(spans);
#pragma omp for schedule(dynamic, chunk) nowait
    for (int64_t span = 0; span < spans; span++) {
        const int64_t t0 = span * width;
        float s[MAX_ROWS * TILE * 2]; /* [m][tile of the span][row] */
#if TILES_WIDE
        if (width == 2) {
            const TilePlace place = tile_place(Q5_0, t0, tiles, a->K);
            /* M's range stated at the call: the span functions are compiled for the ranges their
             * callers pass, and an unknown one cost the head's products a tenth at 8 rows */
            tile_span_2(Q5_0, screen + place.at, place.next, place.stride, a, M < 1 ? 1 : M < MAX_ROWS ? M : MAX_ROWS, s);
            for (int j = 0; j < 2 && t0 + j < tiles; j++) {
                const TilePlace own = tile_place(Q5_0, t0 + j, tiles, a->K);
                bound_tile(screen + own.at, own.stride, t0 + j, a, M, u, s + j * TILE, 2 * TILE, top, probe);
            }
            continue;
        }
#endif
        const TilePlace place = tile_place(Q5_0, t0, tiles, a->K);
        tile_sums(Q5_0, screen, t0, tiles, a, M, s);
        bound_tile(screen + place.at, place.stride, t0, a, M, u, s, TILE, top, probe);
    }
}

/* The head's outputs of tile t for every row into `best`, as the head kernel's argmax keeps them. */
static void exact_tile(const uint8_t *head, const int64_t t, const int64_t tiles, const Acts *a, const int M,
                       const int y_is_float, Best *best) {
    float v[MAX_ROWS * TILE];
    tile_sums(Q8_0, head, t, tiles, a, M, v);
    for (int m = 0; m < M; m++)
        for (int r = 0; r < TILE; r++) best_keep(best, m, t * TILE + r, y_is_float ? v[m * TILE + r] : round_bf16(v[m * TILE + r]));
}

/* One pass of up to MAX_ROWS rows: 0 with their tokens, 1 where the whole head must be computed instead. */
static int screened_pass(const uint8_t *head, const uint8_t *screen, const int64_t tiles, const Acts *a, const int M,
                         const int y_is_float, float *top, int32_t *kept, int64_t *tokens) {
    for (int64_t i = 0; i < a->groups * M; i++)
        if (!isfinite(a->d[i])) return 1;
    float u[MAX_ROWS * 512];
    if (a->groups * M > (int64_t)(sizeof u / sizeof *u)) return 1;
    bound_weights(a, M, u);
    Best probe;
    best_init(&probe);
#pragma omp parallel
    {
        Best mine;
        best_init(&mine);
        screen_pass(screen, tiles, a, M, u, top, &mine);
#pragma omp critical(inferd_head_screen)
        merge_best(&probe, &mine, M);
    }
    /* Each row's probe computed from the file's blocks: the argmax is at least this. */
    float floor_of[MAX_ROWS];
    for (int m = 0; m < M; m++) {
        if (probe.nan[m] || probe.index[m] == INT64_MAX) return 1;
        float v[MAX_ROWS * TILE];
        tile_sums(Q8_0, head, probe.index[m] / TILE, tiles, a, M, v);
        const float at = v[m * TILE + probe.index[m] % TILE], value = y_is_float ? at : round_bf16(at);
        if (!isfinite(value)) return 1;
        floor_of[m] = value - fabsf(value) / 64; /* below it by more than a bf16 step or two */
    }
    int64_t count = 0;
    for (int64_t t = 0; t < tiles; t++) {
        int reaches = 0;
        for (int m = 0; m < M; m++) reaches |= !(top[t * M + m] < floor_of[m]);
        if (reaches) {
            if (++count > tiles / 8) return 1;
            kept[count - 1] = (int32_t)t;
        }
    }
    Best all;
    best_init(&all);
#pragma omp parallel
    {
        Best mine;
        best_init(&mine);
#pragma omp for schedule(dynamic, 8) nowait
        for (int64_t i = 0; i < count; i++) exact_tile(head, kept[i], tiles, a, M, y_is_float, &mine);
#pragma omp critical(inferd_head_screen)
        merge_best(&all, &mine, M);
    }
    for (int m = 0; m < M; m++) tokens[m] = all.nan[m] || !isfinite(all.value[m]) ? -1 : all.index[m];
    return 0;
}

/* The screen of a Q8_0 head of N rows of K inputs in tiles: each weight's top five bits
 * in Q5_0 tiles (see above). Both lie group by group in the same order (`tile_place`). */
static void screen_of(const uint8_t *head, const int64_t N, const int64_t K, uint8_t *screen) {
    const int64_t groups = N / TILE * (K / GROUP);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < groups; i++) {
        const uint8_t *from = head + i * tile_group_bytes(Q8_0);
        uint8_t *to = screen + i * tile_group_bytes(Q5_0);
        memcpy(to, from, 16);
        memset(to + 16, 0, 160);
        for (int c = 0; c < 8; c++)
            for (int rj = 0; rj < 32; rj++) { /* row rj / 4, weight 4 c + rj % 4 */
                const int n = (((int8_t)from[16 + 32 * c + rj]) >> 3) + 16;
                to[16 + rj] |= (uint8_t)((n >> 4) << c);
                to[48 + 32 * (c % 4) + rj] |= (uint8_t)((n & 15) << (c < 4 ? 0 : 4));
            }
    }
}

#endif

/* The tiled kernels' vectors and row sums for one span of tiles, included by
 * gguf_tiles.h once per span it builds: TILE_SPAN 1, a tile's 8 rows in a
 * 256-bit vector; TILE_SPAN 2 (AVX-512 with VNNI, see `tile_span_of`), two
 * tiles' 16 rows in a 512-bit one, where a dot product
 * does twice the multiply-accumulates in the same time on cores with
 * full-width 512-bit units, and unpacking the weights and scaling the sums
 * take half the instructions. Every lane does the same integer and float
 * operations in either span, so both give the same bits.
 *
 * A span's second tile lies `next` bytes after its first, and a tile's groups
 * (or K blocks) `stride` bytes apart (gguf_tiles.h, `tile_place`): TK(ti_load)(p,
 * next) reads 32 bytes at p into the low half and 32 at p + next into the high half.
 * Names defined here carry the span (TK(tile_rows): tile_rows_1, tile_rows_2).
 * No include guard: each inclusion is one span, and the macros it defines are
 * undefined at its end. */

#define TK_CAT(name, span) name##_##span
#define TK_NAME(name, span) TK_CAT(name, span)
#define TK(name) TK_NAME(name, TILE_SPAN)

#if TILE_SPAN == 2
#define tvi __m512i
#define tvf __m512
#define ti_zero _mm512_setzero_si512
#define ti_set1_32 _mm512_set1_epi32
#define ti_set1_8 _mm512_set1_epi8
#define ti_and _mm512_and_si512
#define ti_or _mm512_or_si512
#define ti_xor _mm512_xor_si512
#define ti_srli16 _mm512_srli_epi16
#define ti_slli16 _mm512_slli_epi16
#define ti_sll16 _mm512_sll_epi16
#define ti_srl16 _mm512_srl_epi16
#define ti_dpbusd _mm512_dpbusd_epi32
#define tf_zero _mm512_setzero_ps
#define tf_set1 _mm512_set1_ps
#define tf_mul _mm512_mul_ps
#define tf_fmadd _mm512_fmadd_ps
#define tf_from_ti _mm512_cvtepi32_ps
#define tf_store _mm512_storeu_ps

static inline tvi TK(ti_load)(const uint8_t *p, int64_t next) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)(p + next)), 1);
}

/* 8 fp16 values of each tile, as floats. */
static inline tvf TK(tf_halves)(const uint8_t *p, int64_t next) {
    const __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + next));
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1));
}

/* 8 bytes of each tile (one per row), as floats. */
static inline tvf TK(tf_bytes)(const uint8_t *p, int64_t next, int is_signed) {
    const __m128i b = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p), _mm_loadl_epi64((const __m128i *)(p + next)));
    return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}
#else
#define tvi __m256i
#define tvf __m256
#define ti_zero _mm256_setzero_si256
#define ti_set1_32 _mm256_set1_epi32
#define ti_set1_8 _mm256_set1_epi8
#define ti_and _mm256_and_si256
#define ti_or _mm256_or_si256
#define ti_xor _mm256_xor_si256
#define ti_srli16 _mm256_srli_epi16
#define ti_slli16 _mm256_slli_epi16
#define ti_sll16 _mm256_sll_epi16
#define ti_srl16 _mm256_srl_epi16
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define ti_dpbusd _mm256_dpbusd_epi32
#elif defined(__AVXVNNI__)
#define ti_dpbusd _mm256_dpbusd_avx_epi32
#endif
#define tf_zero _mm256_setzero_ps
#define tf_set1 _mm256_set1_ps
#define tf_mul _mm256_mul_ps
#define tf_fmadd _mm256_fmadd_ps
#define tf_from_ti _mm256_cvtepi32_ps
#define tf_store _mm256_storeu_ps

static inline tvi TK(ti_load)(const uint8_t *p, int64_t next) {
    (void)next;
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline tvf TK(tf_halves)(const uint8_t *p, int64_t next) {
    (void)next;
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline tvf TK(tf_bytes)(const uint8_t *p, int64_t next, int is_signed) {
    (void)next;
    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}
#endif

/* 4 activation bytes in every lane. */
static inline tvi TK(ti_bcast4)(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return ti_set1_32(v);
}

/* sums + the dots of u's 4 unsigned bytes per lane with s's 4 signed ones (u <= 127 without VNNI: no saturation). */
static inline tvi TK(tile_dot)(tvi sums, tvi u, tvi s) {
#ifdef ti_dpbusd
    return ti_dpbusd(sums, u, s);
#else
    return _mm256_add_epi32(sums, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Two such dots at once, for weights u0, u1 <= 63: without VNNI the two int16 pair sums
 * add before widening (at most 4 * 63 * 128 < 2^15), one widening instead of two. */
static inline tvi TK(tile_dot2)(tvi sums, tvi u0, tvi s0, tvi u1, tvi s1) {
#ifdef ti_dpbusd
    return TK(tile_dot)(TK(tile_dot)(sums, u0, s0), u1, s1);
#else
    const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

/* Four such dots at once, for weights u0..u3 <= 31 (Q4_0, Q5_0): without VNNI the four int16 pair sums
 * add before widening (at most 8 * 31 * 128 < 2^15). */
static inline tvi TK(tile_dot4)(tvi sums, tvi u0, tvi s0, tvi u1, tvi s1, tvi u2, tvi s2, tvi u3, tvi s3) {
#ifdef ti_dpbusd
    return TK(tile_dot2)(TK(tile_dot2)(sums, u0, s0, u1, s1), u2, s2, u3, s3);
#else
    const __m256i pairs = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1)),
                                           _mm256_add_epi16(_mm256_maddubs_epi16(u2, s2), _mm256_maddubs_epi16(u3, s3)));
    return _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

/* The same for signed weights w: with VNNI as w + 128 (the caller subtracts 128 times the
 * activations' sum), otherwise |w| times x carrying w's sign. */
#ifdef ti_dpbusd
static inline tvi TK(tile_dot_signed)(tvi sums, tvi w, tvi x) { return TK(tile_dot)(sums, ti_xor(w, ti_set1_8((char)0x80)), x); }
#else
static inline tvi TK(tile_dot_signed)(tvi sums, tvi w, tvi x) {
    return TK(tile_dot)(sums, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
#endif

/* Q5_0's fifth bits of chunk c moved to bit 4 of each byte (16-bit shifts: the mask drops what crossed bytes). */
static inline tvi TK(fifth_bits)(tvi high, int c) {
    const tvi bit4 = ti_set1_8(16);
    return c <= 4 ? ti_and(ti_sll16(high, _mm_cvtsi32_si128(4 - c)), bit4)
                  : ti_and(ti_srl16(high, _mm_cvtsi32_si128(c - 4)), bit4);
}

/* A span's outputs for activation rows m0..m0+M-1: acc[m] lane 8s + r = row r of the span's tile s. */
INLINE void TK(tile_rows_32)(const int type, const uint8_t *tile, const int64_t next, const int64_t stride,
                             const Acts *a, const int m0, const int M, tvf *acc) {
    const int zero = type == Q8_0 ? Q8_OFFSET : type == Q5_0 ? 16 : 8;
    for (int m = 0; m < M; m++) acc[m] = tf_zero();
    for (int64_t g = 0; g < a->groups; g++) {
        const uint8_t *group = tile + g * stride;
        tvi sums[MAX_ROWS];
        for (int m = 0; m < M; m++) sums[m] = ti_set1_32(-zero * act_sum(a, m0 + m, g));
        if (type == Q8_0) {
            for (int c = 0; c < 8; c++) {
                const tvi w = TK(ti_load)(group + 16 + 32 * c, next);
                for (int m = 0; m < M; m++) sums[m] = TK(tile_dot_signed)(sums[m], w, TK(ti_bcast4)(act_q(a, m0 + m, g) + 4 * c));
            }
        } else {
            const tvi high = type == Q5_0 ? TK(ti_load)(group + 16, next) : ti_zero();
            const uint8_t *nibbles = group + (type == Q5_0 ? 48 : 16);
            for (int p = 0; p < 4; p += 2) {
                const tvi mask = ti_set1_8(0x0f);
                tvi lo[2], hi[2];
                for (int k = 0; k < 2; k++) {
                    const tvi raw = TK(ti_load)(nibbles + 32 * (p + k), next);
                    lo[k] = ti_and(raw, mask), hi[k] = ti_and(ti_srli16(raw, 4), mask);
                    if (type == Q5_0)
                        lo[k] = ti_or(lo[k], TK(fifth_bits)(high, p + k)), hi[k] = ti_or(hi[k], TK(fifth_bits)(high, p + k + 4));
                }
                for (int m = 0; m < M; m++) {
                    const int8_t *x = act_q(a, m0 + m, g) + 4 * p;
                    sums[m] = TK(tile_dot4)(sums[m], lo[0], TK(ti_bcast4)(x), hi[0], TK(ti_bcast4)(x + 16),
                                            lo[1], TK(ti_bcast4)(x + 4), hi[1], TK(ti_bcast4)(x + 20));
                }
            }
        }
        const tvf d = TK(tf_halves)(group, next);
        for (int m = 0; m < M; m++)
            acc[m] = tf_fmadd(tf_from_ti(sums[m]), tf_mul(d, tf_set1(act_d(a, m0 + m, g))), acc[m]);
    }
}

/* Q4_K, or Q5_K with its fifth bits. */
INLINE void TK(tile_rows_q4k)(const int type, const uint8_t *tile, const int64_t next, const int64_t stride,
                              const Acts *a, const int m0, const int M, tvf *acc) {
    const tvi mask = ti_set1_8(0x0f);
    for (int m = 0; m < M; m++) acc[m] = tf_zero();
    for (int64_t b = 0; b < a->groups / 8; b++) {
        const uint8_t *blk = tile + b * stride;
        const tvf d = TK(tf_halves)(blk, next), dmin = TK(tf_halves)(blk + 16, next);
        for (int p = 0; p < 4; p++) {
            const int64_t g = 8 * b + 2 * p;
            tvi lo[MAX_ROWS], hi[MAX_ROWS];
            for (int m = 0; m < M; m++) lo[m] = hi[m] = ti_zero();
            for (int i = 0; i < 8; i += 2) {
                tvi q0[2], q1[2];
                for (int k = 0; k < 2; k++) {
                    const tvi raw = TK(ti_load)(blk + k_nibbles_at(type) + 256 * p + 32 * (i + k), next);
                    q0[k] = ti_and(raw, mask), q1[k] = ti_and(ti_srli16(raw, 4), mask);
                    if (type == Q5_K) {
                        const tvi high = TK(ti_load)(blk + 160 + 32 * (i + k), next);
                        q0[k] = ti_or(q0[k], TK(fifth_bits)(high, 2 * p));
                        q1[k] = ti_or(q1[k], TK(fifth_bits)(high, 2 * p + 1));
                    }
                }
                for (int m = 0; m < M; m++) {
                    const int8_t *x0 = act_q(a, m0 + m, g) + 4 * i, *x1 = act_q(a, m0 + m, g + 1) + 4 * i;
                    lo[m] = TK(tile_dot2)(lo[m], q0[0], TK(ti_bcast4)(x0), q0[1], TK(ti_bcast4)(x0 + 4));
                    hi[m] = TK(tile_dot2)(hi[m], q1[0], TK(ti_bcast4)(x1), q1[1], TK(ti_bcast4)(x1 + 4));
                }
            }
            for (int half = 0; half < 2; half++) {
                const int j = 2 * p + half;
                const tvf scale = tf_mul(d, TK(tf_bytes)(blk + 32 + 8 * j, next, 0)),
                         min = tf_mul(dmin, TK(tf_bytes)(blk + 96 + 8 * j, next, 0));
                for (int m = 0; m < M; m++) {
                    const float dx = act_d(a, m0 + m, g + half);
                    acc[m] = tf_fmadd(tf_from_ti(half ? hi[m] : lo[m]), tf_mul(scale, tf_set1(dx)), acc[m]);
                    acc[m] = tf_fmadd(min, tf_set1(act_min_factor(a, m0 + m, g + half)), acc[m]);
                }
            }
        }
    }
}

/* Q6_K's chunk c (0..3) of one step: 4 weights of each row, 0..63. */
static inline tvi TK(q6k_chunk)(const uint8_t *blk, int64_t next, int h, int c, int i) {
    return TK(ti_load)(blk + Q6_VALUES + 256 * (4 * h + c) + 32 * i, next);
}

INLINE void TK(tile_rows_q6k)(const uint8_t *tile, const int64_t next, const int64_t stride, const Acts *a, const int m0,
                              const int M, tvf *acc) {
    for (int m = 0; m < M; m++) acc[m] = tf_zero();
    for (int64_t b = 0; b < a->groups / 8; b++) {
        const uint8_t *blk = tile + b * stride;
        const tvf d = TK(tf_halves)(blk, next);
        for (int h = 0; h < 2; h++) {
            for (int c = 0; c < 4; c++) {
                const int64_t g = 8 * b + 4 * h + c, sub = 2 * g; /* sub: the first of g's two sub-blocks of 16 */
                tvi first[MAX_ROWS], second[MAX_ROWS];
                for (int m = 0; m < M; m++) {
                    first[m] = ti_set1_32(-32 * act_sum16(a, m0 + m, sub));
                    second[m] = ti_set1_32(-32 * act_sum16(a, m0 + m, sub + 1));
                }
                /* One row: a step at a time keeps the chains short; more rows: steps in pairs. The
                 * two sub-blocks go in loops of their own: no branch picks the sums inside. */
                for (int i = 0; M == 1 && i < 4; i++)
                    first[0] = TK(tile_dot)(first[0], TK(q6k_chunk)(blk, next, h, c, i), TK(ti_bcast4)(act_q(a, m0, g) + 4 * i));
                for (int i = 4; M == 1 && i < 8; i++)
                    second[0] = TK(tile_dot)(second[0], TK(q6k_chunk)(blk, next, h, c, i), TK(ti_bcast4)(act_q(a, m0, g) + 4 * i));
                for (int i = 0; M > 1 && i < 4; i += 2) {
                    const tvi q0 = TK(q6k_chunk)(blk, next, h, c, i), q1 = TK(q6k_chunk)(blk, next, h, c, i + 1);
                    for (int m = 0; m < M; m++) {
                        const int8_t *x = act_q(a, m0 + m, g) + 4 * i;
                        first[m] = TK(tile_dot2)(first[m], q0, TK(ti_bcast4)(x), q1, TK(ti_bcast4)(x + 4));
                    }
                }
                for (int i = 4; M > 1 && i < 8; i += 2) {
                    const tvi q0 = TK(q6k_chunk)(blk, next, h, c, i), q1 = TK(q6k_chunk)(blk, next, h, c, i + 1);
                    for (int m = 0; m < M; m++) {
                        const int8_t *x = act_q(a, m0 + m, g) + 4 * i;
                        second[m] = TK(tile_dot2)(second[m], q0, TK(ti_bcast4)(x), q1, TK(ti_bcast4)(x + 4));
                    }
                }
                const tvf s0 = tf_mul(d, TK(tf_bytes)(blk + 16 + 8 * (8 * h + 2 * c), next, 1)),
                         s1 = tf_mul(d, TK(tf_bytes)(blk + 16 + 8 * (8 * h + 2 * c + 1), next, 1));
                for (int m = 0; m < M; m++) {
                    const tvf dx = tf_set1(act_d(a, m0 + m, g));
                    acc[m] = tf_fmadd(tf_from_ti(first[m]), tf_mul(s0, dx), acc[m]);
                    acc[m] = tf_fmadd(tf_from_ti(second[m]), tf_mul(s1, dx), acc[m]);
                }
            }
        }
    }
}

/* `k_formats` (a constant once inlined): the type is Q4_K, Q5_K or Q6_K, else one of 32 weights a scale. */
INLINE void TK(tile_rows)(const int type, const int k_formats, const uint8_t *tile, const int64_t next,
                          const int64_t stride, const Acts *a, const int m0, const int M, tvf *acc) {
    if (!k_formats)
        TK(tile_rows_32)(type, tile, next, stride, a, m0, M, acc);
    else if (type == Q6_K)
        TK(tile_rows_q6k)(tile, next, stride, a, m0, M, acc);
    else
        TK(tile_rows_q4k)(type, tile, next, stride, a, m0, M, acc);
}

/* One span's sums for all M activation rows, passes of up to TILE_PASS_ROWS (each count a constant in
 * its case): out[m][tile of the span][row]. */
INLINE void TK(tile_span_rows)(const int type, const int k_formats, const uint8_t *tile, const int64_t next,
                               const int64_t stride, const Acts *a, const int M, float *out) {
    for (int m0 = 0; m0 < M; m0 += TILE_PASS_ROWS) {
        const int rows = M - m0 < TILE_PASS_ROWS ? M - m0 : TILE_PASS_ROWS;
        tvf acc[TILE_PASS_ROWS];
        switch (rows) {
        case 1: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 1, acc); break;
        case 2: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 2, acc); break;
        case 3: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 3, acc); break;
        case 4: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 4, acc); break;
#if TILE_PASS_ROWS > 4
        case 5: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 5, acc); break;
        case 6: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 6, acc); break;
        case 7: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 7, acc); break;
        default: TK(tile_rows)(type, k_formats, tile, next, stride, a, m0, 8, acc); break;
#endif
        }
        for (int m = 0; m < rows; m++) tf_store(out + (m0 + m) * TILE * TILE_SPAN, acc[m]);
    }
}

/* The K formats and those of 32 weights a scale in functions of their own: compiled into one,
 * the K formats' loops ran a fifth slower at 8 rows (the compiler's choices for the larger
 * function). */
static __attribute__((noinline)) void TK(tile_span_k)(const int type, const uint8_t *tile, const int64_t next,
                                                      const int64_t stride, const Acts *a, const int M, float *out) {
    TK(tile_span_rows)(type, 1, tile, next, stride, a, M, out);
}

static __attribute__((noinline)) void TK(tile_span_32)(const int type, const uint8_t *tile, const int64_t next,
                                                       const int64_t stride, const Acts *a, const int M, float *out) {
    TK(tile_span_rows)(type, 0, tile, next, stride, a, M, out);
}

static inline void TK(tile_span)(const int type, const uint8_t *tile, const int64_t next, const int64_t stride,
                                 const Acts *a, const int M, float *out) {
    if (is_k(type))
        TK(tile_span_k)(type, tile, next, stride, a, M, out);
    else
        TK(tile_span_32)(type, tile, next, stride, a, M, out);
}

#undef TK_CAT
#undef TK_NAME
#undef TK
#undef tvi
#undef tvf
#undef ti_zero
#undef ti_set1_32
#undef ti_set1_8
#undef ti_and
#undef ti_or
#undef ti_xor
#undef ti_srli16
#undef ti_slli16
#undef ti_sll16
#undef ti_srl16
#undef ti_dpbusd
#undef tf_zero
#undef tf_set1
#undef tf_mul
#undef tf_fmadd
#undef tf_from_ti
#undef tf_store

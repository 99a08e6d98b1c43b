/* Greedy picks for float32 rows of logits in one call: each row's first
 * argmax (ties go to the lowest id), or -1 where the row has no finite
 * maximum (a NaN anywhere, every value -inf, or a +inf), which the sampler
 * reports as a row with no valid token. Pass one takes the maximum and looks
 * for NaN; pass two finds where the maximum first occurs. */

#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define LANES 16
#elif defined(__AVX2__)
#include <immintrin.h>
#define LANES 8
#else
#define LANES 0
#endif

/* The row's maximum, or NaN where any value is NaN. */
static float row_max(const float *x, int64_t V) {
    int64_t v = 0;
    float top = -INFINITY;
    int nan = 0;
#if LANES == 16
    __m512 m = _mm512_set1_ps(-INFINITY);
    __mmask16 unordered = 0;
    for (; v + 16 <= V; v += 16) {
        const __m512 a = _mm512_loadu_ps(x + v);
        unordered |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, a);
    }
    top = _mm512_reduce_max_ps(m);
    nan = unordered != 0;
#elif LANES == 8
    __m256 m = _mm256_set1_ps(-INFINITY), unordered = _mm256_setzero_ps();
    for (; v + 8 <= V; v += 8) {
        const __m256 a = _mm256_loadu_ps(x + v);
        unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, a);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, m);
    for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
    nan = _mm256_movemask_ps(unordered) != 0;
#endif
    for (; v < V; v++) {
        nan |= isnan(x[v]);
        top = x[v] > top ? x[v] : top;
    }
    return nan ? NAN : top;
}

/* The first index holding `top` (a value the row has). */
static int64_t first_at(const float *x, int64_t V, float top) {
    int64_t v = 0;
#if LANES == 16
    const __m512 t = _mm512_set1_ps(top);
    for (; v + 16 <= V; v += 16) {
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + v), t, _CMP_EQ_OQ);
        if (hit) return v + __builtin_ctz(hit);
    }
#elif LANES == 8
    const __m256 t = _mm256_set1_ps(top);
    for (; v + 8 <= V; v += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + v), t, _CMP_EQ_OQ));
        if (hit) return v + __builtin_ctz(hit);
    }
#endif
    for (; v < V; v++)
        if (x[v] == top) return v;
    return -1;
}

/* tokens[i] for each of the n rows of x (row i at x + i * stride, V values). */
void inferd_greedy_rows(const float *x, int64_t n, int64_t stride, int64_t V, int64_t *tokens) {
#pragma omp parallel for schedule(static) if (n > 1 && n * V > 65536)
    for (int64_t i = 0; i < n; i++) {
        const float *row = x + i * stride;
        const float top = row_max(row, V);
        tokens[i] = isfinite(top) ? first_at(row, V, top) : -1;
    }
}

/* e^x on 16 float32 lanes, for the kernels' softmax and activations. */
#ifndef INFERD_EXP_H
#define INFERD_EXP_H

#ifdef __AVX512F__
#include <immintrin.h>

/* e^x for 16 lanes: 2^n * 2^f with |f| <= 1/2, 2^f by its degree-6 Taylor polynomial
 * (relative error under 2e-7, below float32's step); overflow gives inf, underflow 0. */
static inline __m512 exp_ps(__m512 x) {
    __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(1.44269504088896341f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147180559945309f)); /* f ln 2, |.| <= 0.347 */
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif

#endif

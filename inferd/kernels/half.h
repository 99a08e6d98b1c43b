/* IEEE half precision -> float32, for the fp16 scales of GGUF blocks. */
#ifndef INFERD_HALF_H
#define INFERD_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __F16C__
#include <immintrin.h>
static inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
#else
static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff, bits;
    if (exponent == 0x1f) { /* inf, nan */
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) { /* normal */
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) { /* zero */
        bits = sign;
    } else { /* subnormal: normalize */
        exponent = 113;
        while (!(mantissa & 0x400)) {
            mantissa <<= 1;
            exponent--;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#endif

static inline float load_half(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return half_to_float(h);
}

#endif

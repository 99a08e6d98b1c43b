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

#endif

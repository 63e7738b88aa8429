/* runtime/cuda/f16_bits.h — fp32 <-> fp16 on bit patterns (round to nearest
 * even, NaN kept quiet, overflow to infinity, subnormals exact): one
 * definition for the host's conversions (cuda_convert.c) and the CUDA host
 * emulation's stand-in for the PTX cvt instructions (tests/cuda_host_shim.h),
 * so it compiles as C and as C++. Touches nothing but its arguments. */
#ifndef YOLOCC_F16_BITS_H
#define YOLOCC_F16_BITS_H
#include <stdint.h>

/* the fp16 bits nearest the fp32 value with bits u */
static inline uint16_t f16_bits_from_f32_bits(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to infinity */
    if (a <= 0x33000000u) return (uint16_t)sign;              /* 2^-25 and below round to zero (the tie goes to even 0) */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    if (e < 113) { /* below 2^-14: an fp16 subnormal m * 2^-24 */
        uint32_t shift = 126 - e, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1), m = mant >> shift;
        if (rem > half || (rem == half && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3ffu), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is still right */
    return (uint16_t)(sign | h);
}

/* the fp32 bits of the fp16 value with bits v (exact) */
static inline uint32_t f32_bits_from_f16_bits(uint16_t v) {
    uint32_t sign = (uint32_t)(v & 0x8000u) << 16, e = (v >> 10) & 0x1fu, m = v & 0x3ffu;
    if (e == 0x1f) return sign | 0x7f800000u | (m << 13);
    if (e) return sign | ((e + 112) << 23) | (m << 13);
    if (!m) return sign;
    /* subnormal: shift the mantissa up to an implicit leading one */
    e = 113;
    while (!(m & 0x400u)) m <<= 1, e--;
    return sign | (e << 23) | ((m & 0x3ffu) << 13);
}

#endif

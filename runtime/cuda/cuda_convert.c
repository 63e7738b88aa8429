/* runtime/cuda/cuda_convert.c — host-side conversions between fp32 and the
 * device's storage types (bf16, fp16: round to nearest even, NaN kept
 * quiet), and packing of zero-copy views; pure C, no CUDA. Must not touch
 * devices or plans. */
#include "cuda_convert.h"

#include <string.h>

#include "../interp.h"


static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN: keep it a (quiet) NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
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

static float f16_to_f32(uint16_t v) {
    uint32_t sign = (uint32_t)(v & 0x8000u) << 16, e = (v >> 10) & 0x1fu, m = v & 0x3ffu, u;
    if (e == 0x1f) u = sign | 0x7f800000u | (m << 13);
    else if (e) u = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) u = sign;
    else {
        /* subnormal: shift the mantissa up to an implicit leading one */
        e = 113;
        while (!(m & 0x400u)) m <<= 1, e--;
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void cuda_f32_to_storage(DType t, const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    if (t == DT_BF16) for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
    else if (t == DT_F16) for (int64_t i = 0; i < n; i++) d[i] = f32_to_f16(src[i]);
    else memcpy(dst, src, (size_t)n * dtype_size(t));
}

void cuda_storage_to_f32(DType t, const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    if (t == DT_BF16)
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    else if (t == DT_F16) for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(s[i]);
    else memcpy(dst, src, (size_t)n * dtype_size(t));
}

int64_t cuda_view_span(int64_t images, int64_t row, int64_t stride) { return stride && images > 0 ? (images - 1) * stride + row : images * row; }

void cuda_view_gather(const void *strided, void *packed, int64_t images, int64_t row, int64_t stride, size_t esize) {
    for (int64_t i = 0; i < images; i++)
        memcpy((char *)packed + (size_t)(i * row) * esize, (const char *)strided + (size_t)(i * (stride ? stride : row)) * esize, (size_t)row * esize);
}


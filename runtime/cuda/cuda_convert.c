/* runtime/cuda/cuda_convert.c — host-side conversions between fp32 and the
 * device's storage types (bf16, fp16: round to nearest even, NaN kept
 * quiet), and packing of zero-copy views; pure C, no CUDA. Must not touch
 * devices or plans. */
#include "cuda_convert.h"

#include <string.h>

#include "../interp.h"
#include "f16_bits.h"

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN: keep it a (quiet) NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return f16_bits_from_f32_bits(u);
}

static float f16_to_f32(uint16_t v) {
    uint32_t u = f32_bits_from_f16_bits(v);
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

int64_t cuda_view_span(int64_t rows, int64_t row, int64_t stride) { return stride && rows > 0 ? (rows - 1) * stride + row : rows * row; }

void cuda_view_gather(const void *strided, void *packed, int64_t rows, int64_t row, int64_t stride, size_t esize) {
    for (int64_t i = 0; i < rows; i++)
        memcpy((char *)packed + (size_t)(i * row) * esize, (const char *)strided + (size_t)(i * (stride ? stride : row)) * esize, (size_t)row * esize);
}


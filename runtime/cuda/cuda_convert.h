/* runtime/cuda/cuda_convert.h — host-side conversions between fp32 and the
 * device's storage types, and packing of zero-copy views (used by CudaStep's
 * uploads and downloads). Pure C: no CUDA, no plans. */
#ifndef YOLOCC_CUDA_CONVERT_H
#define YOLOCC_CUDA_CONVERT_H
#include <stddef.h>
#include <stdint.h>

#include "../../ir/ir.h"

/* Elements a view of `rows` rows of `row` elements each, `stride` elements
 * apart (0: packed; views_geometry), spans from its first element. */
int64_t cuda_view_span(int64_t rows, int64_t row, int64_t stride);
/* Packs a strided view (its span, as downloaded) into rows * row
 * contiguous elements of esize bytes each. */
void cuda_view_gather(const void *strided, void *packed, int64_t rows, int64_t row, int64_t stride, size_t esize);
/* Between fp32 and a storage type (DT_F32: copy; DT_BF16/DT_F16: round to
 * nearest even, NaN stays NaN, fp16 overflow goes to infinity). */
void cuda_f32_to_storage(DType t, const float *src, void *dst, int64_t n);
void cuda_storage_to_f32(DType t, const void *src, float *dst, int64_t n);

#endif

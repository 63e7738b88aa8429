/* @NAME@: `outer` runs of `len` elements between strided buffers. Between
 * buffers of one storage type the bits move unchanged, a.vec elements (up
 * to 16 bytes, cuda_copy_vec) at a time; between two types each element is
 * converted. */

/* Grid-stride over the runs in units of v elements: move(source unit,
 * destination unit) for each. The run o and offset k advance without a
 * division. */
template <typename Move> __device__ __forceinline__ void yk_copy_runs(const YkArgs &a, long long v, Move move) {
    const long long len = a.len / v, src_stride = a.src_stride / v, src_off = a.src_off / v, dst_stride = a.dst_stride / v, dst_off = a.dst_off / v;
    const long long total_ = a.outer * len, step_ = (long long)gridDim.x * blockDim.x;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= total_) return;
    long long o = e / len, k = e - o * len;
    const long long do_ = step_ / len, dk_ = step_ - do_ * len;
    for (; e < total_; e += step_) {
        move(o * src_stride + src_off + k, o * dst_stride + dst_off + k);
        k += dk_;
        const long long ko_ = k >= len;
        k -= ko_ * len;
        o += do_ + ko_;
    }
}

/* one unit of type U (its size: a.vec elements) */
template <typename U> __device__ __forceinline__ void yk_copy_units(const YkArgs &a) {
    const U *src = (const U *)a.t[0];
    U *dst = (U *)a.t[1];
    yk_copy_runs(a, a.vec, [&](long long s, long long d) { dst[d] = src[s]; });
}

extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
#if @SAME@
    switch (a.vec * @ESIZE@) {
    case 16: yk_copy_units<yk_unit_t<16>::type>(a); break;
    case 8: yk_copy_units<yk_unit_t<8>::type>(a); break;
    case 4: yk_copy_units<yk_unit_t<4>::type>(a); break;
    case 2: yk_copy_units<yk_unit_t<2>::type>(a); break;
    }
#else
    yk_copy_runs(a, 1, [&](long long s, long long d) { yk_st_@DST@(a.t[1], d, yk_ld_@SRC@(a.t[0], s)); });
#endif
}

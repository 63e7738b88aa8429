
/* @NAME@: `outer` runs of `len` elements between strided buffers,
 * grid-stride; the run o and offset k advance without a division */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    const long long total_ = a.outer * a.len, step_ = (long long)gridDim.x * blockDim.x;
    long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= total_) return;
    long long o = e / a.len, k = e - o * a.len;
    const long long do_ = step_ / a.len, dk_ = step_ - do_ * a.len;
    for (; e < total_; e += step_) {
        yk_st_@DST@(a.t[1], o * a.dst_stride + a.dst_off + k, yk_ld_@SRC@(a.t[0], o * a.src_stride + a.src_off + k));
        k += dk_;
        const long long ko_ = k >= a.len;
        k -= ko_ * a.len;
        o += do_ + ko_;
    }
}

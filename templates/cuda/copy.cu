
/* @NAME@: `outer` runs of `len` elements between strided buffers, grid-stride */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    const long long total_ = a.outer * a.len;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total_; e += (long long)gridDim.x * blockDim.x) {
        const long long o = e / a.len, k = e - o * a.len;
        yk_st_@DST@(a.t[1], o * a.dst_stride + a.dst_off + k, yk_ld_@SRC@(a.t[0], o * a.src_stride + a.src_off + k));
    }
}

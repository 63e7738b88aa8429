
/* @NAME@: `outer` runs of `len` elements from one strided buffer to another */
void @NAME@(const YkArgs *ap) {
    const YkArgs a = *ap;
    const float *src = (const float *)a.t[0];
    float *dst = (float *)a.t[1];
    for (long long o = 0; o < a.outer; o++)
        for (long long k = 0; k < a.len; k++) dst[o * a.dst_stride + a.dst_off + k] = src[o * a.src_stride + a.src_off + k];
}

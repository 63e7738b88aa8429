
/* @NAME@: `outer` runs of `len` elements from one strided buffer to another,
 * in blocks of up to 16384 elements that the threads share when the copy is big */
void @NAME@(const YkArgs *ap) {
    const YkArgs a = *ap;
    const long long blk_ = 16384, nb_ = (a.len + blk_ - 1) / blk_;
#pragma omp parallel for schedule(static) firstprivate(a) if (a.outer * a.len >= 65536)
    for (long long b = 0; b < a.outer * nb_; b++) {
        const long long o = b / nb_, k0 = b % nb_ * blk_, k1 = k0 + blk_ < a.len ? k0 + blk_ : a.len;
        const float *src = (const float *)a.t[0] + o * a.src_stride + a.src_off;
        float *dst = (float *)a.t[1] + o * a.dst_stride + a.dst_off;
        for (long long k = k0; k < k1; k++) dst[k] = src[k];
    }
}

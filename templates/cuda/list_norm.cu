
/* @NAME@: one block; each tensor's norm rounded to fp32 first
 * (clip_grad_norm_), a fixed summation order, then the finalize */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    const long long c = 0;
    (void)c;
    double total_ = 0;
    for (long long j = 0; j < a.list_n; j++) {
        const float *x = (const float *)a.list[j];
        double sq = 0;
        for (long long i = threadIdx.x; i < a.list_len[j]; i += blockDim.x) sq += (double)x[i] * x[i];
        sq = yk_block_sum(sq, red_);
        const float norm = (float)sqrt(sq);
        total_ += (double)norm * norm;
    }
    const double acc_[1] = {total_};
    if (threadIdx.x == 0) {
@FINALIZE@
    }
}

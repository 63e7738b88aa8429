
/* @NAME@: blockIdx.x a tensor of the list, blockIdx.y one of gridDim.y fixed
 * chunks of it. Each block's fp64 sum of squares goes to a.part; the
 * tensor's last block adds its chunks in order and rounds the norm to fp32
 * (clip_grad_norm_), and the last tensor done adds the squared norms in
 * list order and runs the finalize: deterministic for a given split, which
 * is a constant. The counters (a.arrived: per tensor, then one for the list)
 * are zero again when it returns. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    __shared__ int last_;
    const long long c = 0, j = blockIdx.x, np_ = gridDim.y, p_ = blockIdx.y, len_ = a.list_len[j];
    (void)c;
    double *part_ = (double *)a.part;                      /* [list_n][np_] the blocks' sums */
    double *norms_ = part_ + a.list_n * np_;               /* [list_n] the squared fp32 norms */
    const float *x = (const float *)a.list[j];
    const long long chunk_ = (len_ + np_ - 1) / np_, lo_ = p_ * chunk_, hi_ = lo_ + chunk_ < len_ ? lo_ + chunk_ : len_;
    double sq = 0;
    for (long long i = lo_ + threadIdx.x; i < hi_; i += blockDim.x) sq += (double)x[i] * x[i];
    sq = yk_rows_sum(sq, red_, 1);
    if (threadIdx.x == 0) {
        part_[j * np_ + p_] = sq;
        __threadfence();
        last_ = atomicAdd(&a.arrived[j], 1u) == (unsigned)(np_ - 1);
    }
    __syncthreads();
    if (!last_ || threadIdx.x != 0) return;
    __threadfence();
    double t_ = 0;
    for (long long q = 0; q < np_; q++) t_ += ((volatile double *)part_)[j * np_ + q];
    const float norm = (float)sqrt(t_);
    norms_[j] = (double)norm * norm;
    a.arrived[j] = 0;
    __threadfence();
    if (atomicAdd(&a.arrived[a.list_n], 1u) != (unsigned)(a.list_n - 1)) return;
    __threadfence();
    double total_ = 0;
    for (long long q = 0; q < a.list_n; q++) total_ += ((volatile double *)norms_)[q];
    a.arrived[a.list_n] = 0;
    const double acc_[1] = {total_};
    {
@FINALIZE@
    }
}


/* @NAME@: channel blockIdx.x; its n * inner elements in gridDim.y fixed
 * chunks, one per blockIdx.y. Launched once per phase (a.phase): each block's
 * fp64 sums (per-thread strided order, a fixed tree across the block) go to
 * a.part, and the channel's last block to arrive adds them in chunk order and
 * runs the phase's finalize, whose variables later phases read from a.part:
 * deterministic for a given split, which depends on the shape alone. */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    __shared__ double var_[YK_RED_VARS];
    __shared__ int last_;
    const long long c = blockIdx.x, c_ = a.c, inner_ = a.inner, np_ = gridDim.y, p_ = blockIdx.y;
    double *part_ = (double *)a.part;                      /* [c_][np_][YK_RED_ACCS] the blocks' sums */
    double *vars_ = part_ + c_ * np_ * YK_RED_ACCS;        /* [c_][YK_RED_VARS] the finalizes' variables */
    unsigned *arrived_ = a.arrived;                       /* [c_] blocks done with this phase; at a fixed place, so
                                                           * every launch finds the zeros the last one left */
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
    (void)red_;
    (void)last_;
    (void)arrived_;
    if (threadIdx.x < YK_RED_VARS) var_[threadIdx.x] = a.phase > 0 ? vars_[c * YK_RED_VARS + threadIdx.x] : 0.0;
    __syncthreads();

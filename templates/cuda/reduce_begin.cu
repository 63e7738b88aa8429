
/* @NAME@: blockIdx.x a group of a.lanes x V consecutive channels, each
 * thread V adjacent ones (V = a.vec, > 1 channels last only: one load of up
 * to 16 bytes per element buffer and row) at lane threadIdx.x % lanes, and
 * one row of every blockDim.x / lanes (a row: an image's k-th pixel when
 * inner > 1, NCHW, lanes 1; a pixel of every channel when inner == 1,
 * channels last, so a warp reads adjacent channels); the [n, inner] rows in
 * gridDim.y fixed chunks, one per blockIdx.y. Launched once per phase
 * (a.phase): each block's fp64 sums per channel (per-thread strided order, a
 * fixed tree over its rows) go to a.part, and the group's last block to
 * arrive adds them in the same fixed way and runs the phase's finalize, for
 * each channel of its threads, whose variables later phases read from
 * a.part: deterministic for a given split, lane count and V, which depend on
 * the shape and the plan's buffer offsets alone. Indices are of type I, as
 * in the map: int on the vectorized path (YkArgs.idx32), else long long. */
template <int V, typename I> __device__ __forceinline__ void @NAME@_run(const YkArgs &a, double *red_, int &last_) {
    const I lanes_ = a.lanes, lane_ = threadIdx.x % lanes_, row_ = threadIdx.x / lanes_, rows_per_ = YK_BLOCK / lanes_;
    /* c: the thread's first channel; channel c + v of its V is c + v * cstep_ */
    const I c = (blockIdx.x * lanes_ + lane_) * V, c_ = a.c, inner_ = a.inner, np_ = gridDim.y, p_ = blockIdx.y, cstep_ = 1;
    const bool chan_ = c < c_;                             /* a lane past the last channel only meets the others */
    double *part_ = (double *)a.part;                      /* [c_][np_][YK_RED_ACCS] the blocks' sums */
    double *vars_ = part_ + c_ * np_ * YK_RED_ACCS;        /* [c_][YK_RED_VARS] the finalizes' variables */
    unsigned *arrived_ = a.arrived;                       /* [groups] blocks done with this phase; at a fixed place, so
                                                           * every launch finds the zeros the last one left */
    const double count_ = (double)(a.n * a.inner); /* exact: a finalize divides by it in fp64 */
    (void)count_;
    (void)cstep_;
    (void)arrived_;
    double var_[YK_RED_VARS][V];
    for (int w = 0; w < YK_RED_VARS; w++)
        for (int v = 0; v < V; v++) var_[w][v] = a.phase > 0 && chan_ ? vars_[(c + v) * YK_RED_VARS + w] : 0.0;


/* @NAME@: per-channel sums over [n, inner] in a fixed order, then a
 * per-channel finalize */
YK_CLONES void @NAME@(const YkArgs *ap) {
    const YkArgs a = *ap;
    const long long c_ = a.c, inner_ = a.inner;
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
#pragma omp parallel for schedule(static) firstprivate(a) if (a.n * c_ * inner_ >= 65536)
    for (long long c = 0; c < c_; c++) {
        double var_[@NVARS@];
        (void)var_;

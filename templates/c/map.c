
/* @NAME@: elementwise over [n, c, inner] */
YK_CLONES void @NAME@(const YkArgs *ap) {
    const YkArgs a = *ap;
    const long long c_ = a.c, inner_ = a.inner;
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
#pragma omp parallel for collapse(2) schedule(static) firstprivate(a) if (a.n * c_ * inner_ >= 65536)
    for (long long n = 0; n < a.n; n++)
        for (long long c = 0; c < c_; c++) {
            const long long base_ = (n * c_ + c) * inner_;
@CHAN@
#pragma omp simd
            for (long long k = 0; k < inner_; k++) {
                const long long i = base_ + k;
                (void)i;
@BODY@
            }
        }
}

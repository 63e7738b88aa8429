    if (a.phase == @PHASE@) {
        double acc_[YK_RED_ACCS] = {0};
        (void)acc_;
        const long long total_ = @LOOP_N@ * inner_, chunk_ = (total_ + np_ - 1) / np_, lo_ = p_ * chunk_, hi_ = lo_ + chunk_ < total_ ? lo_ + chunk_ : total_;
        for (long long e = lo_ + threadIdx.x; e < hi_; e += blockDim.x) {
            const long long n = e / inner_, k = e - n * inner_;
            const long long i = (n * c_ + c) * inner_ + k;
            (void)i;
@BODY@
        }
        for (int s = 0; s < @NACCS_USED@; s++) acc_[s] = yk_block_sum(acc_[s], red_);
        if (np_ > 1) {
            if (threadIdx.x == 0) {
                for (int s = 0; s < @NACCS_USED@; s++) part_[(c * np_ + p_) * YK_RED_ACCS + s] = acc_[s];
                __threadfence();
                last_ = atomicAdd(&arrived_[c], 1u) == (unsigned)(np_ - 1);
            }
            __syncthreads();
            if (!last_) return;
            if (threadIdx.x == 0) {
                __threadfence();
                for (int s = 0; s < @NACCS_USED@; s++) {
                    double t_ = 0;
                    for (long long q = 0; q < np_; q++) t_ += ((volatile double *)part_)[(c * np_ + q) * YK_RED_ACCS + s];
                    acc_[s] = t_;
                }
                arrived_[c] = 0;
            }
        }
        if (threadIdx.x == 0) {
@FINALIZE@
            for (int v = 0; v < YK_RED_VARS; v++) vars_[c * YK_RED_VARS + v] = var_[v];
        }
    }

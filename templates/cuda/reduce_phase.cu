    if (a.phase == @PHASE@) {
        double acc_[YK_RED_ACCS][V] = {};
        (void)acc_;
        const I total_ = @LOOP_N@ * inner_, chunk_ = (total_ + np_ - 1) / np_, lo_ = p_ * chunk_, hi_ = lo_ + chunk_ < total_ ? lo_ + chunk_ : total_;
        /* the row e is image n's k-th: both advance by the rows' stride without a division */
        const I dn_ = rows_per_ / inner_, dk_ = rows_per_ - dn_ * inner_;
        I n = (lo_ + row_) / inner_, k = lo_ + row_ - n * inner_;
        if (chan_) {
            /* the thread's channels are fixed: what depends on them alone is computed once */
@CHAN@
            for (I e = lo_ + row_; e < hi_; e += rows_per_) {
                const I i = (n * c_ + c) * inner_ + k;
                (void)i;
@BODY@
                k += dk_;
                const I kn_ = k >= inner_;
                k -= kn_ * inner_;
                n += dn_ + kn_;
            }
        }
        for (int s = 0; s < @NACCS_USED@; s++)
            for (int v = 0; v < V; v++) acc_[s][v] = yk_rows_sum(acc_[s][v], red_, lanes_);
        if (np_ > 1) {
            if (row_ == 0 && chan_) {
                for (int s = 0; s < @NACCS_USED@; s++)
                    for (int v = 0; v < V; v++) part_[((c + v) * np_ + p_) * YK_RED_ACCS + s] = acc_[s][v];
                __threadfence();
            }
            __syncthreads();
            if (threadIdx.x == 0) last_ = atomicAdd(&arrived_[blockIdx.x], 1u) == (unsigned)(np_ - 1);
            __syncthreads();
            if (!last_) return;
            __threadfence();
            /* the blocks' sums in the same fixed tree as the elements: each row adds every
             * rows_per_-th block's, in order, then the rows are added */
            for (int s = 0; s < @NACCS_USED@; s++)
                for (int v = 0; v < V; v++) {
                    double t_ = 0;
                    for (I q = row_; chan_ && q < np_; q += rows_per_) t_ += ((volatile double *)part_)[((c + v) * np_ + q) * YK_RED_ACCS + s];
                    acc_[s][v] = yk_rows_sum(t_, red_, lanes_);
                }
            if (threadIdx.x == 0) arrived_[blockIdx.x] = 0;
        }
        if (row_ == 0 && chan_) {
            const I c0_ = c;
            for (int v = 0; v < V; v++) {
                const I c = c0_ + v;
@FINALIZE@
            }
        }
    }

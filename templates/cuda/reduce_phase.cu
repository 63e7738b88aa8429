    if (a.phase == @PHASE@) {
        double acc_[YK_RED_ACCS][V] = {};
        (void)acc_;
        const I total_ = @LOOP_N@ * inner_, chunk_ = (total_ + np_ - 1) / np_, lo_ = p_ * chunk_, hi_ = lo_ + chunk_ < total_ ? lo_ + chunk_ : total_;
        /* the row e is image rn_'s rk_-th: both advance by the rows' stride without a division */
        const I dn_ = rows_per_ / inner_, dk_ = rows_per_ - dn_ * inner_;
        I rn_ = (lo_ + row_) / inner_, rk_ = lo_ + row_ - rn_ * inner_;
        if (chan_) {
            /* the thread's channels are fixed: what depends on them alone is computed once */
@CHAN@
            /* U_ of the thread's rows at a time, their loads all issued before
             * the first is used: one row's loads alone (8 or 16 bytes) kept too
             * few bytes in flight to cover the memory's latency. The rows then
             * add to the sums in the order one at a time did, so the sums are
             * the same to the bit; a row past the end loads nothing (zeros),
             * adds nothing and stores nothing */
            const int U_ = @UNROLL@;
            for (I e = lo_ + row_; e < hi_; e += rows_per_ * U_) {
                I iu_[U_], nu_[U_], ku_[U_];
                bool ok_[U_];
                for (int u_ = 0; u_ < U_; u_++) {
                    ok_[u_] = e + u_ * rows_per_ < hi_;
                    nu_[u_] = rn_, ku_[u_] = rk_, iu_[u_] = (rn_ * c_ + c) * inner_ + rk_;
                    rk_ += dk_;
                    const I kn_ = rk_ >= inner_;
                    rk_ -= kn_ * inner_;
                    rn_ += dn_ + kn_;
                }
@LOADS@
                for (int u_ = 0; u_ < U_; u_++) {
                    const I i = iu_[u_], n = nu_[u_], k = ku_[u_];
                    (void)i, (void)n, (void)k;
@BODY@
                }
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

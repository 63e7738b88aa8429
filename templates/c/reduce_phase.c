        {
            /* element k of a row adds to lane k % YK_LANES (the rows'
             * remainders to the first lanes), so the element loop
             * vectorises while the order of every sum stays fixed */
            double lane_acc_[@NACCS@][YK_LANES] = {{0}}, acc_[@NACCS@];
            (void)lane_acc_;
            (void)acc_;
@CHAN@
            for (long long n = 0; n < @LOOP_N@; n++) {
                long long k0 = 0;
                for (; k0 + YK_LANES <= inner_; k0 += YK_LANES) {
#pragma omp simd
                    for (int l_ = 0; l_ < YK_LANES; l_++) {
                        const long long k = k0 + l_, i = (n * c_ + c) * inner_ + k;
                        (void)i;
@BODY@
                    }
                }
                for (int l_ = 0; k0 + l_ < inner_; l_++) {
                    const long long k = k0 + l_, i = (n * c_ + c) * inner_ + k;
                    (void)i;
@BODY@
                }
            }
            for (int j_ = 0; j_ < @NACCS@; j_++) acc_[j_] = yk_fold_lanes(lane_acc_[j_]);
@FINALIZE@
        }

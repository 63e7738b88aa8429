    {
        double acc_[@NACCS@] = {0};
        (void)acc_;
        for (long long e = threadIdx.x; e < @LOOP_N@ * inner_; e += blockDim.x) {
            const long long n = e / inner_, k = e - n * inner_;
            const long long i = (n * c_ + c) * inner_ + k;
            (void)i;
@BODY@
        }
        for (int s = 0; s < @NACCS_USED@; s++) acc_[s] = yk_block_sum(acc_[s], red_);
        if (threadIdx.x == 0) {
@FINALIZE@
        }
        __syncthreads();
    }

        {
            double acc_[@NACCS@] = {0};
            (void)acc_;
@CHAN@
            for (long long n = 0; n < @LOOP_N@; n++)
                for (long long k = 0; k < inner_; k++) {
                    const long long i = (n * c_ + c) * inner_ + k;
                    (void)i;
@BODY@
                }
@FINALIZE@
        }

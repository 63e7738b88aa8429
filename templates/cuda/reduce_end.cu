}

extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    __shared__ int last_;
    if (a.vec == @VEC@) @NAME@_run<@VEC@>(a, red_, last_);
    else @NAME@_run<1>(a, red_, last_);
}

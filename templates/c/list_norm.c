
/* @NAME@: norm over a list of tensors, each tensor's norm rounded to fp32
 * first (clip_grad_norm_), then the finalize */
void @NAME@(const YkArgs *ap) {
    const YkArgs a = *ap;
    const long long c = 0;
    (void)c;
    double total_ = 0;
    for (long long j = 0; j < a.list_n; j++) {
        const float *x = (const float *)a.list[j];
        double sq = 0;
        for (long long i = 0; i < a.list_len[j]; i++) sq += (double)x[i] * x[i];
        const float norm = (float)sqrt(sq);
        total_ += (double)norm * norm;
    }
    const double acc_[1] = {total_};
@FINALIZE@
}

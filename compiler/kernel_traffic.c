/* compiler/kernel_traffic.c — the device-memory bytes one launch of a step must
 * move: a generated kernel's loads and stores as its skeleton visits them, a
 * library op's inputs and outputs read or written once. A model for telling a
 * launch's time from a bandwidth bound (inspect, the CUDA profile); it changes
 * no kernel and knows no target. */
#include "kernel_build.h"

/* The bytes section s moves when it runs once per element of `extent` (its
 * per-channel loads and stores once per channel, fixed ones once): each buffer
 * once per kind of access, as the rendered kernel keeps a loaded value in a
 * register. */
static int64_t section_bytes(const Kernel *k, KSection s, int64_t extent, int64_t channels) {
    bool seen[2][KIR_MAX_BUFS][KA_COUNT] = {{{false}}}; /* [store][slot][access] */
    int64_t bytes = 0;
    for (int r = s.first; r < s.first + s.n; r++) {
        const KInstr *in = &k->code[r];
        if (in->op != KI_LOAD && in->op != KI_STORE) continue;
        bool *once = &seen[in->op == KI_STORE][in->buf][in->at];
        if (*once) continue;
        *once = true;
        int64_t elems = in->at == KA_ELEM ? extent : in->at == KA_CHAN || in->at == KA_FIRST ? channels : 1;
        bytes += elems * kernel_storage_bytes(k->buf_dtype[in->buf]);
    }
    return bytes;
}

int64_t kernel_launch_bytes(const KProgram *kp, const Graph *g, const bool *persistent, int l) {
    const KLaunch *ln = &kp->launches[l];
    int64_t bytes = 0;
    if (ln->kernel < 0) {
        const Op *op = &g->ops[ln->op_lo];
        for (int i = 0; i < op->n_in + op->n_out; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[i - op->n_in];
            bool again = false;
            for (int j = 0; j < i && !again; j++) again = (j < op->n_in ? op->in[j] : op->out[j - op->n_in]) == t;
            if (t >= 0 && !again) bytes += memplan_tensor_bytes(g, t, persistent[t], kp->precision);
        }
        return bytes;
    }
    const Kernel *k = &kp->kernels[ln->kernel];
    const int64_t extent = ln->n * ln->c * ln->inner;
    switch (k->skel) {
    case KS_COPY:
        return ln->outer * ln->len * (kernel_storage_bytes(k->buf_dtype[0]) + kernel_storage_bytes(k->buf_dtype[1]));
    case KS_LIST_NORM:
        for (const int *t = &kp->list[ln->list_first]; t < &kp->list[ln->list_first + ln->list_n]; t++) bytes += memplan_tensor_bytes(g, *t, persistent[*t], kp->precision);
        return bytes + section_bytes(k, k->finalize[0], 1, 1);
    case KS_MAP:
        if (!kernel_is_multi(kp, ln)) return section_bytes(k, k->body[0], extent, ln->c);
        for (int r = 0; r < ln->list_n; r++) bytes += section_bytes(k, k->body[0], kernel_row_len(kp, ln, r), 1);
        return bytes;
    case KS_CHANNEL_REDUCE:
        for (int ph = 0; ph < k->n_phases; ph++) bytes += section_bytes(k, k->body[ph], extent, ln->c) + section_bytes(k, k->finalize[ph], ln->c, ln->c);
        return bytes;
    default:
        return 0;
    }
}

/* runtime/cuda/cuda_routes.c — where each launch of a plan runs (its generated kernel, a library
 * kernel, cuDNN, the detection loss's phases, or the reference kernel on the host), the per-step
 * census of those routes and its one-line description. Pure: no device calls; must not run
 * anything. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../../compiler/lib_kernels.h"
#include "cuda_step.h"

static bool is_conv(OpKind k) { return k == OP_CONV2D || k == OP_CONV2D_DGRAD || k == OP_CONV2D_WGRAD; }
static bool is_loss(OpKind k) { return k == OP_DETECT_LOSS || k == OP_DETECT_LOSS_BWD; }

const char *cuda_route_name(CudaRoute r) {
    static const char *const NAMES[CUDA_ROUTE_COUNT] = {"generated kernels", "library kernels", "cuDNN", "detection loss", "host", "cuBLASLt"};
    return (unsigned)r < CUDA_ROUTE_COUNT ? NAMES[r] : "?";
}

CudaRoute cuda_step_route(const Graph *g, const KLaunch *ln) {
    if (ln->kernel >= 0) return CUDA_ROUTE_KERNEL;
    OpKind k = g->ops[ln->op_lo].kind;
    return is_conv(k) ? CUDA_ROUTE_CUDNN : is_loss(k) ? CUDA_ROUTE_DETLOSS : lib_entry_of(k) >= 0 ? CUDA_ROUTE_LIBRARY : CUDA_ROUTE_HOST;
}

CudaRoute cuda_step_route_for(const CudaStep *cs, const Graph *g, const KLaunch *ln) {
    CudaRoute r = cuda_step_route(g, ln);
    if ((r == CUDA_ROUTE_LIBRARY || r == CUDA_ROUTE_DETLOSS) && cs->lib_host) return CUDA_ROUTE_HOST;
    if (r == CUDA_ROUTE_CUDNN && cuda_step_conv_gemm_routed(cs, ln->op_lo)) return CUDA_ROUTE_CUBLASLT;
    return r == CUDA_ROUTE_LIBRARY && cuda_step_attention_routed(cs, ln->op_lo) ? CUDA_ROUTE_CUBLASLT : r;
}

void cuda_step_census(CudaStep *cs, const Graph *g, const KProgram *kp) {
    cs->kernel_launches = cs->lib_launches = cs->cudnn_ops = cs->loss_ops = cs->host_ops = cs->cublaslt_ops = cs->conv_gemm_ops = 0;
    memset(cs->host_op_kinds, 0, sizeof cs->host_op_kinds);
    for (int l = 0; l < kp->n_launches; l++) {
        const KLaunch *ln = &kp->launches[l];
        switch (cuda_step_route_for(cs, g, ln)) {
        case CUDA_ROUTE_KERNEL: cs->kernel_launches++; break;
        case CUDA_ROUTE_LIBRARY: cs->lib_launches++; break;
        case CUDA_ROUTE_CUDNN: cs->cudnn_ops++; break;
        case CUDA_ROUTE_DETLOSS: cs->loss_ops++; break;
        case CUDA_ROUTE_CUBLASLT:
            cs->cublaslt_ops++;
            cs->conv_gemm_ops += is_conv(g->ops[ln->op_lo].kind);
            break;
        case CUDA_ROUTE_HOST:
            cs->host_ops++;
            cs->host_op_kinds[g->ops[ln->op_lo].kind]++;
            break;
        }
    }
}

static void append(char *buf, int cap, int *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, int cap, int *used, const char *fmt, ...) {
    if (*used >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, (size_t)(cap - *used), fmt, ap);
    va_end(ap);
    if (n > 0) *used = *used + n < cap - 1 ? *used + n : cap - 1;
}

void cuda_step_describe(const CudaStep *cs, char *buf, int cap) {
    if (cap <= 0) return;
    buf[0] = 0;
    int used = 0;
    if (!cs->host_ops) {
        append(buf, cap, &used,
               "no library op runs on the host: %d generated launches, %d library kernel launches, %d cuDNN convolutions and %d detection-loss ops each step",
               cs->kernel_launches, cs->lib_launches, cs->cudnn_ops, cs->loss_ops);
    } else {
        append(buf, cap, &used, "%d library op%s on the host each step:", cs->host_ops, cs->host_ops == 1 ? " runs" : "s run");
        bool done[OP_COUNT] = {0};
        for (const char *sep = " ";; sep = ", ") {
            int best = -1;
            for (int k = 0; k < OP_COUNT; k++)
                if (!done[k] && cs->host_op_kinds[k] && (best < 0 || cs->host_op_kinds[k] > cs->host_op_kinds[best])) best = k;
            if (best < 0) break;
            done[best] = true;
            append(buf, cap, &used, "%s%s x%d", sep, op_def((OpKind)best)->name, cs->host_op_kinds[best]);
        }
    }
    if (cs->tune_shapes)
        append(buf, cap, &used, "; cuDNN engines timed for %d convolution shapes (%d choices from the tuning cache), %d faster than the heuristics' first (%.3f ms a step instead of %.3f)",
               cs->tune_shapes, cs->tune_cached, cs->tune_changed, cs->tune_ms[1], cs->tune_ms[0]);
    else if (cs->conv.candidates == 1)
        append(buf, cap, &used, "; cuDNN engines as its heuristics rank them first (YOLOCC_CUDNN_TUNE=heuristic)");
    else if (cs->conv.candidates > 1 && cs->cudnn_ops)
        append(buf, cap, &used, "; cuDNN engines: one acceptable per convolution shape, nothing to time");
    if (cs->tune_failed)
        append(buf, cap, &used, "; %d candidate engine%s failed to run and %s skipped (%s)", cs->tune_failed, cs->tune_failed == 1 ? "" : "s",
               cs->tune_failed == 1 ? "was" : "were", cs->tune_why);
    if (cs->tune_store_why[0]) append(buf, cap, &used, "; the engine choices could not be cached (%s)", cs->tune_store_why);
    const int att = cs->cublaslt_ops - cs->conv_gemm_ops;
    if (att) append(buf, cap, &used, "; %d attention op%s through cuBLASLt", att, att == 1 ? "" : "s");
    if (cs->n_cgemm && cs->conv1x1_mode == CONV1X1_AUTO)
        append(buf, cap, &used, "; %d of %d 1x1 convolutions through cuBLASLt, where it measured faster (%.3f ms a step instead of %.3f in cuDNN)",
               cs->conv_gemm_ops, cs->n_cgemm, cs->conv_gemm_ms[1], cs->conv_gemm_ms[0]);
    else if (cs->n_cgemm)
        append(buf, cap, &used, "; %d of %d 1x1 convolutions through cuBLASLt (YOLOCC_CUDA_CONV1X1=cublaslt)", cs->conv_gemm_ops, cs->n_cgemm);
    if (cs->cgemm_refused) append(buf, cap, &used, "; %d 1x1 convolution%s left to cuDNN (%s)", cs->cgemm_refused, cs->cgemm_refused == 1 ? "" : "s", cs->cgemm_why);
    if (cs->att_library)
        append(buf, cap, &used, "; %d attention op%s in library kernels (%s)", cs->att_library, cs->att_library == 1 ? "" : "s", cs->att_why);
    if (cs->conv.staged_ops)
        append(buf, cap, &used, "; %d weight gradient%s in %s by cuDNN, then widened to fp32 (no engine writes fp32 from those inputs)", cs->conv.staged_ops,
               cs->conv.staged_ops == 1 ? "" : "s", precision_name(cs->conv.precision));
}

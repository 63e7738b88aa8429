/* tests/test_cast_emul.c — the widening cast (templates/cuda/lib/cast.cu with bf16 / fp16 in,
 * fp32 out) without a GPU: the kernel a bf16 or fp16 training plan carries for weight gradients
 * cuDNN computes in the inputs' type (runtime/cuda/cudnn_conv.h), built as host C++ and run as an
 * emulated grid, widens every 16-bit pattern exactly as the host's conversion does; fp32 plans
 * and plans without weight gradients carry none; it compiles with NVRTC. Owns no kernel code. */
#include <stdint.h>

#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../runtime/cuda/cuda_convert.h"
#include "test_emul.h"
#include "test_gpu.h"

/* The widen kernel of plan p, or one with n_operands 0 when it has none. */
static LibKernel widen_of(const Plan *p) {
    char err[512];
    KProgram kp;
    LibProgram lp;
    cr_assert(kernel_lower(&p->g, &p->fusion, p->precision, &kp, err, sizeof err), "%s", err);
    cr_assert(lib_program_build(&p->g, p->precision, &kp, &lp, err, sizeof err), "%s", err);
    LibKernel k;
    memset(&k, 0, sizeof k);
    if (lp.widen >= 0) k = lp.kernels[lp.widen];
    lib_program_free(&lp);
    kernel_program_free(&kp);
    return k;
}

/* The widen kernels of the tiny training plan compiled with args, and of its validation graph. */
static void plan_widen(const char *args, LibKernel *train, LibKernel *eval) {
    Plan p;
    tiny_plan(args, &p);
    cr_assert(p.eval, "the training plan carries its validation graph");
    *train = widen_of(&p), *eval = widen_of(p.eval);
    plan_free(&p);
}

Test(cast_emul, low_precision_training_plans_carry_the_widening_cast) {
    LibKernel bf, hf, fp, bf_eval, other;
    plan_widen("--imgsz 64 --batch 2 --precision bf16", &bf, &bf_eval);
    plan_widen("--imgsz 64 --batch 2 --precision fp16", &hf, &other);
    plan_widen("--imgsz 64 --batch 2 --precision fp32", &fp, &other);
    cr_expect(bf.entry == LK_CAST && bf.n_operands == 2 && bf.dt[0] == DT_BF16 && bf.dt[1] == DT_F32, "bf16: %s", bf.name);
    cr_expect(hf.entry == LK_CAST && hf.n_operands == 2 && hf.dt[0] == DT_F16 && hf.dt[1] == DT_F32, "fp16: %s", hf.name);
    cr_expect_str_eq(bf.name, "yl_cast_bf16_f32");
    cr_expect_eq(fp.n_operands, 0, "fp32 weight gradients need no widening");
    cr_expect_eq(bf_eval.n_operands, 0, "a validation graph has no weight gradients");
}

Test(cast_emul, every_16_bit_pattern_widens_as_the_host_converts) {
    enum { N = 65536 };
    uint16_t *bits = malloc(N * sizeof *bits);
    float *dev = malloc(N * sizeof *dev), *want = malloc(N * sizeof *want);
    for (int i = 0; i < N; i++) bits[i] = (uint16_t)i;
    const DType types[] = {DT_BF16, DT_F16};
    for (int q = 0; q < 2; q++) {
        LibKernel k = {.entry = LK_CAST, .n_operands = 2, .dt = {types[q], DT_F32}};
        snprintf(k.name, sizeof k.name, "yl_cast_%s_f32", q == 0 ? "bf16" : "f16");
        EmulKernel e = emul_lib_kernel(&k);
        cuda_storage_to_f32(types[q], bits, want, N);
        memset(dev, 0xff, N * sizeof *dev);
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = bits, a.t[1] = dev, a.total = N;
        emul_lib_run(&e, a);
        /* bit for bit: NaN payloads, signed zeros and subnormals included */
        cr_expect(memcmp(dev, want, N * sizeof *dev) == 0, "%s widens every pattern as cuda_storage_to_f32 does", k.name);
        int nan = 0;
        for (int i = 0; i < N; i++) nan += dev[i] != dev[i];
        cr_expect_gt(nan, 0, "%s: the patterns include NaNs, kept NaN", k.name);
    }
    free(bits), free(dev), free(want);
}

Test(cast_emul, compiles_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    expect_lib_kernel_compiles(&(LibKernel){.entry = LK_CAST, .n_operands = 2, .dt = {DT_BF16, DT_F32}, .name = "yl_cast_bf16_f32"});
    expect_lib_kernel_compiles(&(LibKernel){.entry = LK_CAST, .n_operands = 2, .dt = {DT_F16, DT_F32}, .name = "yl_cast_f16_f32"});
}

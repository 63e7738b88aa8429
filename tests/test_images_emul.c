/* tests/test_images_emul.c — the images_u8 library kernel (templates/cuda/lib/cast.cu) without a
 * GPU: every plan with an images input carries it in the images' storage type, and its rendered
 * source, compiled as host C++ and run as an emulated grid, turns a batch's bytes into exactly
 * what the host upload of the loader's value / 255 stores (the plans' types, and bf16 and fp16
 * stores); it compiles with NVRTC. Owns no kernel code. */
#include <stdint.h>

#include "../compiler/kernel_ir.h"
#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../passes/memplan.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/interp.h"
#include "test_emul.h"
#include "test_gpu.h"

/* The images_u8 kernel of the tiny plan at `precision`, and the images' storage type. */
static LibKernel plan_kernel(const char *precision, DType *images_type) {
    char args[128], err[512];
    snprintf(args, sizeof args, "--imgsz 64 --batch 2 --precision %s", precision);
    Plan p;
    tiny_plan(args, &p);
    KProgram kp;
    LibProgram lp;
    cr_assert(kernel_lower(&p.g, &p.fusion, p.precision, &kp, err, sizeof err), "%s", err);
    cr_assert(lib_program_build(&p.g, p.precision, &kp, &lp, err, sizeof err), "%s", err);
    cr_assert_geq(lp.images_u8, 0, "%s: a plan with an images input carries the kernel", precision);
    int images = plan_meta_tensor(&p, "inputs", "images");
    cr_assert_geq(images, 0);
    bool *persistent = calloc((size_t)p.g.n_tensors, sizeof *persistent);
    memplan_mark_persistent(&p.g, persistent);
    *images_type = memplan_storage_dtype(&p.g, images, persistent[images], p.precision);
    free(persistent);
    LibKernel k = lp.kernels[lp.images_u8];
    cr_expect(k.n_operands == 1 && k.dt[0] == *images_type, "%s: the kernel stores the images' type", k.name);
    lib_program_free(&lp);
    kernel_program_free(&kp);
    plan_free(&p);
    return k;
}

/* Kernel q of five: the tiny plan's at fp32, bf16 and fp16 (its images stored
 * in the precision's type), then bf16 and fp16 stores made by hand. */
static LibKernel kernel_of(int q, DType *dt) {
    const char *precisions[] = {"fp32", "bf16", "fp16"};
    const DType stored[] = {DT_F32, DT_BF16, DT_F16};
    if (q < 3) {
        LibKernel k = plan_kernel(precisions[q], dt);
        cr_expect_eq(*dt, stored[q], "%s: the images are stored in the plan's precision", precisions[q]);
        return k;
    }
    *dt = q == 3 ? DT_BF16 : DT_F16;
    LibKernel k = {.entry = LK_IMAGES_U8, .n_operands = 1, .dt = {*dt}};
    snprintf(k.name, sizeof k.name, "yl_images_u8_%s", q == 3 ? "bf16" : "f16");
    return k;
}

Test(images_emul, bytes_divide_into_what_the_host_upload_stores) {
    enum { N = 3 * 256 + 5 };
    uint8_t px[N];
    float host[N];
    for (int i = 0; i < N; i++) px[i] = (uint8_t)(i < 256 ? i : (i * 37 + 11) % 256); /* every value, then a mix */
    for (int i = 0; i < N; i++) host[i] = (float)px[i] / 255.0f;                       /* the loader's table */
    for (int q = 0; q < 5; q++) {
        DType dt;
        LibKernel k = kernel_of(q, &dt);
        EmulKernel e = emul_lib_kernel(&k);
        size_t es = dtype_size(dt);
        unsigned char *dev = calloc(N, es), *want = calloc(N, es);
        cuda_f32_to_storage(dt, host, want, N);
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = dev, a.t[1] = px, a.total = N;
        emul_lib_run(&e, a);
        cr_expect(memcmp(dev, want, N * es) == 0, "%s: the device's conversion equals the host upload's bit for bit", k.name);
        free(dev), free(want);
    }
}

Test(images_emul, compiles_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    for (int q = 0; q < 5; q++) {
        DType dt;
        LibKernel k = kernel_of(q, &dt);
        expect_lib_kernel_compiles(&k);
    }
}

/* tests/test_ema_emul.c — the EMA library kernel (templates/cuda/lib/ema.cu) without a GPU: its
 * rendered source compiled as host C++ and run as an emulated grid must update an EMA exactly as
 * the CPU trainer does (runtime/train/train_state.c's ema_update), so a CUDA plan's EMA and its
 * weights files equal the CPU's arithmetic; and it compiles with NVRTC. Owns no kernel code. */
#include <stdint.h>

#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../runtime/train/schedule.h"
#include "test_emul.h"
#include "test_gpu.h"

static LibKernel ema_kernel(void) {
    LibKernel k = {.entry = LK_EMA, .n_operands = 2, .dt = {DT_F32, DT_F32}};
    snprintf(k.name, sizeof k.name, "yl_ema_f32_f32");
    return k;
}

Test(ema_emul, device_update_equals_the_host_update) {
    LibKernel k = ema_kernel();
    EmulKernel ek = emul_lib_kernel(&k);
    enum { N = 1001 };
    float dev[N], host[N], model[N];
    uint64_t s = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        dev[i] = host[i] = (float)((double)(s >> 40) / 16777216.0 * 2 - 1);
    }
    /* twenty updates as the trainer makes them, the model moving between */
    for (long u = 1; u <= 20; u++) {
        for (int i = 0; i < N; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            model[i] = (float)((double)(s >> 40) / 16777216.0 * 4 - 2);
        }
        float d = (float)ema_decay(u), e = (float)(1.0 - ema_decay(u));
        for (int i = 0; i < N; i++) {
            host[i] *= d;
            host[i] += e * model[i];
        }
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = dev, a.t[1] = model, a.total = N, a.ema_d = d, a.ema_e = e;
        emul_lib_run(&ek, a);
    }
    cr_expect_arr_eq(dev, host, sizeof dev, "the device's EMA equals the host's bit for bit");
}

Test(ema_emul, compiles_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    LibKernel k = ema_kernel();
    expect_lib_kernel_compiles(&k);
}

/* tests/test_nvrtc.c — CUDA source compiles through the dlopen'd NVRTC to a
 * cubin for real architectures and to PTX for virtual ones; compile errors
 * name the kernel and carry NVRTC's log. Skips where NVRTC cannot be loaded;
 * needs no GPU. */
#include "../compiler/nvrtc_build.h"
#include "test_util.h"

static const char *const K_SRC = "extern \"C\" __global__ void k(float *x){x[threadIdx.x]*=2.f;}\n";

static void need_nvrtc(void) {
    char err[2048];
    if (!nvrtc_available(err, sizeof err)) cr_skip_test("NVRTC is not loadable here: %s", err);
}

static void expect_cubin(const char *arch) {
    unsigned char *out = NULL;
    size_t n = 0;
    char err[4096] = "";
    cr_assert(nvrtc_compile("double_k", K_SRC, arch, false, &out, &n, err, sizeof err), "%s: %s", arch, err);
    cr_expect_gt(n, 100, "%s cubin is %zu bytes", arch, n);
    cr_expect(n >= 4 && memcmp(out, "\x7f" "ELF", 4) == 0, "%s cubin starts with the ELF magic", arch);
    free(out);
}

Test(nvrtc, version_is_reported) {
    need_nvrtc();
    int major = 0, minor = -1;
    char err[512] = "";
    cr_assert(nvrtc_version(&major, &minor, err, sizeof err), "%s", err);
    cr_expect(major >= 11 && minor >= 0, "NVRTC %d.%d", major, minor);
    cr_log_info("NVRTC %d.%d", major, minor);
}

Test(nvrtc, options_string_lists_the_fixed_options) {
    char buf[256];
    cr_assert(nvrtc_options_string(buf, sizeof buf));
    cr_expect(strstr(buf, "--std=c++17") && strstr(buf, "-default-device"), "%s", buf);
    cr_expect(!strstr(buf, "gpu-architecture"), "the architecture is the caller's part of a key: %s", buf);
    char small[8];
    cr_expect(!nvrtc_options_string(small, sizeof small), "a too-small buffer is reported");
}

Test(nvrtc, cubin_for_sm_80) {
    need_nvrtc();
    expect_cubin("sm_80");
}

Test(nvrtc, cubin_for_sm_90) {
    need_nvrtc();
    expect_cubin("sm_90");
}

Test(nvrtc, ptx_for_compute_90) {
    need_nvrtc();
    unsigned char *out = NULL;
    size_t n = 0;
    char err[4096] = "";
    cr_assert(nvrtc_compile("double_k", K_SRC, "sm_90", true, &out, &n, err, sizeof err), "%s", err);
    cr_assert(n > 0 && out[n - 1] == 0, "PTX comes NUL-terminated, the NUL counted in its length");
    const char *ptx = (const char *)out;
    cr_expect(strstr(ptx, ".version"), "%s", ptx);
    cr_expect(strstr(ptx, ".target sm_90"), "PTX for the virtual architecture compute_90: %s", ptx);
    cr_expect(strstr(ptx, ".entry k"), "%s", ptx);
    free(out);
}

Test(nvrtc, syntax_error_names_the_program_and_has_the_log) {
    need_nvrtc();
    unsigned char *out = (unsigned char *)"untouched";
    size_t n = 7;
    char err[4096] = "";
    const char *bad = "extern \"C\" __global__ void k(float *x){x[threadIdx.x]*=2.f}\n"; /* no ';' */
    cr_expect(!nvrtc_compile("fused_group_7", bad, "sm_80", false, &out, &n, err, sizeof err));
    cr_expect(out == NULL && n == 0, "no output on failure");
    cr_expect(strstr(err, "fused_group_7"), "%s", err);
    cr_expect(strstr(err, "error"), "%s", err);
    cr_expect(strstr(err, "NVRTC_ERROR_COMPILATION"), "%s", err);
    cr_log_info("%s", err);
}

Test(nvrtc, log_is_truncated_to_errcap) {
    need_nvrtc();
    unsigned char *out = NULL;
    size_t n = 0;
    char err[40];
    memset(err, 'x', sizeof err);
    cr_expect(!nvrtc_compile("trunc", "this is not C++", "sm_80", false, &out, &n, err, sizeof err));
    cr_expect(memchr(err, 0, sizeof err) != NULL, "the message is NUL-terminated within errcap");
}

Test(nvrtc, unsupported_arch_is_named) {
    need_nvrtc();
    unsigned char *out = NULL;
    size_t n = 0;
    char err[2048] = "";
    cr_expect(!nvrtc_compile("double_k", K_SRC, "sm_1", false, &out, &n, err, sizeof err));
    cr_expect(strstr(err, "sm_1") && strstr(err, "not supported") && strstr(err, "sm_80"), "lists what is supported: %s", err);
    cr_expect(strstr(err, "double_k"), "%s", err);
}

Test(nvrtc, malformed_arch_is_rejected_before_nvrtc) {
    unsigned char *out = NULL;
    size_t n = 0;
    char err[512] = "";
    const char *bad[] = {"80", "compute_80", "sm_", "sm_80x", "sm_80aa", NULL};
    for (int i = 0; bad[i]; i++) {
        cr_expect(!nvrtc_compile("k", K_SRC, bad[i], false, &out, &n, err, sizeof err), "%s", bad[i]);
        cr_expect(strstr(err, "bad GPU architecture") && strstr(err, bad[i]), "%s: %s", bad[i], err);
    }
}

Test(nvrtc, bad_override_falls_through_or_is_listed) {
    /* each Criterion test runs in its own process, so nothing is loaded yet */
    const char *old = getenv("YOLOCC_NVRTC");
    char *saved = old ? strdup(old) : NULL;
    setenv("YOLOCC_NVRTC", "/nonexistent/libnvrtc.so", 1);
    char err[4096] = "";
    bool ok = nvrtc_available(err, sizeof err);
    if (saved) setenv("YOLOCC_NVRTC", saved, 1);
    else unsetenv("YOLOCC_NVRTC");
    free(saved);
    if (ok) {
        cr_log_info("the bad override was skipped and a system NVRTC loaded, as the search order says");
        return;
    }
    cr_expect(strstr(err, "/nonexistent/libnvrtc.so") && strstr(err, "libnvrtc.so.13") && strstr(err, "/usr/local/cuda/lib64/libnvrtc.so"), "%s", err);
}

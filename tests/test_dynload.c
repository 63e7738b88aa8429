/* tests/test_dynload.c — CUDA libraries load on demand (DESIGN.md decision
 * 11, issue #6): without libcuda.so.1 a CUDA plan fails with one message
 * naming it; with the toolkit's stub driver and the installed cuDNN,
 * cuBLASLt and NCCL every entry point resolves; a library lacking a symbol is
 * named with the symbol; CPU plans never touch any of it. */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <zlib.h>

#include "../ir/plan_format.h"
#include "../runtime/cuda/dynload.h"
#include "../runtime/target.h"
#include "test_gpu.h"

Test(dynload, missing_driver_named_with_dlerror) {
    CudaLibs L;
    char err[1024] = "";
    CudaLibNames names = {.cuda = "/nonexistent/libcuda.so.1"};
    cr_expect(!cuda_libs_open(&L, &names, false, err, sizeof err));
    cr_expect(strstr(err, "cannot load /nonexistent/libcuda.so.1"), "%s", err);
    cr_expect(strstr(err, "NVIDIA driver"), "%s", err);
    cr_expect(strstr(err, "No such file"), "dlerror() is part of the message: %s", err);
    cr_expect(!strchr(err, '\n'), "one line: %s", err);
    cr_expect(L.h_cuda == NULL && L.cuInit == NULL, "nothing stays open after a failure");
}

Test(dynload, default_names_on_this_machine) {
    CudaLibs L;
    char err[1024] = "";
    if (tu_loadable("libcuda.so.1")) {
        cr_log_info("libcuda.so.1 is present here (a GPU machine); the missing-driver message is checked with a made-up path instead");
        if (cuda_libs_open(&L, NULL, false, err, sizeof err)) cuda_libs_close(&L);
        return;
    }
    cr_expect(!cuda_libs_open(&L, NULL, false, err, sizeof err));
    cr_expect(strstr(err, "libcuda.so.1"), "the message names libcuda: %s", err);
}

Test(dynload, missing_symbol_names_library_and_symbol) {
    CudaLibs L;
    char err[1024] = "";
    /* zlib is a build dependency: a real library without the driver's entry points */
    CudaLibNames names = {.cuda = "libz.so.1"};
    cr_expect(!cuda_libs_open(&L, &names, false, err, sizeof err));
    cr_expect(strstr(err, "libz.so.1") && strstr(err, "has no cuInit"), "%s", err);
}

/* With the toolkit's stub driver, and cuDNN 9, cuBLASLt and NCCL where the
 * machine has them, every pointer of the table resolves; cuInit through the
 * stub then reports that no driver can start. */
Test(dynload, every_entry_point_resolves_against_the_toolkit) {
    bool have = tu_cuda_host_libs() && tu_loadable("libnccl.so.2");
    if (!have) cr_skip_test("no CUDA toolkit stub or no cuDNN 9 / cuBLASLt / NCCL 2 here");
    CudaLibs L;
    char err[1024] = "";
    CudaLibNames names = {.cuda = CUDA_TOOLKIT_STUB};
    cr_assert(cuda_libs_open(&L, &names, true, err, sizeof err), "%s", err);
    int n = cuda_libs_symbol_count(true), resolved = 0;
    cr_expect(n > 60, "the table has %d entries", n);
    cr_expect_eq(cuda_libs_symbol_count(false), n - 11, "NCCL's 11 entries are optional");
    for (int i = 0; i < n; i++) {
        const char *sym;
        bool ok;
        cr_assert(cuda_libs_symbol(&L, i, &sym, &ok));
        cr_expect(ok, "%s did not resolve", sym);
        resolved += ok;
    }
    cr_log_info("resolved %d CUDA entry points (cuBLASLt from %s)", resolved, L.cublaslt_name);
    cr_expect(L.cudnnGetVersion() >= 90000, "cuDNN 9: %zu", L.cudnnGetVersion());
    int v = 0;
    cr_expect(L.ncclGetVersion(&v) == 0 && v >= 20000, "NCCL 2: %d", v);
    int devices = -1;
    cr_expect(!cuda_libs_check_device(&L, &devices, err, sizeof err), "the stub cannot start a device");
    cr_expect(strstr(err, "cuInit failed"), "%s", err);
    cr_expect_eq(devices, 0);
    cuda_libs_close(&L);
    cr_expect(L.h_cuda == NULL && L.cuInit == NULL);
    /* without NCCL the NCCL entries stay empty */
    cr_assert(cuda_libs_open(&L, &names, false, err, sizeof err), "%s", err);
    cr_expect(L.h_nccl == NULL && L.ncclAllReduce == NULL && L.cublasLtMatmul != NULL);
    cuda_libs_close(&L);
}

Test(dynload, target_prepare_reads_the_plan_target) {
    char err[1024] = "";
    const char *cpu[] = {"{\"target\":\"cpu\"}", "{}"};
    for (int i = 0; i < 2; i++) {
        cJSON *m = cJSON_Parse(cpu[i]);
        cr_expect(target_prepare(m, err, sizeof err), "%s: %s", cpu[i], err);
        cJSON_Delete(m);
    }
    cJSON *m = cJSON_Parse("{\"target\":\"tpu\"}");
    cr_expect(!target_prepare(m, err, sizeof err));
    cr_expect(strstr(err, "unknown target 'tpu'"), "%s", err);
    cJSON_Delete(m);
    m = cJSON_Parse("{\"target\":\"cuda\"}");
    if (!tu_loadable("libcuda.so.1")) {
        cr_expect(!target_prepare(m, err, sizeof err), "a CUDA plan without libcuda.so.1 must be refused");
        cr_expect(strstr(err, "CUDA plan") && strstr(err, "libcuda.so.1"), "%s", err);
    }
    cJSON_Delete(m);
}

/* The plan file with META's "target" set to "cuda": META is the first
 * section, so later sections shift by the length change (plan_format.h). */
static void retarget_plan(const char *in, const char *out) {
    size_t len;
    unsigned char *buf = (unsigned char *)tu_slurp(in, &len);
    cr_assert(buf && len > PLAN_HEADER_BYTES + PLAN_SECTIONS * PLAN_ENTRY_BYTES);
    uint32_t count;
    memcpy(&count, buf + 12, 4);
    cr_assert_eq(count, PLAN_SECTIONS);
    uint64_t off0, len0;
    memcpy(&off0, buf + PLAN_HEADER_BYTES + 8, 8);
    memcpy(&len0, buf + PLAN_HEADER_BYTES + 16, 8);
    char *meta = strndup((const char *)buf + off0, (size_t)len0);
    cJSON *m = cJSON_Parse(meta);
    cr_assert(m && cJSON_IsString(cJSON_GetObjectItem(m, "target")), "META has no target");
    cJSON_ReplaceItemInObject(m, "target", cJSON_CreateString("cuda"));
    char *nm = cJSON_PrintUnformatted(m);
    uint64_t nlen = strlen(nm);
    int64_t delta = (int64_t)nlen - (int64_t)len0;
    size_t out_len = len + (size_t)delta;
    unsigned char *o = malloc(out_len);
    memcpy(o, buf, off0);
    memcpy(o + off0, nm, nlen);
    memcpy(o + off0 + nlen, buf + off0 + len0, len - off0 - len0);
    uint64_t size = out_len;
    memcpy(o + 16, &size, 8);
    memcpy(o + PLAN_HEADER_BYTES + 16, &nlen, 8);
    uint32_t crc = (uint32_t)crc32(0L, (const Bytef *)nm, (uInt)nlen);
    memcpy(o + PLAN_HEADER_BYTES + 24, &crc, 4);
    for (uint32_t i = 1; i < count; i++) {
        uint64_t off;
        memcpy(&off, o + PLAN_HEADER_BYTES + i * PLAN_ENTRY_BYTES + 8, 8);
        off = (uint64_t)((int64_t)off + delta);
        memcpy(o + PLAN_HEADER_BYTES + i * PLAN_ENTRY_BYTES + 8, &off, 8);
    }
    FILE *f = fopen(out, "wb");
    cr_assert(f && fwrite(o, 1, out_len, f) == out_len && fclose(f) == 0);
    free(o);
    free(nm);
    free(meta);
    cJSON_Delete(m);
    free(buf);
}

/* Without the driver: the plan is named a CUDA plan and the driver's file
 * named. With one (a GPU machine): the device opens, and the retargeted CPU
 * plan is refused for its kernels, which are for the CPU. */
static void expect_refusal(const char *msg) {
    if (tu_loadable("libcuda.so.1")) {
        cr_expect(strstr(msg, "kernels are for the cpu target"), "%s", msg);
    } else {
        cr_expect(strstr(msg, "CUDA plan"), "%s", msg);
        cr_expect(strstr(msg, "libcuda.so.1"), "%s", msg);
    }
}

Test(dynload, yolort_refuses_a_cuda_plan_without_the_driver) {
    char dir[] = "/tmp/yolocc-cudaplan-XXXXXX", cpu[128], cuda[128], args[512];
    cr_assert(mkdtemp(dir));
    snprintf(cpu, sizeof cpu, "%s/cpu.plan", dir);
    snprintf(cuda, sizeof cuda, "%s/cuda.plan", dir);
    snprintf(args, sizeof args, "models/tiny.yaml --imgsz 64 --batch 1 -o %s", cpu);
    CliResult r = tu_run(args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    retarget_plan(cpu, cuda);
    const char *yolort = getenv("YOLORT_BIN") ? getenv("YOLORT_BIN") : "build/yolort";
    snprintf(args, sizeof args, "train %s --synthetic --steps 1", cuda);
    r = tu_run_bin(yolort, args);
    cr_expect_neq(r.status, 0, "a CUDA plan cannot run here");
    cr_expect_eq(tu_lines(r.err), 1, "one error line: %s", r.err);
    expect_refusal(r.err);
    cr_expect_eq(r.out[0], 0);
    tu_free(&r);
    /* `yolort train --data`: the same one line, before a run directory exists */
    snprintf(args, sizeof args, "datagen %s/data --images 8 --size 64 --classes 3 --seed 1", dir);
    r = tu_run_bin(yolort, args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(args, sizeof args, "train %s --data %s/data/data.yaml --project %s/runs --epochs 1", cuda, dir, dir);
    r = tu_run_bin(yolort, args);
    cr_expect_neq(r.status, 0, "a CUDA plan cannot train here");
    cr_expect_eq(tu_lines(r.err), 1, "one error line: %s", r.err);
    expect_refusal(r.err);
    char runs[160];
    snprintf(runs, sizeof runs, "%s/runs", dir);
    cr_expect(access(runs, F_OK) != 0, "no run directory is left behind");
    tu_free(&r);
    snprintf(args, sizeof args, "rm -rf %s/data", dir);
    cr_expect_eq(system(args), 0);
    /* the untouched plan still runs on the CPU */
    snprintf(args, sizeof args, "train %s --synthetic --steps 1", cpu);
    r = tu_run_bin(yolort, args);
    cr_expect_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    unlink(cpu);
    unlink(cuda);
    rmdir(dir);
}

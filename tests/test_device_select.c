/* tests/test_device_select.c — `--device` as Ultralytics' device=: the
 * normalisation select_device applies, the idle-GPU order of GPUInfo,
 * CUDA_VISIBLE_DEVICES, and yolort's one-line refusals of a device its plan
 * cannot use. Owns no runtime code; on a GPU, test_bench_step.c runs a CUDA
 * plan with --device. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/device_select.h"
#include "test_util.h"

static DeviceChoice parsed(const char *value) {
    DeviceChoice d;
    char err[512];
    cr_assert(device_parse(value, &d, err, sizeof err), "'%s': %s", value, err);
    return d;
}

/* Ultralytics' spellings (select_device): "cuda:0" -> "0", "[0, 1]" and
 * "(0, 1)" -> "0,1", "0,,1" -> "0,1", "cuda" -> "0", "None" and "" -> the
 * default, upper case folded. */
Test(device_select, parses_ultralytics_spellings) {
    struct {
        const char *in, *text;
        bool cpu;
        int n, idle;
    } want[] = {{"cpu", "cpu", true, 0, 0},       {"CPU", "cpu", true, 0, 0},    {"0", "0", false, 1, 0},         {"cuda:0", "0", false, 1, 0},
                {"CUDA:1", "1", false, 1, 0},     {"cuda", "0", false, 1, 0},    {"0,1", "0,1", false, 2, 0},     {"[0, 1]", "0,1", false, 2, 0},
                {"(0, 1)", "0,1", false, 2, 0},   {"'0,1'", "0,1", false, 2, 0}, {"0,,1", "0,1", false, 2, 0},    {"3,1,2", "3,1,2", false, 3, 0},
                {"-1", "-1", false, 1, 1},        {"-1,-1", "-1,-1", false, 2, 2}, {"2,-1", "2,-1", false, 2, 1}, {"", "", false, 0, 0},
                {"none", "", false, 0, 0},        {"None", "", false, 0, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        DeviceChoice d = parsed(want[i].in);
        cr_expect_str_eq(d.text, want[i].text, "'%s'", want[i].in);
        cr_expect_eq(d.cpu, want[i].cpu, "'%s'", want[i].in);
        cr_expect_eq(d.n, want[i].n, "'%s'", want[i].in);
        cr_expect_eq(d.idle, want[i].idle, "'%s'", want[i].in);
    }
    DeviceChoice d = parsed("[2, 0]");
    cr_expect(d.id[0] == 2 && d.id[1] == 0, "the order as given: %d %d", d.id[0], d.id[1]);
}

/* mps, a name, a negative index other than -1, a device named twice, too
 * many, too long: one line each, naming the value. */
Test(device_select, refuses_what_is_not_a_device) {
    const char *bad[] = {"mps", "mps:0", "gpu", "0,x", "-2", "1.5", "0,0", "cuda:1,1", "1234567"};
    const char *says[] = {"Metal", "Metal", "'gpu' is not a device", "'x' is not a device", "'-2' is not a device", "'1.5' is not a device", "device 0 twice",
                          "device 1 twice", "'1234567' is not a device"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        DeviceChoice d;
        char err[512] = "";
        cr_expect(!device_parse(bad[i], &d, err, sizeof err), "'%s' accepted", bad[i]);
        cr_expect(strstr(err, says[i]) && !strchr(err, '\n'), "'%s': %s", bad[i], err);
    }
    char many[400] = "";
    for (int i = 0, k = 0; i <= DEVICE_MAX; i++) k += snprintf(many + k, sizeof many - (size_t)k, "%s%d", i ? "," : "", i);
    DeviceChoice d;
    char err[512] = "";
    cr_expect(!device_parse(many, &d, err, sizeof err) && strstr(err, "more than 64 devices"), "%s", err);
    char longer[300];
    memset(longer, '0', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    cr_expect(!device_parse(longer, &d, err, sizeof err) && strstr(err, "too long"), "%s", err);
}

/* GPUInfo.select_idle_gpu: at least 20% free, least busy first, then most
 * free memory; fewer than asked when fewer qualify. */
Test(device_select, picks_idle_gpus_as_ultralytics) {
    GpuStat s[] = {{.index = 0, .free_mib = 30000, .total_mib = 81559, .util = 50}, {.index = 1, .free_mib = 10000, .total_mib = 81559, .util = 0},
                   {.index = 2, .free_mib = 40000, .total_mib = 81559, .util = 0},  {.index = 3, .free_mib = 60000, .total_mib = 81559, .util = 0},
                   {.index = 4, .free_mib = 70000, .total_mib = 81559, .util = 7}};
    int out[8];
    /* GPU 1 has 12% free: not eligible; utilisation 0 before 7 before 50 */
    cr_expect_eq(device_pick_idle(s, 5, 2, 0.2, out), 2);
    cr_expect(out[0] == 3 && out[1] == 2, "%d %d", out[0], out[1]);
    cr_expect_eq(device_pick_idle(s, 5, 8, 0.2, out), 4);
    cr_expect(out[0] == 3 && out[1] == 2 && out[2] == 4 && out[3] == 0, "%d %d %d %d", out[0], out[1], out[2], out[3]);
    cr_expect_eq(device_pick_idle(s, 5, 1, 0.9, out), 0, "none has 90% free");
    cr_expect_eq(device_pick_idle(s, 0, 1, 0.2, out), 0);
    GpuStat tie[] = {{.index = 5, .free_mib = 100, .total_mib = 100, .util = 0}, {.index = 6, .free_mib = 100, .total_mib = 100, .util = 0}};
    cr_expect(device_pick_idle(tie, 2, 1, 0.2, out) == 1 && out[0] == 5, "a tie keeps NVML's order: %d", out[0]);
}

/* CUDA_VISIBLE_DEVICES from the choice ("" for cpu, as Ultralytics hides
 * the GPUs from a CPU run), and the names a process's ordinals have then. */
Test(device_select, sets_cuda_visible_devices) {
    char err[512], name[32];
    DeviceChoice d = parsed("[3, 1]");
    cr_assert(device_apply(&d, NULL, err, sizeof err), "%s", err);
    cr_expect_str_eq(getenv("CUDA_VISIBLE_DEVICES"), "3,1");
    cr_expect_null(getenv("CUDA_DEVICE_ORDER"), "no idle choice: CUDA's own order stays");
    device_user_name(0, name, sizeof name);
    cr_expect_str_eq(name, "3");
    device_user_name(1, name, sizeof name);
    cr_expect_str_eq(name, "1");
    device_user_name(2, name, sizeof name);
    cr_expect_str_eq(name, "2", "past the list: the ordinal itself");
    d = parsed("cpu");
    cr_assert(device_apply(&d, NULL, err, sizeof err), "%s", err);
    cr_expect_str_eq(getenv("CUDA_VISIBLE_DEVICES"), "");
    device_user_name(0, name, sizeof name);
    cr_expect_str_eq(name, "0");
    setenv("CUDA_VISIBLE_DEVICES", "GPU-8f6e,GPU-1a2b", 1);
    device_user_name(1, name, sizeof name);
    cr_expect_str_eq(name, "GPU-1a2b", "UUIDs as given");
}

/* -1 where NVML cannot be asked: a warning, the entry dropped (Ultralytics
 * then takes the default device), CUDA_VISIBLE_DEVICES left alone. */
Test(device_select, idle_choice_without_nvml_drops_the_entry) {
    GpuStat s[4];
    char why[512], err[512];
    if (nvml_gpu_stats(s, 4, why, sizeof why) >= 0) cr_skip_test("NVML answers here: the GPU suite's bench test covers -1");
    cr_expect(strstr(why, "libnvidia-ml.so.1") || strstr(why, "nvml"), "%s", why);
    unsetenv("CUDA_VISIBLE_DEVICES");
    char log_path[] = "/tmp/yolocc-device-XXXXXX";
    int fd = mkstemp(log_path);
    cr_assert(fd >= 0);
    FILE *log = fdopen(fd, "w");
    DeviceChoice d = parsed("-1");
    cr_assert(device_apply(&d, log, err, sizeof err), "%s", err);
    fclose(log);
    char *text = tu_slurp(log_path, NULL);
    unlink(log_path);
    cr_expect(strstr(text, "Searching for 1 idle GPUs with free memory >= 20.0%") && strstr(text, "NVML stats unavailable"), "%s", text);
    free(text);
    cr_expect(d.n == 0 && !d.cpu, "nothing chosen: the default");
    cr_expect_null(getenv("CUDA_VISIBLE_DEVICES"));
    d = parsed("2,-1");
    cr_assert(device_apply(&d, NULL, err, sizeof err), "%s", err);
    cr_expect_str_eq(getenv("CUDA_VISIBLE_DEVICES"), "2");
    cr_expect_null(getenv("CUDA_DEVICE_ORDER"), "no GPU chosen by NVML's numbering");
}

static CliResult yolort(const char *args) { return tu_run_bin(tu_env_bin("YOLORT_BIN", "build/yolort"), args); }

/* The plan decides where it runs, so a device it cannot use is one line and
 * exit 2 before any work: CUDA devices for a CPU plan (naming --ranks for a
 * list), cpu for a CUDA plan, a device a launcher's local rank lacks, a
 * --ranks that disagrees with the list, a bad or repeated option. --device
 * cpu runs a CPU plan, and -1 without NVML runs it on the default. */
Test(device_select, yolort_refuses_a_device_its_plan_cannot_use) {
    char dir[] = "/tmp/yolocc-device-XXXXXX", cmd[2048];
    cr_assert(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "models/tiny.yaml --imgsz 64 --batch 2 -o %s/cpu.plan", dir);
    CliResult c = tu_run_bin(tu_env_bin("YOLOCC_FAST_BIN", "build/yolocc"), cmd);
    cr_assert_eq(c.status, 0, "%s", c.err);
    tu_free(&c);
    struct {
        const char *args, *says;
    } bad[] = {{"train %s/cpu.plan --synthetic --steps 1 --device 0", "--device 0 names CUDA devices, but cpu.plan is a CPU plan: run it with --device cpu"},
               {"train %s/cpu.plan --synthetic --steps 1 --device=cuda:0,1", "(on 2 ranks: --ranks 2)"},
               {"predict %s/cpu.plan --weights w.safetensors --source x.jpg --device 1", "cpu.plan is a CPU plan"},
               {"bench %s/cpu.plan --device '[0]' --json", "cpu.plan is a CPU plan"},
               {"val %s/cpu.plan --weights w.safetensors --data d.yaml --device mps", "Apple's Metal"},
               {"train %s/cpu.plan --synthetic --device gpu0", "'gpu0' is not a device"},
               {"train %s/cpu.plan --synthetic --device 0,1 --ranks 3", "--ranks says 3"},
               {"train %s/cpu.plan --synthetic --device cpu --device=cpu", "--device is given twice"},
               {"train %s/cpu.plan --synthetic --device", "--device needs a value"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, bad[i].args, dir);
        CliResult r = yolort(args);
        cr_expect(r.status == 2 && strstr(r.err, bad[i].says) && tu_lines(r.err) == 1 && !r.out[0], "yolort %s: exit %d: %s%s", args, r.status, r.out, r.err);
        tu_free(&r);
    }
    snprintf(cmd, sizeof cmd, "RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 %s train %s/cpu.plan --synthetic --steps 1 --device 0", tu_env_bin("YOLORT_BIN", "build/yolort"), dir);
    CliResult r = tu_run_bin("", cmd);
    cr_expect(r.status == 2 && strstr(r.err, "names only 1 CUDA device, but this is local rank 1 (torchrun)") && tu_lines(r.err) == 1, "%s", r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "train %s/cpu.plan --synthetic --steps 1 --json --device CPU", dir);
    r = yolort(cmd);
    cr_expect(r.status == 0 && strstr(r.out, "\"step\": 1"), "%s", r.err);
    tu_free(&r);
    GpuStat s[4];
    char why[512];
    if (nvml_gpu_stats(s, 4, why, sizeof why) < 0) {
        snprintf(cmd, sizeof cmd, "train %s/cpu.plan --synthetic --steps 1 --device -1", dir);
        r = yolort(cmd);
        cr_expect(r.status == 0 && strstr(r.out, "NVML stats unavailable") && strstr(r.out, "step    1/1"), "%s%s", r.out, r.err);
        tu_free(&r);
    }
    snprintf(cmd, sizeof cmd, "%s/cpu.plan", dir);
    unlink(cmd);
    rmdir(dir);
}

/* --device cpu on a CPU plan runs each command as without it, the option
 * taken out before the command's own parser: train, val and predict. */
Test(device_select, yolort_runs_a_cpu_plan_with_device_cpu) {
    char dir[] = "/tmp/yolocc-device-XXXXXX", cmd[2048];
    cr_assert(mkdtemp(dir));
    tu_tiny_data_and_plan(dir, "--images 8 --size 64 --classes 3", "--imgsz 64 --batch 2", "cpu.plan");
    snprintf(cmd, sizeof cmd, "train %s/cpu.plan --device cpu --synthetic --steps 1 --save %s/w.safetensors", dir, dir);
    CliResult r = yolort(cmd);
    cr_expect(r.status == 0 && strstr(r.out, "step    1/1"), "%s", r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "val %s/cpu.plan --weights %s/w.safetensors --data %s/data/data.yaml --device=CPU --no-plots", dir, dir, dir);
    r = yolort(cmd);
    cr_expect(r.status == 0 && strstr(r.out, "mAP50-95"), "%s%s", r.out, r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "predict %s/cpu.plan --weights %s/w.safetensors --source %s/data/images/val --no-save --device cpu --project %s/runs", dir, dir, dir, dir);
    r = yolort(cmd);
    cr_expect(r.status == 0 && strstr(r.out, "image 1/"), "%s%s", r.out, r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

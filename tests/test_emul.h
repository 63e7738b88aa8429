/* tests/test_emul.h — builds rendered CUDA sources as host C++ (with
 * tests/cuda_host_shim.h) into a loaded shared object, for the suites that
 * run kernels as emulated grids (test_cuda_emul.c, test_detloss_emul.c). */
#ifndef YOLOCC_TEST_EMUL_H
#define YOLOCC_TEST_EMUL_H
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>

#include "../compiler/lib_kernels.h"
#include "../runtime/ref_kernels.h"
#include "test_util.h"

extern char **environ;

/* $CXX (else c++) split at blanks into argv; words backs the strings */
static inline int emul_cxx_words(char *words, size_t cap, char **argv, int max) {
    const char *cxx = getenv("CXX");
    snprintf(words, cap, "%s", cxx && *cxx ? cxx : "c++");
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(words, " \t", &save); w && n < max; w = strtok_r(NULL, " \t", &save)) argv[n++] = w;
    return n;
}

/* Runs argv with stdout and stderr into log; its exit status, or -1 when it could not run. */
static inline int emul_run_logged(char *const argv[], const char *log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), st = 0;
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Compiles text (len bytes of C++: rendered kernels) with the host shim into
 * a shared object and loads it. Skips the test when no C++ compiler runs;
 * fails it on a compile error with the compiler's output (what names the
 * sources). */
static inline void *emul_build(const char *text, size_t len, const char *what) {
    char dir[] = "/tmp/yolocc-emul-XXXXXX", src[64], so[64], log[64], shim[PATH_MAX], words[512], *argv[40];
    cr_assert(mkdtemp(dir));
    cr_assert(realpath("tests/cuda_host_shim.h", shim), "tests/cuda_host_shim.h: %s", strerror(errno));
    snprintf(src, sizeof src, "%s/k.cpp", dir), snprintf(so, sizeof so, "%s/k.so", dir), snprintf(log, sizeof log, "%s/cxx.log", dir);
    FILE *f = fopen(src, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
    int n = emul_cxx_words(words, sizeof words, argv, 16);
    const char *flags[] = {"-x", "c++", "-std=c++17", "-O1", "-fPIC", "-shared", "-Wall", "-Wno-unused-function", "-Wno-sign-compare", "-include", shim, "-o", so, src};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) argv[n++] = (char *)flags[i];
    argv[n] = NULL;
    int st = emul_run_logged(argv, log);
    char *out = tu_slurp(log, NULL);
    void *h = st == 0 ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
    const char *dl = st == 0 && !h ? dlerror() : "";
    unlink(src), unlink(so), unlink(log), rmdir(dir);
    if (st == -1) cr_skip_test("no C++ compiler (%s): the CUDA source cannot be compiled for the host", argv[0]);
    cr_assert_eq(st, 0, "%s failed (status %d) on %s:\n%.3000s", argv[0], st, what, out ? out : "");
    cr_assert_not_null(h, "dlopen: %s", dl);
    if (out && *out) cr_log_info("compiler output: %.2000s", out);
    free(out);
    return h;
}

/* The grid of the grid-stride emulations: each emulated thread strides over the elements the others skip. */
enum { EMU_GRID = 2, EMU_BLOCK = 3 };

/* The host object's entry points (tests/cuda_host_shim.h): the emulated
 * thread the next call runs as, and a grid of real blocks (one POSIX thread
 * per CUDA thread) that all call call(fn, args). */
typedef void (*ThreadFn)(unsigned, unsigned, unsigned, unsigned);
typedef int (*GridFn)(void (*call)(void *, const void *), void *fn, const void *args, unsigned gx, unsigned gy, unsigned block);

static inline void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    cr_assert_not_null(p, "kernel %s is not in the emulation object", name);
    return p;
}

/* Every thread of a grid x block grid in turn (the kernels are grid-stride). */
static inline void run_grid(void *h, void (*call)(void *fn, const void *args), void *fn, const void *args, unsigned grid, unsigned block) {
    ThreadFn thread = (ThreadFn)sym(h, "yk_emu_thread");
    for (unsigned bi = 0; bi < grid; bi++)
        for (unsigned ti = 0; ti < block; ti++) {
            thread(grid, block, bi, ti);
            call(fn, args);
        }
}

/* A library kernel built for the host: its entry and the emulated-thread setter. */
typedef struct EmulKernel {
    void (*thread)(unsigned grid, unsigned block, unsigned b, unsigned t);
    void (*fn)(YlArgs a);
} EmulKernel;

/* Kernel `name` of an object emul_build loaded. */
static inline EmulKernel emul_kernel_in(void *h, const char *name) {
    EmulKernel e = {(void (*)(unsigned, unsigned, unsigned, unsigned))dlsym(h, "yk_emu_thread"), (void (*)(YlArgs))dlsym(h, name)};
    cr_assert(e.thread && e.fn, "%s: the built object has its entry and yk_emu_thread", name);
    return e;
}

/* Renders library kernel k and builds it with emul_build. */
static inline EmulKernel emul_lib_kernel(const LibKernel *k) {
    char *src = lib_kernel_render(k);
    cr_assert_not_null(src, "%s", k->name);
    void *h = emul_build(src, strlen(src), k->name);
    free(src);
    return emul_kernel_in(h, k->name);
}

/* Runs a grid-stride kernel over a as 2 blocks of 3 threads: each emulated
 * thread strides over the elements the others skip. */
static inline void emul_lib_run(const EmulKernel *e, YlArgs a) {
    for (unsigned b = 0; b < EMU_GRID; b++)
        for (unsigned t = 0; t < EMU_BLOCK; t++) e->thread(EMU_GRID, EMU_BLOCK, b, t), e->fn(a);
}

/* The logical (NCHW) offset within an image of stored offset r: channels
 * last (cl) with c channels over planes of `plane` elements, else r. */
static inline int64_t emul_logical(bool cl, int64_t c, int64_t plane, int64_t r) { return cl ? (r % c) * plane + r / c : r; }

/* A packed tensor of shape s in ref, stored channels last, reordered in
 * place into NCHW as the reference kernels read it. */
static inline void emul_to_nchw(float *ref, const Shape *s) {
    Tensor x = {.shape = *s, .channels_last = true};
    cr_assert(ref_channels_last_to_nchw(&x, ref), "out of memory");
}

#endif

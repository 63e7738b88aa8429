/* compiler/nvrtc_build.c — dlopen of NVRTC and one compile to cubin or PTX.
 * Owns the NVRTC symbol table and option list; must not include nvrtc.h (the
 * build works without /usr/local/cuda) or keep anything but the handle. */
#include "nvrtc_build.h"
#include "words.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/diag.h"

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers must be object-pointer sized (POSIX dlsym)");

/* nvrtc.h's types, declared here: nvrtcResult is an enum (int-sized), 0 = NVRTC_SUCCESS */
typedef int NvrtcResult;
typedef struct NvrtcProgSt *NvrtcProgram;

typedef struct Nvrtc {
    void *h;
    const char *(*nvrtcGetErrorString)(NvrtcResult);
    NvrtcResult (*nvrtcVersion)(int *, int *);
    NvrtcResult (*nvrtcGetNumSupportedArchs)(int *);
    NvrtcResult (*nvrtcGetSupportedArchs)(int *);
    NvrtcResult (*nvrtcCreateProgram)(NvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    NvrtcResult (*nvrtcDestroyProgram)(NvrtcProgram *);
    NvrtcResult (*nvrtcCompileProgram)(NvrtcProgram, int, const char *const *);
    NvrtcResult (*nvrtcGetPTXSize)(NvrtcProgram, size_t *);
    NvrtcResult (*nvrtcGetPTX)(NvrtcProgram, char *);
    NvrtcResult (*nvrtcGetCUBINSize)(NvrtcProgram, size_t *);
    NvrtcResult (*nvrtcGetCUBIN)(NvrtcProgram, char *);
    NvrtcResult (*nvrtcGetProgramLogSize)(NvrtcProgram, size_t *);
    NvrtcResult (*nvrtcGetProgramLog)(NvrtcProgram, char *);
} Nvrtc;

static Nvrtc N;

#define F(name) {#name, offsetof(Nvrtc, name)}
static const struct {
    const char *name;
    size_t off;
} SYMS[] = {
    F(nvrtcGetErrorString), F(nvrtcVersion), F(nvrtcGetNumSupportedArchs), F(nvrtcGetSupportedArchs), F(nvrtcCreateProgram),
    F(nvrtcDestroyProgram), F(nvrtcCompileProgram), F(nvrtcGetPTXSize), F(nvrtcGetPTX), F(nvrtcGetCUBINSize), F(nvrtcGetCUBIN),
    F(nvrtcGetProgramLogSize), F(nvrtcGetProgramLog),
};
#undef F

/* Every compile passes exactly these (plus the architecture), and cache keys
 * hash the same list through nvrtc_options_string, so the two cannot drift. */
static const char *const OPTIONS[] = {"--std=c++17", "-default-device"};
enum { N_OPTIONS = sizeof OPTIONS / sizeof OPTIONS[0] };

bool nvrtc_options_string(char *buf, int cap) { return words_join(OPTIONS, N_OPTIONS, buf, cap); }

/* Resolves the table from h into a scratch copy, so a library lacking a
 * symbol leaves N untouched; false with the symbol named in why. */
static bool resolve(void *h, const char *name, char *why, size_t whycap) {
    Nvrtc t = {.h = h};
    for (size_t i = 0; i < sizeof SYMS / sizeof SYMS[0]; i++) {
        dlerror();
        void *p = dlsym(h, SYMS[i].name);
        if (!p) {
            snprintf(why, whycap, "%s has no %s", name, SYMS[i].name);
            return false;
        }
        memcpy((char *)&t + SYMS[i].off, &p, sizeof p);
    }
    N = t;
    return true;
}

bool nvrtc_available(char *err, int errcap) {
    if (N.h) return true;
    const char *env = getenv("YOLOCC_NVRTC");
    const char *names[] = {env && *env ? env : NULL, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"};
    char tried[2048] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!names[i]) continue;
        char why[512];
        dlerror();
        /* never unloaded: NVRTC keeps static state and threads that outlive any one compile */
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h && resolve(h, names[i], why, sizeof why)) return true;
        if (h) (void)dlclose(h); /* NODELETE: nothing is unmapped, nothing to undo on failure */
        else {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : names[i]);
        }
        int n = snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", why);
        if (n > 0) used = used + (size_t)n < sizeof tried ? used + (size_t)n : sizeof tried - 1;
    }
    return errf(err, errcap, "cannot load NVRTC, which CUDA code generation needs (set YOLOCC_NVRTC to libnvrtc.so's path): %s", tried);
}

bool nvrtc_version(int *major, int *minor, char *err, int errcap) {
    if (!nvrtc_available(err, errcap)) return false;
    NvrtcResult r = N.nvrtcVersion(major, minor);
    if (r != 0) return errf(err, errcap, "nvrtcVersion failed: %s", N.nvrtcGetErrorString(r));
    return true;
}

/* "sm_80" -> 80 and suffix "" ; "sm_90a" -> 90 and "a". */
static bool parse_arch(const char *arch, int *num, const char **suffix) {
    if (!arch || strncmp(arch, "sm_", 3) != 0) return false;
    const char *p = arch + 3;
    int v = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++) v = v * 10 + (*p - '0');
    if (digits == 0 || (*p && !((*p == 'a' || *p == 'f') && !p[1]))) return false;
    *num = v;
    *suffix = p;
    return true;
}

/* An unsupported architecture is named with the ones this NVRTC has, rather
 * than NVRTC's bare "invalid option". */
static bool check_supported(const char *name, const char *arch, int num, char *err, int errcap) {
    int n = 0;
    NvrtcResult r = N.nvrtcGetNumSupportedArchs(&n);
    if (r != 0 || n <= 0) return errf(err, errcap, "nvrtc: %s: nvrtcGetNumSupportedArchs failed: %s", name, N.nvrtcGetErrorString(r));
    int *list = malloc((size_t)n * sizeof *list);
    if (!list) return errf(err, errcap, "nvrtc: %s: out of memory", name);
    r = N.nvrtcGetSupportedArchs(list);
    if (r != 0) {
        free(list);
        return errf(err, errcap, "nvrtc: %s: nvrtcGetSupportedArchs failed: %s", name, N.nvrtcGetErrorString(r));
    }
    bool found = false;
    char have[512] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        found |= list[i] == num;
        int w = snprintf(have + used, sizeof have - used, "%ssm_%d", i ? " " : "", list[i]);
        if (w < 0 || used + (size_t)w >= sizeof have) {
            have[used] = 0; /* drop a half-written entry: the list is a hint */
            continue;
        }
        used += (size_t)w;
    }
    free(list);
    if (found) return true;
    int major = 0, minor = 0;
    (void)N.nvrtcVersion(&major, &minor); /* only decorates the message; 0.0 if it fails */
    return errf(err, errcap, "nvrtc: cannot compile %s: GPU architecture %s is not supported by NVRTC %d.%d (it supports %s)", name, arch, major,
                minor, have);
}

/* Fails with NVRTC's result name and, when it has one, the program log. */
static bool fail_with_log(NvrtcProgram prog, const char *name, const char *arch, const char *what, NvrtcResult r, char *err, int errcap) {
    size_t n = 0;
    char *log = NULL;
    if (N.nvrtcGetProgramLogSize(prog, &n) == 0 && n > 1 && (log = malloc(n)) && N.nvrtcGetProgramLog(prog, log) == 0) {
        log[n - 1] = 0;
        for (size_t k = strlen(log); k > 0 && (log[k - 1] == '\n' || log[k - 1] == ' '); k--) log[k - 1] = 0;
    } else if (log) {
        log[0] = 0;
    }
    errf(err, errcap, "nvrtc: cannot compile %s for %s: %s: %s%s%s", name, arch, what, N.nvrtcGetErrorString(r), log && *log ? "\n" : "",
         log ? log : "");
    free(log);
    return false;
}

bool nvrtc_compile(const char *program_name, const char *src, const char *arch, bool ptx, unsigned char **out, size_t *out_len, char *err,
                   int errcap) {
    *out = NULL;
    *out_len = 0;
    const char *name = program_name && *program_name ? program_name : "(unnamed kernel)";
    int num;
    const char *suffix;
    if (!parse_arch(arch, &num, &suffix))
        return errf(err, errcap, "nvrtc: cannot compile %s: bad GPU architecture \"%s\": expected sm_ and the compute capability, e.g. sm_80 or sm_90a",
                    name, arch ? arch : "(null)");
    char why[1024];
    if (!nvrtc_available(why, sizeof why)) return errf(err, errcap, "nvrtc: cannot compile %s: %s", name, why);
    if (!check_supported(name, arch, num, err, errcap)) return false;

    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s_%d%s", ptx ? "compute" : "sm", num, suffix);
    const char *opts[N_OPTIONS + 1];
    for (int i = 0; i < N_OPTIONS; i++) opts[i] = OPTIONS[i];
    opts[N_OPTIONS] = arch_opt;

    NvrtcProgram prog = NULL;
    NvrtcResult r = N.nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
    if (r != 0) return errf(err, errcap, "nvrtc: cannot create program %s: %s", name, N.nvrtcGetErrorString(r));
    bool ok = false;
    r = N.nvrtcCompileProgram(prog, N_OPTIONS + 1, opts);
    if (r != 0) {
        fail_with_log(prog, name, arch, "compile failed", r, err, errcap);
        goto done;
    }
    size_t n = 0;
    r = ptx ? N.nvrtcGetPTXSize(prog, &n) : N.nvrtcGetCUBINSize(prog, &n);
    if (r != 0 || n == 0) {
        if (r != 0) fail_with_log(prog, name, arch, ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize", r, err, errcap);
        else errf(err, errcap, "nvrtc: %s for %s produced an empty %s", name, arch, ptx ? "PTX" : "cubin");
        goto done;
    }
    unsigned char *buf = malloc(n);
    if (!buf) {
        errf(err, errcap, "nvrtc: %s: out of memory for %zu bytes of %s", name, n, ptx ? "PTX" : "cubin");
        goto done;
    }
    r = ptx ? N.nvrtcGetPTX(prog, (char *)buf) : N.nvrtcGetCUBIN(prog, (char *)buf);
    if (r != 0) {
        free(buf);
        fail_with_log(prog, name, arch, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", r, err, errcap);
        goto done;
    }
    *out = buf;
    *out_len = n;
    ok = true;
done:
    /* a failed destroy leaks one program and changes nothing the caller sees */
    (void)N.nvrtcDestroyProgram(&prog);
    return ok;
}

/* compiler/codegen.c — lower, render, compile through the cache, pack the
 * KERNELS section. CPU: all kernels in one C unit built into one shared
 * object. CUDA: one NVRTC program per kernel (generated, and the library
 * kernels of compiler/lib_kernels.h), a cubin per architecture plus PTX of
 * the newest one. Must not execute anything it builds. */
#include "codegen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cc_build.h"
#include "kcache.h"
#include "lib_kernels.h"
#include "kernel_render.h"
#include "nvrtc_build.h"
#include "version.h"

const char *codegen_target_name(CodegenTarget t) { return t == TARGET_CUDA ? "cuda" : "cpu"; }

bool codegen_parse_archs(const char *s, CodegenOptions *o, char *err, int errcap) {
    o->n_archs = 0;
    const char *p = s;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int v = 0, used = 0;
        char one[16];
        if (n == 0 || n >= sizeof one) return snprintf(err, (size_t)errcap, "--arch: expected sm_NN[,sm_NN...], got '%s'", s), false;
        memcpy(one, p, n);
        one[n] = 0;
        if (sscanf(one, "sm_%d%n", &v, &used) != 1 || used != (int)n || v < 50 || v > 199)
            return snprintf(err, (size_t)errcap, "--arch: '%s' is not an architecture like sm_80 or sm_90", one), false;
        for (int i = 0; i < o->n_archs; i++)
            if (strcmp(o->archs[i], one) == 0) return snprintf(err, (size_t)errcap, "--arch: '%s' is listed twice", one), false;
        if (o->n_archs == CODEGEN_MAX_ARCHS) return snprintf(err, (size_t)errcap, "--arch: at most %d architectures", CODEGEN_MAX_ARCHS), false;
        snprintf(o->archs[o->n_archs++], sizeof o->archs[0], "%s", one);
        p += n;
        if (*p == ',') p++;
    }
    if (!o->n_archs) return snprintf(err, (size_t)errcap, "--arch: no architecture given"), false;
    return true;
}

/* Growing byte buffer for the blobs. */
typedef struct Blobs {
    unsigned char *b;
    size_t len, cap;
} Blobs;

static bool blobs_add(Blobs *bl, const unsigned char *p, size_t n, size_t *off) {
    if (bl->len + n > bl->cap) {
        size_t cap = bl->cap ? bl->cap : 1 << 16;
        while (cap < bl->len + n) cap *= 2;
        unsigned char *q = realloc(bl->b, cap);
        if (!q) return false;
        bl->b = q;
        bl->cap = cap;
    }
    memcpy(bl->b + bl->len, p, n);
    *off = bl->len;
    bl->len += n;
    return true;
}

static bool write_text(const char *dir, const char *name, const char *text, char *err, int errcap) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return snprintf(err, (size_t)errcap, "--emit-src: cannot create %s: %s", dir, strerror(errno)), false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return snprintf(err, (size_t)errcap, "--emit-src: cannot write %s: %s", path, strerror(errno)), false;
    bool ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) snprintf(err, (size_t)errcap, "--emit-src: write to %s failed", path);
    return ok;
}

/* The artifact for (source, tool, options, arch): from the cache or built. */
typedef bool (*BuildFn)(const char *name, const char *src, const char *arch, bool ptx, unsigned char **out, size_t *len, char *err, int errcap);

static bool build_cc(const char *name, const char *src, const char *arch, bool ptx, unsigned char **out, size_t *len, char *err, int errcap) {
    (void)arch;
    (void)ptx;
    return cc_build_shared(src, name, out, len, err, errcap);
}

static bool cached_build(BuildFn fn, const char *tool, const char *options, const char *name, const char *src, const char *arch, bool ptx,
                         unsigned char **out, size_t *len, CodegenResult *r, char *err, int errcap) {
    const char *kind = ptx ? "ptx" : "bin";
    const void *parts[] = {src, tool, options, arch, kind, YOLOCC_VERSION};
    size_t lens[] = {strlen(src), strlen(tool), strlen(options), strlen(arch), strlen(kind), strlen(YOLOCC_VERSION)};
    char key[65];
    kcache_key(parts, lens, 6, key);
    if (kcache_get(key, out, len)) {
        r->cached++;
        return true;
    }
    if (!fn(name, src, arch, ptx, out, len, err, errcap)) return false;
    r->compiled++;
    char why[256];
    if (!kcache_put(key, *out, *len, why, sizeof why)) fprintf(stderr, "yolocc: warning: kernel cache: %s\n", why);
    return true;
}

static void progress(int done, int total, const CodegenResult *r) {
    if (!isatty(2)) return;
    fprintf(stderr, "\rcodegen: %d/%d kernels (%d compiled, %d cached)%s", done, total, r->compiled, r->cached, done == total ? "\n" : "");
}

static void source_sha256(const char *src, char hex[65]) {
    const void *part[] = {src};
    size_t plen[] = {strlen(src)};
    kcache_key(part, plen, 1, hex);
}

static bool build_cpu(const KProgram *kp, const CodegenOptions *o, cJSON *idx, Blobs *bl, CodegenResult *r, char *err, int errcap) {
    char *src = kernel_render_c_unit(kp, true);
    if (!src) return snprintf(err, (size_t)errcap, "rendering C kernels failed (a template is missing)"), false;
    char hex[65], tool[256] = "cc", opts[512] = "";
    source_sha256(src, hex);
    cc_version(tool, sizeof tool);
    cc_options_string(opts, sizeof opts);
    char fname[128];
    snprintf(fname, sizeof fname, "%s_kernels.c", o->tag ? o->tag : "plan");
    if (o->emit_src_dir && !write_text(o->emit_src_dir, fname, src, err, errcap)) return free(src), false;
    unsigned char *so = NULL;
    size_t so_len = 0, off = 0;
    bool ok = cached_build(build_cc, tool, opts, fname, src, "host", false, &so, &so_len, r, err, errcap);
    free(src);
    if (!ok) return false;
    ok = blobs_add(bl, so, so_len, &off);
    free(so);
    if (!ok) return snprintf(err, (size_t)errcap, "out of memory"), false;
    cJSON_AddStringToObject(idx, "source_sha256", hex);
    cJSON_AddStringToObject(idx, "compiler", tool);
    cJSON *so_j = cJSON_AddObjectToObject(idx, "so");
    cJSON_AddNumberToObject(so_j, "offset", (double)off);
    cJSON_AddNumberToObject(so_j, "bytes", (double)so_len);
    cJSON *ks = cJSON_AddArrayToObject(idx, "kernels");
    for (int i = 0; i < kp->n_kernels; i++) {
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "name", kp->kernels[i].name);
        cJSON_AddStringToObject(k, "skeleton", kernel_skel_name(kp->kernels[i].skel));
        cJSON_AddItemToArray(ks, k);
    }
    return true;
}

/* One CUDA program: a cubin per architecture plus PTX of the newest, through
 * the cache, appended to the blobs; its index entry, or NULL with err. */
static cJSON *build_cuda_one(const char *name, const char *src, const CodegenOptions *o, const char *tool, const char *opts, Blobs *bl, CodegenResult *r,
                             char *err, int errcap) {
    /* PTX of the newest architecture: what the driver JIT-compiles on GPUs newer than every cubin */
    int newest = 0;
    for (int a = 1; a < o->n_archs; a++)
        if (atoi(o->archs[a] + 3) > atoi(o->archs[newest] + 3)) newest = a;
    cJSON *kj = cJSON_CreateObject(), *archs = cJSON_AddArrayToObject(kj, "archs"), *blobs = cJSON_CreateArray();
    cJSON_AddStringToObject(kj, "name", name);
    cJSON_AddItemToObject(kj, "blobs", blobs);
    double cubin_bytes = 0;
    for (int a = 0; a <= o->n_archs; a++) {
        bool ptx = a == o->n_archs;
        const char *arch = o->archs[ptx ? newest : a];
        unsigned char *bin = NULL;
        size_t len = 0, off = 0;
        if (!cached_build(nvrtc_compile, tool, opts, name, src, arch, ptx, &bin, &len, r, err, errcap)) return cJSON_Delete(kj), NULL;
        bool ok = blobs_add(bl, bin, len, &off);
        free(bin);
        if (!ok) return cJSON_Delete(kj), snprintf(err, (size_t)errcap, "out of memory"), NULL;
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "kind", ptx ? "ptx" : "cubin");
        cJSON_AddStringToObject(b, "arch", arch);
        cJSON_AddNumberToObject(b, "offset", (double)off);
        cJSON_AddNumberToObject(b, "bytes", (double)len);
        cJSON_AddItemToArray(blobs, b);
        if (ptx) cJSON_AddNumberToObject(kj, "ptx_bytes", (double)len);
        else cubin_bytes += (double)len, cJSON_AddItemToArray(archs, cJSON_CreateString(arch));
    }
    cJSON_AddNumberToObject(kj, "cubin_bytes", cubin_bytes);
    return kj;
}

/* Generated kernels under "kernels"; the library kernels the program's
 * library launches use (compiler/lib_kernels.h) under "library". Library
 * sources are not written to --emit-src: they are templates, not generated. */
static bool build_cuda(const Graph *g, const KProgram *kp, const CodegenOptions *o, cJSON *idx, Blobs *bl, CodegenResult *r, char *err, int errcap) {
    int major = 0, minor = 0;
    char tool[64], opts[512] = "";
    if (!nvrtc_available(err, errcap) || !nvrtc_version(&major, &minor, err, errcap)) return false;
    snprintf(tool, sizeof tool, "nvrtc %d.%d", major, minor);
    nvrtc_options_string(opts, sizeof opts);
    cJSON_AddStringToObject(idx, "compiler", tool);
    LibProgram lp;
    if (!lib_program_build(g, kp->precision, kp, &lp, err, errcap)) return false;
    r->n_library = lp.n_kernels;
    int total = kp->n_kernels + lp.n_kernels;
    cJSON *ks = cJSON_AddArrayToObject(idx, "kernels"), *ls = cJSON_AddArrayToObject(idx, "library");
    for (int i = 0; i < total; i++) {
        bool lib = i >= kp->n_kernels;
        const Kernel *k = lib ? NULL : &kp->kernels[i];
        const LibKernel *lk = lib ? &lp.kernels[i - kp->n_kernels] : NULL;
        const char *name = lib ? lk->name : k->name;
        char *src = lib ? lib_kernel_render(lk) : kernel_render_cuda(k);
        if (!src) return lib_program_free(&lp), snprintf(err, (size_t)errcap, "rendering CUDA kernel %s failed (a template is missing)", name), false;
        char fname[64];
        snprintf(fname, sizeof fname, "%s.cu", name);
        if (!lib && o->emit_src_dir && !write_text(o->emit_src_dir, fname, src, err, errcap)) return free(src), lib_program_free(&lp), false;
        cJSON *kj = build_cuda_one(name, src, o, tool, opts, bl, r, err, errcap);
        free(src);
        if (!kj) return lib_program_free(&lp), false;
        cJSON_AddStringToObject(kj, "skeleton", lib ? "library" : kernel_skel_name(k->skel));
        cJSON_AddItemToArray(lib ? ls : ks, kj);
        progress(i + 1, total, r);
    }
    lib_program_free(&lp);
    return true;
}

bool codegen_build(const Graph *g, const Fusion *f, Precision p, const CodegenOptions *o, CodegenResult *r, char *err, int errcap) {
    memset(r, 0, sizeof *r);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    KProgram kp;
    if (!kernel_lower(g, f, p, &kp, err, errcap)) return false;
    cJSON *idx = cJSON_CreateObject();
    Blobs bl = {0};
    cJSON_AddStringToObject(idx, "target", codegen_target_name(o->target));
    bool ok = idx && (o->target == TARGET_CUDA ? build_cuda(g, &kp, o, idx, &bl, r, err, errcap) : build_cpu(&kp, o, idx, &bl, r, err, errcap));
    r->n_kernels = kp.n_kernels + r->n_library;
    kernel_program_free(&kp);
    char *json = ok ? cJSON_PrintUnformatted(idx) : NULL;
    cJSON_Delete(idx);
    if (ok && !json) ok = false, snprintf(err, (size_t)errcap, "out of memory");
    if (ok) {
        size_t jl = strlen(json);
        r->section_len = 4 + jl + bl.len;
        r->section = malloc(r->section_len ? r->section_len : 1);
        if (!r->section) {
            ok = false;
            snprintf(err, (size_t)errcap, "out of memory");
        } else {
            uint32_t n = (uint32_t)jl;
            unsigned char le[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
            memcpy(r->section, le, 4);
            memcpy(r->section + 4, json, jl);
            if (bl.len) memcpy(r->section + 4 + jl, bl.b, bl.len);
        }
    }
    free(json);
    free(bl.b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return ok;
}

void codegen_result_free(CodegenResult *r) {
    free(r->section);
    memset(r, 0, sizeof *r);
}

static bool blob_in_range(const cJSON *o, size_t blobs_len) {
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(o, "offset"), *n = cJSON_GetObjectItemCaseSensitive(o, "bytes");
    return cJSON_IsNumber(off) && cJSON_IsNumber(n) && off->valuedouble >= 0 && n->valuedouble >= 0 && off->valuedouble + n->valuedouble <= (double)blobs_len;
}

bool codegen_parse_section(const unsigned char *buf, size_t len, cJSON **index, const unsigned char **blobs, size_t *blobs_len, char *err, int errcap) {
    *index = NULL;
    if (len < 4) return snprintf(err, (size_t)errcap, "KERNELS section of %zu bytes is shorter than its 4-byte index length", len), false;
    size_t jl = (size_t)buf[0] | (size_t)buf[1] << 8 | (size_t)buf[2] << 16 | (size_t)buf[3] << 24;
    if (jl > len - 4) return snprintf(err, (size_t)errcap, "KERNELS index of %zu bytes runs past the section (%zu bytes)", jl, len), false;
    cJSON *idx = cJSON_ParseWithLength((const char *)buf + 4, jl);
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(idx, "target"), *ks = cJSON_GetObjectItemCaseSensitive(idx, "kernels");
    if (!cJSON_IsObject(idx) || !cJSON_IsString(target) || !cJSON_IsArray(ks)) {
        cJSON_Delete(idx);
        return snprintf(err, (size_t)errcap, "KERNELS index is not a JSON object with a target and a kernels array"), false;
    }
    *blobs = buf + 4 + jl;
    *blobs_len = len - 4 - jl;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(idx, "so"), *k;
    bool ok = !so || blob_in_range(so, *blobs_len);
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(idx, "library");
    ok = ok && (!lib || cJSON_IsArray(lib));
    for (int list = 0; ok && list < 2; list++) {
        const cJSON *arr = list ? lib : ks;
        cJSON_ArrayForEach(k, arr) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(k, "name"), *bs = cJSON_GetObjectItemCaseSensitive(k, "blobs"), *b;
            ok = ok && cJSON_IsString(name) && strlen(name->valuestring) < 64;
            cJSON_ArrayForEach(b, bs) ok = ok && blob_in_range(b, *blobs_len);
        }
    }
    if (!ok) {
        cJSON_Delete(idx);
        return snprintf(err, (size_t)errcap, "KERNELS index names a blob outside the section, a kernel without a name or a library that is not an array"), false;
    }
    *index = idx;
    return true;
}

bool codegen_c_source_hash(const KProgram *kp, char hex[65], char *err, int errcap) {
    char *src = kernel_render_c_unit(kp, true);
    if (!src) return snprintf(err, (size_t)errcap, "rendering C kernels failed"), false;
    source_sha256(src, hex);
    free(src);
    return true;
}

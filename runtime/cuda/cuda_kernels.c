/* runtime/cuda/cuda_kernels.c — loads a CUDA plan's generated kernels and
 * launches them. The program is lowered again from the plan's graph, fusion
 * and precision, and its kernel names must equal the KERNELS index's, so a
 * launch can never call another kernel than the one it was lowered for; the
 * library kernels (compiler/lib_kernels.h) are derived and checked alike.
 * Must not allocate the plan's memory, run cuDNN or fall back to the host. */
#include "cuda_kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/codegen.h"
#include "../../ir/diag.h"

/* "sm_90" -> 90; -1 when it is not of that form */
static int arch_number(const char *a) {
    if (!a || strncmp(a, "sm_", 3) != 0 || !a[3]) return -1;
    int v = 0;
    for (const char *c = a + 3; *c; c++) {
        if (*c < '0' || *c > '9' || v > 10000) return -1;
        v = v * 10 + (*c - '0');
    }
    return v;
}

bool cuda_choose_image(const char *const *cubin_archs, int n_cubins, const char *ptx_arch, int device_sm, int *cubin, char *err, int errcap) {
    *cubin = -1;
    int best = -1, best_sm = -1;
    for (int i = 0; i < n_cubins; i++) {
        int sm = arch_number(cubin_archs[i]);
        if (sm == device_sm) {
            *cubin = i;
            return true;
        }
        /* a cubin runs on later minor versions of its major version */
        if (sm > 0 && sm / 10 == device_sm / 10 && sm % 10 < device_sm % 10 && sm > best_sm) best = i, best_sm = sm;
    }
    if (best >= 0) {
        *cubin = best;
        return true;
    }
    int ptx_sm = arch_number(ptx_arch);
    if (ptx_sm > 0 && ptx_sm <= device_sm) return true;
    char list[160] = "";
    size_t used = 0;
    for (int i = 0; i < n_cubins && used < sizeof list; i++) used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? "," : "", cubin_archs[i]);
    if (!n_cubins && ptx_arch) snprintf(list, sizeof list, "%s", ptx_arch);
    return errf(err, errcap, "the plan was compiled for %s and this device is sm_%d: no cubin runs on it%s (recompile with --arch sm_%d)",
                list[0] ? list : "no architecture", device_sm, ptx_arch ? " and its PTX is for a newer architecture" : " and it carries no PTX", device_sm);
}

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

/* a CHANNEL_REDUCE launch's groups of cuda_reduce_lanes x vec channels: its blocks along x, and its counters */
static int64_t reduce_groups(const KLaunch *ln, int64_t vec) {
    int64_t c = ln->c > 0 ? ln->c : 1, group = cuda_reduce_lanes(ln, vec) * vec;
    return (c + group - 1) / group;
}

CudaGeom cuda_launch_geometry(KSkel skel, const KLaunch *ln, int64_t vec, int sm_count) {
    CudaGeom g = {1, 1, CUDA_BLOCK};
    int64_t total = 0;
    if (vec < 1) vec = 1;
    switch (skel) {
    case KS_MAP: total = ln->n * ln->c * ln->inner / vec; break;
    case KS_COPY: total = ln->outer * ln->len / vec; break;
    case KS_CHANNEL_REDUCE:
        g.grid = (unsigned)reduce_groups(ln, vec), g.grid_y = (unsigned)cuda_reduce_split(ln, vec);
        return g;
    case KS_LIST_NORM:
        g.grid = ln->list_n > 0 ? (unsigned)ln->list_n : 1, g.grid_y = CUDA_LIST_SPLIT;
        return g;
    case KS_COUNT: return g;
    }
    /* enough blocks for every element, capped where each thread already loops a few times */
    int64_t blocks = (total + CUDA_BLOCK - 1) / CUDA_BLOCK, cap = (int64_t)(sm_count > 0 ? sm_count : 1) * 32;
    /* a channels-last map's stride a whole number of pixels: each thread keeps its channel,
     * and computes what depends on it alone once */
    int64_t whole = skel == KS_MAP && ln->inner == 1 && ln->c > 0 ? ln->c / gcd(ln->c, CUDA_BLOCK * vec) : 1;
    if (blocks > cap && whole <= cap) cap = cap / whole * whole;
    g.grid = (unsigned)(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
    return g;
}

int64_t cuda_reduce_lanes(const KLaunch *ln, int64_t vec) {
    int64_t lanes = 1;
    if (ln->inner != 1) return 1;
    while (lanes < CUDA_REDUCE_MAX_LANES && ln->c % (lanes * 2 * vec) == 0) lanes *= 2;
    return lanes;
}

int64_t cuda_reduce_split(const KLaunch *ln, int64_t vec) {
    int64_t count = ln->n * ln->inner * cuda_reduce_lanes(ln, vec) * vec, split = (count + CUDA_REDUCE_CHUNK - 1) / CUDA_REDUCE_CHUNK;
    return split < 1 ? 1 : split > CUDA_REDUCE_MAX_SPLIT ? CUDA_REDUCE_MAX_SPLIT : split;
}

/* Sized for any vec the launch may take: the widest group splits the most, the narrowest has the most groups */
int64_t cuda_reduce_part_bytes(const KLaunch *ln) {
    if (ln->list_n) return ((int64_t)ln->list_n * CUDA_LIST_SPLIT + ln->list_n) * 8;
    int64_t c = ln->c > 0 ? ln->c : 1, split = 1;
    for (int64_t vec = 1; vec <= (ln->inner == 1 ? CUDA_REDUCE_MAX_VEC : 1); vec *= 2)
        if (c % vec == 0 && cuda_reduce_split(ln, vec) > split) split = cuda_reduce_split(ln, vec);
    return c * split * YK_RED_ACCS * 8 + c * YK_RED_VARS * 8;
}

int64_t cuda_reduce_counters(const KLaunch *ln) {
    /* one channel a thread makes the most groups */
    return ln->list_n ? ln->list_n + 1 : reduce_groups(ln, 1);
}

int64_t cuda_copy_vec(const Kernel *k, const KLaunch *ln, CuDevicePtr src, CuDevicePtr dst) {
    if (k->skel != KS_COPY || k->buf_dtype[0] != k->buf_dtype[1]) return 1;
    const int64_t esize = kernel_storage_bytes(k->buf_dtype[0]);
    int64_t vec = 16 / esize;
    for (; vec > 1; vec /= 2) {
        const int64_t bytes = vec * esize;
        if (ln->len % vec == 0 && ln->src_stride % vec == 0 && ln->dst_stride % vec == 0 && ln->src_off % vec == 0 && ln->dst_off % vec == 0 &&
            src % (CuDevicePtr)bytes == 0 && dst % (CuDevicePtr)bytes == 0)
            break;
    }
    return vec;
}

bool cuda_launch_idx32(const Kernel *k, const KLaunch *ln) {
    if (k->skel != KS_MAP && k->skel != KS_CHANNEL_REDUCE) return false;
    int64_t extent = ln->n * ln->c * ln->inner;
    for (int s = 0; s < k->n_bufs; s++) {
        const int64_t view_end = ln->n * ln->bs[s] + ln->c * ln->inner;
        if (k->buf_strided[s] && view_end > extent) extent = view_end;
    }
    return extent <= INT32_MAX - CUDA_IDX32_SLACK;
}

int64_t cuda_elem_vec(const Kernel *k, const KLaunch *ln, const CuDevicePtr *ptr) {
    /* a vectorized launch counts in 32 bits (the kernel's other path is V = 1, 64-bit) */
    const int64_t vec = cuda_launch_idx32(k, ln) ? kernel_elem_vec(k) : 1;
    /* a thread's V elements: V adjacent channels of a pixel (channels last), or for a map V of one plane */
    const bool fits = ln->inner == 1 ? ln->c % vec == 0 : k->skel == KS_MAP && ln->inner % vec == 0;
    if (vec == 1 || !fits) return 1;
    for (int ph = 0; ph < k->n_phases; ph++)
        for (int r = k->body[ph].first; r < k->body[ph].first + k->body[ph].n; r++) {
            const KInstr *in = &k->code[r];
            if ((in->op != KI_LOAD && in->op != KI_STORE) || in->at != KA_ELEM) continue;
            const CuDevicePtr bytes = (CuDevicePtr)(vec * kernel_storage_bytes(k->buf_dtype[in->buf]));
            /* a view's rows each start on a V-element boundary */
            if (ptr[ln->args[in->buf]] % bytes || (k->buf_strided[in->buf] && ln->bs[in->buf] % vec)) return 1;
        }
    return vec;
}

YkArgs cuda_launch_args(const Kernel *k, const KLaunch *ln, const CuDevicePtr *ptr, CuDevicePtr list, CuDevicePtr list_len) {
    YkArgs a = kernel_launch_args(ln);
    for (int i = 0; i < ln->n_args && i < YK_MAX_BUFS; i++) a.t[i] = (void *)(uintptr_t)ptr[ln->args[i]];
    /* each is 1 for the other skeletons */
    a.vec = k->skel == KS_COPY ? cuda_copy_vec(k, ln, ptr[ln->args[0]], ptr[ln->args[1]]) : cuda_elem_vec(k, ln, ptr);
    a.lanes = cuda_reduce_lanes(ln, a.vec);
    a.idx32 = cuda_launch_idx32(k, ln);
    if (ln->list_n) {
        a.list = (void *const *)(uintptr_t)(list + (CuDevicePtr)ln->list_first * sizeof(CuDevicePtr));
        a.list_len = (const long long *)(uintptr_t)(list_len + (CuDevicePtr)ln->list_first * sizeof(long long));
        a.list_n = ln->list_n;
    }
    return a;
}

/* Row r of a multi-tensor launch as a launch of its own: its tensors over [1, 1, len]. */
static KLaunch row_launch(const KProgram *kp, const KLaunch *ln, int r) {
    KLaunch row = *ln;
    memcpy(row.args, kernel_row_args(kp, ln, r), sizeof(int) * (size_t)ln->n_args);
    row.n = row.c = 1, row.inner = kernel_row_len(kp, ln, r), row.list_n = 0;
    return row;
}

YkArgs cuda_multi_args(const KProgram *kp, const KLaunch *ln, KRows rows, const CuDevicePtr *ptr, CuDevicePtr list, CuDevicePtr list_len) {
    const Kernel *k = &kp->kernels[ln->kernel];
    KLaunch first = row_launch(kp, ln, rows.lo);
    YkArgs a = cuda_launch_args(k, &first, ptr, 0, 0);
    /* one vec and one index width for every row: the kernel's widest vec
     * where all rows allow it (a row past 32 bits allows only 1) */
    for (int r = rows.lo + 1; r < rows.hi; r++) {
        KLaunch row = row_launch(kp, ln, r);
        a.idx32 = a.idx32 && cuda_launch_idx32(k, &row);
        if (a.vec > 1 && cuda_elem_vec(k, &row, ptr) != a.vec) a.vec = 1;
    }
    const size_t at = (size_t)ln->list_first + (size_t)rows.lo * (size_t)ln->n_args;
    a.list = (void *const *)(uintptr_t)(list + (CuDevicePtr)at * sizeof(CuDevicePtr));
    a.list_len = (const long long *)(uintptr_t)(list_len + (CuDevicePtr)at * sizeof(long long));
    a.list_n = rows.hi - rows.lo;
    return a;
}

CudaGeom cuda_multi_geometry(const KProgram *kp, const KLaunch *ln, KRows rows, int64_t vec, int sm_count) {
    int64_t longest = 1, n = rows.hi - rows.lo;
    for (int r = rows.lo; r < rows.hi; r++) {
        const int64_t len = kernel_row_len(kp, ln, r);
        if (len > longest) longest = len;
    }
    /* blocks enough for the longest row, within the 32 per multiprocessor a map takes in all */
    int64_t need = (longest / (vec > 0 ? vec : 1) + CUDA_BLOCK - 1) / CUDA_BLOCK, cap = (int64_t)(sm_count > 0 ? sm_count : 1) * 32 / (n > 0 ? n : 1);
    if (cap < 1) cap = 1;
    return (CudaGeom){(unsigned)(need < cap ? need : cap), (unsigned)(n > 0 ? n : 1), CUDA_BLOCK};
}

/* Kernel k's images in the index: cubin architectures and offsets, and the PTX. */
typedef struct Images {
    const char *cubin_arch[CODEGEN_MAX_ARCHS];
    size_t cubin_off[CODEGEN_MAX_ARCHS], cubin_len[CODEGEN_MAX_ARCHS];
    int n_cubins;
    const char *ptx_arch;
    size_t ptx_off, ptx_len;
} Images;

static bool read_images(const cJSON *kj, Images *im, char *err, int errcap) {
    memset(im, 0, sizeof *im);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(kj, "name"), *bs = cJSON_GetObjectItemCaseSensitive(kj, "blobs"), *b;
    cJSON_ArrayForEach(b, bs) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(b, "kind"), *arch = cJSON_GetObjectItemCaseSensitive(b, "arch");
        size_t off = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "offset"));
        size_t len = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "bytes"));
        if (!cJSON_IsString(kind) || !cJSON_IsString(arch) || arch_number(arch->valuestring) < 0 || len == 0)
            return errf(err, errcap, "KERNELS index: kernel %s has a blob without a kind, an sm_NN architecture or bytes", name->valuestring);
        if (strcmp(kind->valuestring, "ptx") == 0) {
            im->ptx_arch = arch->valuestring, im->ptx_off = off, im->ptx_len = len;
        } else if (strcmp(kind->valuestring, "cubin") == 0 && im->n_cubins < CODEGEN_MAX_ARCHS) {
            im->cubin_arch[im->n_cubins] = arch->valuestring, im->cubin_off[im->n_cubins] = off, im->cubin_len[im->n_cubins++] = len;
        } else {
            return errf(err, errcap, "KERNELS index: kernel %s has a blob of unknown kind '%s' (or too many cubins)", name->valuestring, kind->valuestring);
        }
    }
    return true;
}

/* Chooses and loads the image of kernel `name` (index entry kj) and resolves its function. */
static bool load_kernel(const CudaDevice *d, const char *name, const cJSON *kj, const unsigned char *blobs, CuModule *mod, CuFunction *fn, char image[24],
                        char *err, int errcap) {
    Images im;
    int c;
    char why[512];
    if (!read_images(kj, &im, err, errcap)) return false;
    if (!cuda_choose_image(im.cubin_arch, im.n_cubins, im.ptx_arch, d->sm, &c, why, sizeof why))
        return errf(err, errcap, "kernel %s: %s", name, why);
    size_t off = c >= 0 ? im.cubin_off[c] : im.ptx_off, len = c >= 0 ? im.cubin_len[c] : im.ptx_len;
    snprintf(image, 24, "%s %s", c >= 0 ? "cubin" : "ptx", c >= 0 ? im.cubin_arch[c] : im.ptx_arch);
    /* an aligned copy for the ELF reader, and the NUL the PTX loader stops at */
    unsigned char *img = malloc(len + 1);
    if (!img) return errf(err, errcap, "out of memory");
    memcpy(img, blobs + off, len);
    img[len] = 0;
    char doing[160];
    snprintf(doing, sizeof doing, "loading kernel %s (%s)", name, image);
    bool ok = CUDA_CALL(&d->L, cuModuleLoadData, (mod, img), doing, err, errcap);
    free(img);
    snprintf(doing, sizeof doing, "looking up kernel %s in its module (%s)", name, image);
    return ok && CUDA_CALL(&d->L, cuModuleGetFunction, (fn, *mod, name), doing, err, errcap);
}

/* Whether index list ks holds exactly the n kernels names(i), in order. */
static bool names_match(const cJSON *ks, int n, const char *what, const char *(*names)(const CudaKernels *, int), const CudaKernels *ck, char *err,
                        int errcap) {
    if (cJSON_GetArraySize(ks) != n)
        return errf(err, errcap, "the plan carries %d CUDA %s kernels but this yolocc needs %d for it (recompile the plan)", cJSON_GetArraySize(ks), what, n);
    const cJSON *kj = ks ? ks->child : NULL;
    for (int i = 0; i < n; i++, kj = kj->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(kj, "name"));
        if (!name || strcmp(name, names(ck, i)) != 0)
            return errf(err, errcap, "the plan's %s kernel %d is %s but this yolocc makes it %s (recompile the plan)", what, i, name ? name : "unnamed", names(ck, i));
    }
    return true;
}

/* Loads the n kernels of index list ks (names_match checked them). */
static bool load_list(const CudaDevice *d, const cJSON *ks, int n, const unsigned char *blobs, CuModule *mod, CuFunction *fn, char (*image)[24], char *err,
                      int errcap) {
    const cJSON *kj = ks ? ks->child : NULL;
    for (int i = 0; i < n; i++, kj = kj->next)
        if (!load_kernel(d, cJSON_GetObjectItemCaseSensitive(kj, "name")->valuestring, kj, blobs, &mod[i], &fn[i], image[i], err, errcap)) return false;
    return true;
}

static const char *generated_name(const CudaKernels *ck, int i) { return ck->kp.kernels[i].name; }
static const char *library_name(const CudaKernels *ck, int i) { return ck->lp.kernels[i].name; }

/* Parses p's KERNELS section (*idx: cJSON_Delete's), lowers p into ck->kp
 * and ck->lp, and checks both lists of names against the index. */
static bool lower_and_match(CudaKernels *ck, const Plan *p, cJSON **idx, const unsigned char **blobs, char *err, int errcap) {
    size_t blobs_len;
    *idx = NULL;
    if (!p->kernels) return errf(err, errcap, "the plan carries no kernels (compile it with --target cuda)");
    if (!codegen_parse_section(p->kernels, p->kernels_len, idx, blobs, &blobs_len, err, errcap)) return false;
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(*idx, "target");
    if (strcmp(target->valuestring, "cuda") != 0)
        return errf(err, errcap, "the plan's kernels are for the %s target, not CUDA (compile it with --target cuda)", target->valuestring);
    return kernel_lower(&p->g, &p->fusion, p->precision, &ck->kp, err, errcap) && lib_program_build(&p->g, p->precision, &ck->kp, &ck->lp, err, errcap) &&
           names_match(cJSON_GetObjectItemCaseSensitive(*idx, "kernels"), ck->kp.n_kernels, "generated", generated_name, ck, err, errcap) &&
           names_match(cJSON_GetObjectItemCaseSensitive(*idx, "library"), ck->lp.n_kernels, "library", library_name, ck, err, errcap);
}

bool cuda_kernels_cover(const Plan *p, char *err, int errcap) {
    CudaKernels ck;
    memset(&ck, 0, sizeof ck);
    cJSON *idx;
    const unsigned char *blobs;
    const bool ok = lower_and_match(&ck, p, &idx, &blobs, err, errcap);
    cJSON_Delete(idx);
    lib_program_free(&ck.lp);
    kernel_program_free(&ck.kp);
    return ok;
}

bool cuda_kernels_open(CudaKernels *ck, const CudaDevice *d, const Plan *p, char *err, int errcap) {
    memset(ck, 0, sizeof *ck);
    ck->lp.cast = ck->lp.unscale = ck->lp.ema = ck->lp.images_u8 = ck->lp.widen = -1;
    ck->sm_count = d->sm_count;
    cJSON *idx;
    const unsigned char *blobs;
    bool ok = lower_and_match(ck, p, &idx, &blobs, err, errcap);
    if (ok) {
        int n = ck->kp.n_kernels, nl = ck->lp.n_kernels;
        ck->mod = calloc((size_t)n + 1, sizeof *ck->mod);
        ck->fn = calloc((size_t)n + 1, sizeof *ck->fn);
        ck->image = calloc((size_t)n + 1, sizeof *ck->image);
        ck->lib_mod = calloc((size_t)nl + 1, sizeof *ck->lib_mod);
        ck->lib_fn = calloc((size_t)nl + 1, sizeof *ck->lib_fn);
        ck->lib_image = calloc((size_t)nl + 1, sizeof *ck->lib_image);
        ok = ck->mod && ck->fn && ck->image && ck->lib_mod && ck->lib_fn && ck->lib_image;
        if (!ok) errf(err, errcap, "out of memory");
        ok = ok && load_list(d, cJSON_GetObjectItemCaseSensitive(idx, "kernels"), n, blobs, ck->mod, ck->fn, ck->image, err, errcap) &&
             load_list(d, cJSON_GetObjectItemCaseSensitive(idx, "library"), nl, blobs, ck->lib_mod, ck->lib_fn, ck->lib_image, err, errcap);
        for (int l = 0; ok && l < ck->lp.n_launches; l++) {
            int64_t b = ck->lp.launch_kernel[l] >= 0 ? lib_scratch_bytes(&p->g, &p->g.ops[ck->kp.launches[l].op_lo]) : 0;
            if (b > ck->scratch_bytes) ck->scratch_bytes = b;
        }
    }
    cJSON_Delete(idx);
    if (!ok) cuda_kernels_close(ck, d);
    return ok;
}

void cuda_kernels_close(CudaKernels *ck, const CudaDevice *d) {
    /* teardown: unload failures leave nothing to undo */
    for (int i = 0; ck->mod && i < ck->kp.n_kernels; i++)
        if (ck->mod[i]) (void)d->L.cuModuleUnload(ck->mod[i]);
    for (int i = 0; ck->lib_mod && i < ck->lp.n_kernels; i++)
        if (ck->lib_mod[i]) (void)d->L.cuModuleUnload(ck->lib_mod[i]);
    if (ck->list) (void)d->L.cuMemFree(ck->list);
    if (ck->list_len) (void)d->L.cuMemFree(ck->list_len);
    if (ck->part) (void)d->L.cuMemFree(ck->part);
    free(ck->mod);
    free(ck->fn);
    free(ck->image);
    free(ck->lib_mod);
    free(ck->lib_fn);
    free(ck->lib_image);
    lib_program_free(&ck->lp);
    kernel_program_free(&ck->kp);
    memset(ck, 0, sizeof *ck);
}

static bool splits_blocks(const KProgram *kp, const KLaunch *ln) {
    return ln->kernel >= 0 && (kp->kernels[ln->kernel].skel == KS_CHANNEL_REDUCE || kp->kernels[ln->kernel].skel == KS_LIST_NORM);
}

/* the CHANNEL_REDUCE and LIST_NORM launches' counters (as many as the most
 * any needs, zero) and then their part, as large as the largest needs */
static bool bind_part(CudaKernels *ck, const CudaDevice *d, char *err, int errcap) {
    int64_t bytes = 0, counters = 0;
    for (int l = 0; l < ck->kp.n_launches; l++) {
        const KLaunch *ln = &ck->kp.launches[l];
        if (!splits_blocks(&ck->kp, ln)) continue;
        if (cuda_reduce_part_bytes(ln) > bytes) bytes = cuda_reduce_part_bytes(ln);
        if (cuda_reduce_counters(ln) > counters) counters = cuda_reduce_counters(ln);
    }
    if (bytes == 0 || ck->part) return true;
    ck->part_counters = (counters * 4 + 255) / 256 * 256;
    bytes += ck->part_counters;
    const CudaLibs *L = &d->L;
    return CUDA_CALL(L, cuMemAlloc, (&ck->part, (size_t)bytes), "allocating the reductions' partial sums", err, errcap) &&
           CUDA_CALL(L, cuMemsetD8Async, (ck->part, 0, (size_t)bytes, d->main), "zeroing the reductions' counters", err, errcap) &&
           CUDA_CALL(L, cuStreamSynchronize, (d->main), "zeroing the reductions' counters", err, errcap);
}

bool cuda_kernels_bind_tables(CudaKernels *ck, const CudaDevice *d, const CuDevicePtr *ptr, char *err, int errcap) {
    int n = ck->kp.n_list;
    if (!bind_part(ck, d, err, errcap)) return false;
    if (n == 0) return true;
    const CudaLibs *L = &d->L;
    CuDevicePtr *host_ptr = malloc(sizeof *host_ptr * (size_t)n);
    long long *host_len = malloc(sizeof *host_len * (size_t)n);
    bool ok = host_ptr && host_len;
    if (!ok) errf(err, errcap, "out of memory");
    for (int j = 0; ok && j < n; j++) {
        int t = ck->kp.list[j];
        host_ptr[j] = ptr[t];
        host_len[j] = (long long)ck->kp.list_len[j];
    }
    /* the tables are uploaded once, before any step, so they are allocated outside the step's memory */
    ok = ok && (ck->list || CUDA_CALL(L, cuMemAlloc, (&ck->list, sizeof *host_ptr * (size_t)n), "allocating the tensor-list pointer table", err, errcap)) &&
         (ck->list_len || CUDA_CALL(L, cuMemAlloc, (&ck->list_len, sizeof *host_len * (size_t)n), "allocating the tensor-list length table", err, errcap)) &&
         cuda_copy_to_device(d, ck->list, host_ptr, sizeof *host_ptr * (size_t)n, "uploading the tensor-list pointer table", err, errcap) &&
         cuda_copy_to_device(d, ck->list_len, host_len, sizeof *host_len * (size_t)n, "uploading the tensor-list length table", err, errcap);
    free(host_ptr);
    free(host_len);
    return ok;
}

bool cuda_kernels_launch(const CudaKernels *ck, const CudaDevice *d, const KLaunch *ln, KRows rows, const CuDevicePtr *ptr, CuStream s, char *err, int errcap) {
    if (ln->kernel < 0 || ln->kernel >= ck->kp.n_kernels) return errf(err, errcap, "launch of ops %d..%d is a library op, not a generated kernel", ln->op_lo, ln->op_hi);
    const Kernel *k = &ck->kp.kernels[ln->kernel];
    const bool multi = kernel_is_multi(&ck->kp, ln);
    if (ln->list_n && !ck->list) return errf(err, errcap, "kernel %s needs the tensor-list tables: call cuda_kernels_bind_tables first", k->name);
    if (splits_blocks(&ck->kp, ln) && !ck->part) return errf(err, errcap, "kernel %s needs the reductions' partial sums: call cuda_kernels_bind_tables first", k->name);
    if (multi && (rows.lo < 0 || rows.hi > ln->list_n || rows.lo >= rows.hi))
        return errf(err, errcap, "rows [%d, %d) of kernel %s's launch of %d rows", rows.lo, rows.hi, k->name, ln->list_n);
    YkArgs a = multi ? cuda_multi_args(&ck->kp, ln, rows, ptr, ck->list, ck->list_len) : cuda_launch_args(k, ln, ptr, ck->list, ck->list_len);
    CudaGeom g = multi ? cuda_multi_geometry(&ck->kp, ln, rows, a.vec, ck->sm_count) : cuda_launch_geometry(k->skel, ln, a.vec, ck->sm_count);
    void *params[] = {&a};
    char doing[160];
    a.arrived = (unsigned *)(uintptr_t)ck->part, a.part = (void *)(uintptr_t)(ck->part + (CuDevicePtr)ck->part_counters);
    /* a reduction's phases are launches of their own: a later phase reads the variables all of an earlier one's blocks made */
    for (int ph = 0; ph < (k->skel == KS_CHANNEL_REDUCE ? k->n_phases : 1); ph++) {
        a.phase = ph;
        snprintf(doing, sizeof doing, "launching %s (ops %d..%d, phase %d, %u x %u blocks of %u)", k->name, ln->op_lo, ln->op_hi, ph, g.grid, g.grid_y, g.block);
        if (!CUDA_CALL(&d->L, cuLaunchKernel, (ck->fn[ln->kernel], g.grid, g.grid_y, 1, g.block, 1, 1, 0, s, params, NULL), doing, err, errcap)) return false;
    }
    return true;
}

YlArgs cuda_lib_args(const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr) {
    YlArgs a = lib_launch_args(g, v, op);
    for (int i = 0; i < op->n_in + op->n_out && i < LIB_MAX_OPERANDS; i++) *lib_operand(&a, i) = (void *)(uintptr_t)ptr[lib_operand_tensor(op, i)];
    return a;
}

static bool launch_lib(const CudaKernels *ck, const CudaDevice *d, int k, YlArgs *a, CuStream s, const char *what, char *err, int errcap) {
    unsigned grid = lib_launch_grid(a, ck->sm_count);
    void *params[] = {a};
    char doing[192];
    snprintf(doing, sizeof doing, "launching %s (%s, %u blocks of %d)", ck->lp.kernels[k].name, what, grid, LIB_BLOCK);
    return CUDA_CALL(&d->L, cuLaunchKernel, (ck->lib_fn[k], grid, 1, 1, LIB_BLOCK, 1, 1, 0, s, params, NULL), doing, err, errcap);
}

bool cuda_kernels_launch_lib(const CudaKernels *ck, const CudaDevice *d, const Graph *g, const Views *v, int l, const CuDevicePtr *ptr, CuStream s, char *err,
                             int errcap) {
    int k = l >= 0 && l < ck->lp.n_launches ? ck->lp.launch_kernel[l] : -1;
    if (k < 0) return errf(err, errcap, "launch %d has no library kernel", l);
    const Op *op = &g->ops[ck->kp.launches[l].op_lo];
    YlArgs a = cuda_lib_args(g, v, op, ptr);
    char what[64];
    snprintf(what, sizeof what, "op %d", op->id);
    int64_t need = lib_scratch_bytes(g, op);
    if (need > ck->scratch_bytes)
        return errf(err, errcap, "op %d (%s) needs %lld bytes of library scratch but %lld are bound", op->id, op_def(op->kind)->name,
                    (long long)need, (long long)ck->scratch_bytes);
    a.ws = (void *)(uintptr_t)ck->scratch;
    if (op->kind == OP_ATTENTION_BWD) {
        const LibKernel *lk = &ck->lp.kernels[k];
        int stats = lib_program_find(&ck->lp, LK_ATTENTION_STATS, lk->n_operands, lk->dt);
        if (stats < 0) return errf(err, errcap, "op %d (attention_bwd) has no statistics kernel in the plan (recompile the plan)", op->id);
        if (!launch_lib(ck, d, stats, &a, s, what, err, errcap)) return false;
    }
    return launch_lib(ck, d, k, &a, s, what, err, errcap);
}

/* dst[i] = src[i] for i < n through cast kernel k (its two types) */
static bool launch_cast(const CudaKernels *ck, const CudaDevice *d, int k, CuDevicePtr src, CuDevicePtr dst, int64_t n, CuStream s, const char *what, char *err,
                        int errcap) {
    YlArgs a;
    memset(&a, 0, sizeof a);
    a.t[0] = (void *)(uintptr_t)src, a.t[1] = (void *)(uintptr_t)dst, a.total = n;
    return launch_lib(ck, d, k, &a, s, what, err, errcap);
}

bool cuda_kernels_cast(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr src, CuDevicePtr dst, int64_t n, CuStream s, char *err, int errcap) {
    if (ck->lp.cast < 0) return errf(err, errcap, "the plan has no compute-copy cast kernel (an fp32 plan keeps no copies)");
    return launch_cast(ck, d, ck->lp.cast, src, dst, n, s, "a compute copy", err, errcap);
}

bool cuda_kernels_widen(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr src, CuDevicePtr dst, int64_t n, CuStream s, char *err, int errcap) {
    if (ck->lp.widen < 0) return errf(err, errcap, "the plan has no kernel that widens a bf16 / fp16 weight gradient to fp32 (recompile the plan)");
    return launch_cast(ck, d, ck->lp.widen, src, dst, n, s, "a weight gradient's widening to fp32", err, errcap);
}

bool cuda_kernels_images_u8(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr dst, CuDevicePtr bytes, int64_t n, CuStream s, char *err, int errcap) {
    if (ck->lp.images_u8 < 0) return errf(err, errcap, "the plan has no kernel for images uploaded as bytes (recompile the plan)");
    YlArgs a;
    memset(&a, 0, sizeof a);
    a.t[0] = (void *)(uintptr_t)dst, a.t[1] = (void *)(uintptr_t)bytes, a.total = n;
    return launch_lib(ck, d, ck->lp.images_u8, &a, s, "the images' conversion from bytes", err, errcap);
}

bool cuda_kernels_ema(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr ema, CuDevicePtr model, int64_t n, float decay_d, float decay_e, CuStream s, char *err,
                      int errcap) {
    if (ck->lp.ema < 0) return errf(err, errcap, "the plan has no EMA kernel (recompile the plan)");
    YlArgs a;
    memset(&a, 0, sizeof a);
    a.t[0] = (void *)(uintptr_t)ema, a.t[1] = (void *)(uintptr_t)model, a.total = n, a.ema_d = decay_d, a.ema_e = decay_e;
    return launch_lib(ck, d, ck->lp.ema, &a, s, "an EMA update", err, errcap);
}

bool cuda_kernels_unscale(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr grad, int64_t n, CuDevicePtr scale, CuStream s, char *err, int errcap) {
    if (ck->lp.unscale < 0) return errf(err, errcap, "the plan has no unscale kernel (only fp16 plans scale their loss)");
    YlArgs a;
    memset(&a, 0, sizeof a);
    a.t[0] = (void *)(uintptr_t)grad, a.t[1] = (void *)(uintptr_t)scale, a.total = n;
    return launch_lib(ck, d, ck->lp.unscale, &a, s, "a gradient's unscale", err, errcap);
}

/* tests/test_decode_emul.c — the validation graph's box decode as CUDA library kernels
 * (templates/cuda/lib/decode.cu: dfl, dist2bbox) without a GPU: their rendered source compiled
 * as host C++ and run as emulated grids against runtime/ref_layout.c, in fp32/bf16/fp16 storage,
 * packed and as views. Owns no kernel code. */
#include <math.h>
#include <stdint.h>

#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/ref_kernels.h"
#include "test_emul.h"
#include "test_gpu.h"

enum { GRID = 2, BLOCK = 3, GAP = 7, REG_MAX = 5 };
static const DType TYPES[3] = {DT_F32, DT_BF16, DT_F16};
static size_t esz(DType d) { return d == DT_F32 ? 4 : 2; }

/* dfl(logits [2, 4 * REG_MAX, 23], bins) and dist2bbox xywh and xyxy of its
 * output, on two levels of 3x5 and 2x4 cells (strides 8 and 16) */
static void decode_graph(Graph *g, Arena *ar) {
    arena_init(ar, 0);
    graph_init(g, ar);
    int logits = graph_add_input(g, "logits", (Shape){3, {2, 4 * REG_MAX, 23}}, DT_F32);
    int in[2] = {logits, graph_add_input(g, "bins", shape4(1, REG_MAX, 1, 1), DT_F32)};
    OpAttrs dfl = {.reg_max = REG_MAX};
    int d = lib_graph_op(g, OP_DFL, in, 2, &dfl);
    OpAttrs box = {.nlevels = 2, .level_hw = {{3, 5}, {2, 4}}, .strides = {8, 16}, .xywh = true};
    lib_graph_op(g, OP_DIST2BBOX, &d, 1, &box);
    box.xywh = false;
    lib_graph_op(g, OP_DIST2BBOX, &d, 1, &box);
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

Test(decode_emul, dfl_and_dist2bbox_match_the_reference) {
    Arena ar;
    Graph g;
    decode_graph(&g, &ar);
    Views views;
    char err[512];
    cr_assert(views_identity(&g, &ar, &views, err, sizeof err), "%s", err);
    /* every op in every storage type, the bins fp32 as plans store them */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    LibKernel ks[3][3];
    for (int o = 0; o < g.n_ops; o++)
        for (int ti = 0; ti < 3; ti++) {
            const Op *op = &g.ops[o];
            LibKernel *k = &ks[o][ti];
            *k = (LibKernel){.entry = (LibEntry)lib_entry_of(op->kind), .n_operands = op->n_in + 1};
            cr_assert_geq((int)k->entry, 0, "%s has a library kernel", op_def(op->kind)->name);
            for (int i = 0; i < k->n_operands; i++) k->dt[i] = op->kind == OP_DFL && i == 1 ? DT_F32 : TYPES[ti];
            snprintf(k->name, sizeof k->name, "yl_dec_%d_%d", o, ti);
            char *src = lib_kernel_render(k);
            cr_assert_not_null(src);
            fprintf(f, "namespace dec_%d_%d {\n%s\n}\n#undef YK_KERNEL_ABI_H\n#undef YL_LIB_ABI_H\n#undef YK_BLOCK\n", o, ti, src);
            free(src);
        }
    cr_assert_eq(fclose(f), 0);
    void *h = emul_build(text, len, "the decode kernels");
    free(text);
    void (*thread)(unsigned, unsigned, unsigned, unsigned) = (void (*)(unsigned, unsigned, unsigned, unsigned))dlsym(h, "yk_emu_thread");
    cr_assert_not_null(thread);
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    int64_t checked = 0;
    for (int o = 0; o < g.n_ops; o++)
        for (int ti = 0; ti < 3; ti++)
            for (int gap = 0; gap <= GAP; gap += GAP) {
                const Op *op = &g.ops[o];
                const LibKernel *k = &ks[o][ti];
                YlArgs a = lib_launch_args(&g, &views, op);
                void **ref = calloc((size_t)g.n_tensors, sizeof *ref);
                unsigned char *dev[3];
                int64_t per[3], bs[3], span[3];
                for (int i = 0; i < k->n_operands; i++) {
                    int t = i < op->n_in ? op->in[i] : op->out[0];
                    const Shape *s = &g.tensors[t].shape;
                    bool batched = s->nd == 3;
                    int64_t n = shape_numel(s), nimg = batched ? s->d[0] : 1;
                    per[i] = n / nimg, bs[i] = per[i] + (batched ? gap : 0), span[i] = (nimg - 1) * bs[i] + per[i];
                    dev[i] = calloc((size_t)span[i], esz(k->dt[i]));
                    ref[t] = calloc((size_t)n, sizeof(float));
                    for (int64_t e = 0; e < span[i]; e++) {
                        if (e % bs[i] >= per[i]) continue;
                        /* logits in [-4, 4), bins and distances in [0, 8) */
                        float x = (float)((double)(rnd(&seed) >> 40) / 16777216.0 * 8 - (op->kind == OP_DFL && i == 0 ? 4 : 0));
                        if (i == op->n_in) continue;
                        unsigned char *p = dev[i] + (size_t)e * esz(k->dt[i]);
                        cuda_f32_to_storage(k->dt[i], &x, p, 1);
                        cuda_storage_to_f32(k->dt[i], p, &((float *)ref[t])[e / bs[i] * per[i] + e % bs[i]], 1);
                    }
                    a.t[i] = dev[i];
                    a.bs[i] = bs[i];
                }
                cr_assert(ref_kernel(op->kind)(&g, op, ref, err, sizeof err), "%s", err);
                void (*fn)(YlArgs) = (void (*)(YlArgs))dlsym(h, k->name);
                cr_assert_not_null(fn, "%s", k->name);
                for (unsigned b = 0; b < GRID; b++)
                    for (unsigned t = 0; t < BLOCK; t++) thread(GRID, BLOCK, b, t), fn(a);
                const int oi = op->n_in;
                const float *want = ref[op->out[0]];
                int bad = 0;
                for (int64_t e = 0; e < span[oi]; e++) {
                    const unsigned char *p = dev[oi] + (size_t)e * esz(k->dt[oi]);
                    unsigned char w[4];
                    if (e % bs[oi] >= per[oi]) {
                        for (size_t b = 0; b < esz(k->dt[oi]); b++) bad += p[b] != 0;
                        continue;
                    }
                    cuda_f32_to_storage(k->dt[oi], &want[e / bs[oi] * per[oi] + e % bs[oi]], w, 1);
                    if (memcmp(p, w, esz(k->dt[oi])) != 0 && bad++ < 3) {
                        float got;
                        cuda_storage_to_f32(k->dt[oi], p, &got, 1);
                        cr_log_error("%s (%s, gap %d) element %lld: %.9g, reference %.9g", op_def(op->kind)->name, k->name, gap, (long long)e, got,
                                     want[e / bs[oi] * per[oi] + e % bs[oi]]);
                    }
                    checked++;
                }
                cr_expect_eq(bad, 0, "%s in %s storage, gap %d: %d elements differ from the reference (or gaps written)", op_def(op->kind)->name,
                             k->dt[oi] == DT_F32 ? "fp32" : k->dt[oi] == DT_BF16 ? "bf16" : "fp16", gap, bad);
                for (int i = 0; i < k->n_operands; i++) free(dev[i]);
                for (int t = 0; t < g.n_tensors; t++) free(ref[t]);
                free(ref);
            }
    cr_log_info("%lld decoded elements equal the reference bit for bit", (long long)checked);
    cr_expect_gt(checked, 0);
    arena_free(&ar);
}

/* the kernels compile with NVRTC in every storage type */
Test(decode_emul, decode_kernels_compile_with_nvrtc) {
    char why[512];
    if (!nvrtc_available(why, sizeof why)) cr_skip_test("SKIP: NVRTC not available: %s", why);
    const LibEntry es[] = {LK_DFL, LK_DIST2BBOX};
    for (int e = 0; e < 2; e++)
        for (int ti = 0; ti < 3; ti++) {
            LibKernel k = {.entry = es[e], .n_operands = e ? 2 : 3};
            for (int i = 0; i < k.n_operands; i++) k.dt[i] = TYPES[(ti + i) % 3];
            snprintf(k.name, sizeof k.name, "yl_dec%d_%d", e, ti);
            expect_lib_kernel_compiles(&k);
        }
}

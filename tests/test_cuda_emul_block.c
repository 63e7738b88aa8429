/* tests/test_cuda_emul_block.c — runs the CUDA source of the kernels that need
 * a real block (CHANNEL_REDUCE, LIST_NORM: shared memory, __syncthreads,
 * atomics) on the CPU: the tiny plan's rendered kernels built as host C++
 * with tests/cuda_host_shim.h, each launch run by yk_emu_grid at the
 * geometry cuda_launch_geometry gives (one POSIX thread per CUDA thread, the
 * blocks last first), and again split over more blocks than the shape asks
 * for, so the path that combines blocks' partial sums runs at this size.
 * Outputs are compared with the CPU target's kernel of the same launch; the
 * reductions' counters must be zero again after every launch. */
#include "test_emul_env.h"

/* Threads per emulated block: YK_BLOCK of the rendered sources, smaller than
 * the device's 256 (each is a POSIX thread meeting the others at every
 * __syncthreads) but wide enough for every lane count of a reduction. */
enum { EMU_BLOCK_THREADS = 64 };

/* The emulated device's side tables: LIST_NORM's pointers and lengths, and
 * the reductions' counters and partial sums (as cuda_kernels_bind_tables). */
typedef struct Tables {
    CuDevicePtr *list;
    long long *list_len;
    unsigned char *part;
    int64_t counters, bytes;
} Tables;

static void tables_open(Tables *tb, const Env *v, int64_t max_split) {
    const KProgram *kp = &v->kp;
    tb->list = calloc((size_t)kp->n_list + 1, sizeof *tb->list);
    tb->list_len = calloc((size_t)kp->n_list + 1, sizeof *tb->list_len);
    cr_assert(tb->list && tb->list_len);
    for (int j = 0; j < kp->n_list; j++) {
        tb->list[j] = v->ptr[kp->list[j]];
        tb->list_len[j] = (long long)kp->list_len[j];
    }
    int64_t counters = 1, bytes = 0;
    for (int l = 0; l < kp->n_launches; l++) {
        const KLaunch *ln = &kp->launches[l];
        if (ln->kernel < 0) continue;
        KSkel skel = kp->kernels[ln->kernel].skel;
        if (skel != KS_CHANNEL_REDUCE && skel != KS_LIST_NORM) continue;
        /* a forced split needs a channel's sums for every block */
        int64_t forced = skel == KS_CHANNEL_REDUCE ? ln->c * max_split * YK_RED_ACCS * 8 + ln->c * YK_RED_VARS * 8 : 0;
        if (cuda_reduce_counters(ln) > counters) counters = cuda_reduce_counters(ln);
        if (cuda_reduce_part_bytes(ln) > bytes) bytes = cuda_reduce_part_bytes(ln);
        if (forced > bytes) bytes = forced;
    }
    tb->counters = (counters * 4 + 255) / 256 * 256;
    tb->bytes = tb->counters + bytes;
    tb->part = calloc((size_t)tb->bytes, 1);
    cr_assert_not_null(tb->part);
}

static void tables_close(Tables *tb) { free(tb->list), free(tb->list_len), free(tb->part); }

static bool counters_zero(const Tables *tb) {
    for (int64_t i = 0; i < tb->counters; i++)
        if (tb->part[i]) return false;
    return true;
}

/* Fresh fp32 gradients in every tensor a LIST_NORM launch reads. */
static void fill_list(Env *v, const KLaunch *ln, uint64_t *seed) {
    for (int j = 0; j < ln->list_n; j++) {
        int t = v->kp.list[ln->list_first + j];
        cr_assert_eq(v->dt[t], DT_F32, "listed tensor %d is read as fp32", t);
        fill(v, t, 0, seed);
    }
}

/* Every CHANNEL_REDUCE and LIST_NORM launch of the tiny plan on fresh random
 * inputs, against the CPU target's kernel. Reductions split over
 * max(the shape's split, min_split) blocks per channel. Tolerances as
 * generated_vs_cpu's: the sums are fp64 on both sides in different orders,
 * so fp32 results agree to 1e-5 relative, 16-bit ones to 1 ulp. */
/* idx64: the reductions' 64-bit path (launches of 2^31 elements and more,
 * cuda_launch_idx32), one channel a thread */
static void block_kernels_vs_cpu(const char *precision, const char *layout, unsigned min_split, bool idx64) {
    Env v;
    GenCpu gc;
    int others;
    void *h = emul_generated_open(&v, &gc, precision, layout, 1u << KS_CHANNEL_REDUCE | 1u << KS_LIST_NORM, EMU_BLOCK_THREADS, &others);
    GridFn grid = (GridFn)sym(h, "yk_emu_grid");
    Tables tb;
    tables_open(&tb, &v, min_split);
    uint64_t seed = 0x2545f4914f6cdd1dULL;
    int count[KS_COUNT] = {0}, failed = 0, split = 0, compared = 0, wide = 0, narrow = 0;
    double worst_rel = 0, worst_ulp = 0;
    for (int i = 0; i < v.kp.n_launches; i++) {
        const KLaunch *ln = &v.kp.launches[i], *lc = &gc.kp.launches[i];
        if (ln->kernel < 0) continue;
        const Kernel *k = &v.kp.kernels[ln->kernel];
        if (k->skel != KS_CHANNEL_REDUCE && k->skel != KS_LIST_NORM) continue;
        /* LIST_NORM's split is a constant: the forced-split runs leave it to the others */
        if (k->skel == KS_LIST_NORM && min_split > 1) continue;
        for (int s = 0; s < ln->n_args; s++) {
            bool again = false;
            for (int r = 0; r < s; r++) again |= ln->args[r] == ln->args[s];
            if (!again) fill(&v, ln->args[s], 0, &seed);
        }
        fill_list(&v, ln, &seed);
        gen_cpu_launch(&gc, lc, kernel_all_rows(&gc.kp, lc), v.host);
        YkArgs a = cuda_launch_args(k, ln, v.ptr, (CuDevicePtr)(uintptr_t)tb.list, (CuDevicePtr)(uintptr_t)tb.list_len);
        a.arrived = (unsigned *)tb.part, a.part = tb.part + tb.counters;
        if (idx64 && k->skel == KS_CHANNEL_REDUCE) a.idx32 = 0, a.vec = 1, a.lanes = cuda_reduce_lanes(ln, 1);
        narrow += k->skel == KS_CHANNEL_REDUCE && a.idx32;
        CudaGeom g = cuda_launch_geometry(k->skel, ln, a.vec, 132);
        wide += a.vec > 1;
        cr_assert_eq(g.block, CUDA_BLOCK);
        g.block = EMU_BLOCK_THREADS;
        if (k->skel == KS_CHANNEL_REDUCE && g.grid_y < min_split) g.grid_y = min_split;
        split += k->skel == KS_CHANNEL_REDUCE && g.grid_y > 1;
        for (int ph = 0; ph < (k->skel == KS_CHANNEL_REDUCE ? k->n_phases : 1); ph++) {
            a.phase = ph;
            cr_assert_eq(grid(call_yk, sym(h, k->name), &a, g.grid, g.grid_y, g.block), 0, "the emulated grid started");
        }
        cr_expect(counters_zero(&tb), "launch %d %s: the counters are zero again for the next launch", i, k->name);
        count[k->skel]++;
        expect_launch_outputs(&v, i, ln, k, &failed, &compared, &worst_rel, &worst_ulp);
    }
    cr_log_info("%s %s: %d CHANNEL_REDUCE launches (%d split over blocks, %d with several channels a thread) and %d LIST_NORM launches emulated (%d "
                "grid-stride kernels left to cuda_emul); worst relative difference (fp32 storage) %.3g, worst 16-bit ulps %.3g",
                precision, layout, count[KS_CHANNEL_REDUCE], split, wide, count[KS_LIST_NORM], others, worst_rel, worst_ulp);
    cr_expect_eq(narrow, idx64 ? 0 : count[KS_CHANNEL_REDUCE], "%d of %d reductions in 32 bits", narrow, count[KS_CHANNEL_REDUCE]);
    if (idx64) cr_expect_eq(wide, 0, "the 64-bit path takes one channel a thread");
    else if (strcmp(layout, "nhwc") == 0) cr_expect_gt(wide, count[KS_CHANNEL_REDUCE] / 2, "channels-last reductions take several channels a thread");
    else cr_expect_eq(wide, 0, "NCHW reductions take one channel a thread");
    cr_expect_gt(count[KS_CHANNEL_REDUCE], 0, "the tiny plan has batch norms");
    cr_expect_gt(compared, 0, "outputs compared");
    if (min_split == 1) cr_expect_gt(count[KS_LIST_NORM], 0, "the tiny plan clips its gradients");
    if (min_split > 1) cr_expect_eq(split, count[KS_CHANNEL_REDUCE], "every reduction ran split");
    tables_close(&tb);
    dlclose(h);
    gen_cpu_close(&gc);
    env_close(&v);
}

Test(cuda_emul_block, reductions_match_the_cpu_fp32, .timeout = 600) { block_kernels_vs_cpu("fp32", "nchw", 1, false); }
Test(cuda_emul_block, reductions_match_the_cpu_bf16_nhwc, .timeout = 600) { block_kernels_vs_cpu("bf16", "nhwc", 1, false); }
/* three blocks per channel: partial sums combined by the last to arrive */
Test(cuda_emul_block, split_reductions_match_the_cpu_fp32, .timeout = 600) { block_kernels_vs_cpu("fp32", "nchw", 3, false); }
Test(cuda_emul_block, split_reductions_match_the_cpu_bf16_nhwc, .timeout = 600) { block_kernels_vs_cpu("bf16", "nhwc", 3, false); }
Test(cuda_emul_block, split_reductions_in_64bit_indices_match_the_cpu_bf16_nhwc, .timeout = 600) { block_kernels_vs_cpu("bf16", "nhwc", 3, true); }

/* tests/test_cuda_emul.c — runs the CUDA kernels' own source on the CPU (no GPU
 * needed): the rendered NVRTC source of every grid-stride kernel of the tiny
 * model (generated MAP and COPY kernels, every library kernel) is compiled as
 * host C++ with tests/cuda_host_shim.h into one shared object, loaded, and
 * each launch is called with its real argument block (cuda_launch_args,
 * cuda_lib_args) once per emulated thread of a 2-block x 3-thread grid (and
 * a 5 x 7 one), so the grid-stride loops cover every element in turn. Generated launches are
 * compared with the CPU target's kernel of the same launch, library launches
 * with the reference kernels, on tensors laid out as on the device (views:
 * their base's image stride) with poisoned gaps and red zones that must
 * keep their bytes. Channel-reduce and list-norm kernels need a real block
 * (shared memory, __syncthreads) and run in test_cuda_emul_block.c. Skips
 * only without a C++ compiler ($CXX, else c++). */
#include "../runtime/gen_cpu.h"
#include "test_emul_env.h"

/* ---- generated kernels against the CPU target ---- */

/* Every MAP and COPY launch on fresh random inputs: the emulated CUDA kernel
 * against the CPU target's kernel of the same launch. fp32 storage:
 * |emulated - CPU| <= 1e-5 * max(|CPU|, 0.1): relative 1e-5 where the result
 * is not small, and 1e-6 absolute where O(1) terms cancel (the CUDA map
 * computes in fp32, the C one in double, so a cancelling sum keeps the fp32
 * rounding of its terms: the SGD steps show 3e-8 on results near 1e-3).
 * bf16 / fp16 storage: both results rounded to the storage type, at most 1
 * ulp apart. Gaps of views and red zones must keep their poison. */
/* The maps' 64-bit path (what launches of 2^31 elements and more take,
 * cuda_launch_idx32): YkArgs.idx32 cleared, one element a thread. */
static void take_64bit_path(YkArgs *a, const Kernel *k) {
    if (k->skel == KS_MAP) a->idx32 = 0, a->vec = 1;
}

static void generated_vs_cpu(const char *precision, const char *layout, unsigned grid, unsigned block, bool idx64) {
    Env v;
    GenCpu gc;
    int skipped_kernels;
    void *h = emul_generated_open(&v, &gc, precision, layout, 1u << KS_MAP | 1u << KS_COPY, 0, &skipped_kernels);
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    int count[KS_COUNT] = {0}, skipped[KS_COUNT] = {0}, compared = 0, failed = 0, strided = 0, units = 0, map_units = 0, view_units = 0, narrow = 0;
    double worst_rel = 0, worst_ulp = 0;
    /* the tensor-list tables (cuda_kernels_bind_tables), in host memory */
    CuDevicePtr *tab = calloc((size_t)v.kp.n_list + 1, sizeof *tab);
    long long *lens = calloc((size_t)v.kp.n_list + 1, sizeof *lens);
    cr_assert(tab && lens);
    for (int j = 0; j < v.kp.n_list; j++) tab[j] = v.ptr[v.kp.list[j]], lens[j] = v.kp.list_len[j];
    void (*block_y)(unsigned, unsigned) = (void (*)(unsigned, unsigned))sym(h, "yk_emu_block_y");
    int multi = 0;
    for (int i = 0; i < v.kp.n_launches; i++) {
        const KLaunch *ln = &v.kp.launches[i], *lc = &gc.kp.launches[i];
        if (ln->kernel < 0) continue;
        const Kernel *k = &v.kp.kernels[ln->kernel];
        cr_assert(lc->kernel >= 0 && strcmp(gc.kp.kernels[lc->kernel].name, k->name) == 0, "launch %d: both sides lower the same kernel", i);
        if (k->skel != KS_MAP && k->skel != KS_COPY) {
            skipped[k->skel]++;
            continue;
        }
        for (int rs = 0; rs < kernel_n_rows(&v.kp, ln) * ln->n_args; rs++) {
            const int s = rs % ln->n_args, *args = kernel_row_args(&v.kp, ln, rs / ln->n_args), t = args[s];
            if (v.dt[t] != DT_I64) cr_assert_eq(k->buf_dtype[s], v.dt[t], "launch %d %s slot %d: one storage type per tensor", i, k->name, s);
            bool again = false;
            for (int r = 0; r < s; r++) again |= args[r] == t;
            if (!again) fill(&v, t, 0, &seed);
            strided += k->buf_strided[s];
        }
        gen_cpu_launch(&gc, lc, kernel_all_rows(&gc.kp, lc), v.host);
        YkArgs a = cuda_launch_args(k, ln, v.ptr, 0, 0);
        if (idx64) take_64bit_path(&a, k);
        narrow += k->skel == KS_MAP && a.idx32;
        if (kernel_is_multi(&v.kp, ln)) {
            /* in two pieces, rows [0, 1) and [1, n), as a range of ops that
             * leaves a frozen parameter out runs them: each finds its rows */
            const KRows piece[2] = {{0, 1}, {1, ln->list_n}};
            for (int p = 0; p < 2; p++) {
                a = cuda_multi_args(&v.kp, ln, piece[p], v.ptr, (CuDevicePtr)(uintptr_t)tab, (CuDevicePtr)(uintptr_t)lens);
                if (idx64) take_64bit_path(&a, k);
                cr_assert_eq(a.list_n, piece[p].hi - piece[p].lo);
                for (int r = 0; r < a.list_n; r++) {
                    block_y((unsigned)a.list_n, (unsigned)r);
                    run_grid(h, call_yk, sym(h, k->name), &a, grid, block);
                }
            }
            block_y(1, 0);
            multi++;
            count[k->skel]++;
            expect_launch_outputs(&v, i, ln, k, &failed, &compared, &worst_rel, &worst_ulp);
            continue;
        }
        units += k->skel == KS_COPY && a.vec > 1;
        map_units += k->skel == KS_MAP && a.vec > 1;
        bool view = false;
        for (int s = 0; s < ln->n_args; s++) view |= k->buf_strided[s];
        view_units += k->skel == KS_MAP && a.vec > 1 && view;
        run_grid(h, call_yk, sym(h, k->name), &a, grid, block);
        count[k->skel]++;
        double worst = expect_launch_outputs(&v, i, ln, k, &failed, &compared, &worst_rel, &worst_ulp);
        cr_log_info("%s launch %d %s (%s, %lld x %lld x %lld / %lld x %lld): worst %.3g", precision, i, k->name, kernel_skel_name(k->skel), (long long)ln->n,
                    (long long)ln->c, (long long)ln->inner, (long long)ln->outer, (long long)ln->len, worst);
    }
    cr_log_info("%s: %d MAP and %d COPY launches emulated (%d outputs compared, %d strided slots, %d maps and %d copies %d or more elements a thread); not run: %d "
                "CHANNEL_REDUCE and %d LIST_NORM launches (%d kernels) that need a real block; worst relative difference (fp32 storage) %.3g, worst 16-bit ulps %.3g",
                precision, count[KS_MAP], count[KS_COPY], compared, strided, map_units, units, 2, skipped[KS_CHANNEL_REDUCE], skipped[KS_LIST_NORM], skipped_kernels, worst_rel,
                worst_ulp);
    cr_expect_gt(count[KS_MAP], 0);
    /* the optimizer's updates: one multi-tensor launch per parameter group */
    cr_expect_eq(multi, 3, "%d multi-tensor launches", multi);
    free(tab), free(lens);
    /* every map of the tiny plan counts in 32 bits, unless told not to */
    cr_expect_eq(narrow, idx64 ? 0 : count[KS_MAP], "%d of %d maps in 32 bits", narrow, count[KS_MAP]);
    /* both layouts' maps take several elements a thread (8-channel multiples, planes of 64 pixels and
     * more); channels last concatenates and splits channel runs, which move in units */
    if (!idx64) cr_expect_gt(map_units, 0, "%d of %d maps took several elements a thread", map_units, count[KS_MAP]);
    if (strcmp(layout, "nhwc") == 0) cr_expect_gt(units, 0, "%d of %d copies moved units of several elements", units, count[KS_COPY]);
    /* channels-last channel slices: rows of 8-channel multiples in wider ones */
    if (strcmp(layout, "nhwc") == 0 && !idx64) cr_expect_gt(view_units, 0, "no map took several elements of a view a thread");
    cr_expect_gt(compared, 0);
    dlclose(h);
    gen_cpu_close(&gc);
    env_close(&v);
}

Test(cuda_emul, generated_kernels_match_the_cpu_fp32) { generated_vs_cpu("fp32", "nchw", EMU_GRID, EMU_BLOCK, false); }
Test(cuda_emul, generated_kernels_match_the_cpu_bf16) { generated_vs_cpu("bf16", "nchw", EMU_GRID, EMU_BLOCK, false); }
Test(cuda_emul, generated_kernels_match_the_cpu_fp16) { generated_vs_cpu("fp16", "nchw", EMU_GRID, EMU_BLOCK, false); }
/* channels last: rows of channels, per-channel loads strided by C */
Test(cuda_emul, generated_kernels_match_the_cpu_bf16_nhwc) { generated_vs_cpu("bf16", "nhwc", EMU_GRID, EMU_BLOCK, false); }
/* a stride of 35 elements: wider than some images and channels, so the
 * position's channel and image digits carry too */
Test(cuda_emul, generated_kernels_match_the_cpu_on_a_wide_grid) { generated_vs_cpu("bf16", "nchw", 5, 7, false); }
Test(cuda_emul, generated_kernels_match_the_cpu_on_a_wide_grid_nhwc) { generated_vs_cpu("bf16", "nhwc", 5, 7, false); }
/* the 64-bit path of launches too large for 32-bit indices */
Test(cuda_emul, generated_kernels_match_the_cpu_in_64bit_indices) { generated_vs_cpu("fp32", "nchw", 5, 7, true); }
Test(cuda_emul, generated_kernels_match_the_cpu_in_64bit_indices_nhwc) { generated_vs_cpu("bf16", "nhwc", 5, 7, true); }

/* ---- library kernels against the reference ---- */

/* Every library launch of the tiny plan on inputs drawn from a few values
 * (ties in every max-pool window), through the views the plan gives its
 * operands: the emulated kernel against ref_kernel(op->kind) on the same
 * stored values, packed. fp32 storage: exact. bf16 / fp16 storage: the
 * reference rounded to it, at most 1 ulp apart (one rounding); the exact
 * count is logged. Then the compute-copy cast and the unscale, when the plan
 * has them, against the host conversion and division. */
static void library_vs_reference(const char *precision, const char *layout) {
    skip_without_cxx();
    Env v;
    env_open(&v, precision, layout);
    const Graph *g = &v.p.g;
    char err[1024];
    Unit u;
    unit_begin(&u);
    for (int k = 0; k < v.lp.n_kernels; k++) {
        char *src = lib_kernel_render(&v.lp.kernels[k]);
        cr_assert_not_null(src, "%s", v.lp.kernels[k].name);
        unit_add(&u, src);
        free(src);
    }
    void *h = unit_load(&u);
    uint64_t seed = 0x2545f4914f6cdd1dULL;
    int per_kind[OP_COUNT] = {0}, launches = 0, strided = 0, failed = 0;
    int64_t elements = 0, inexact = 0;
    double worst_ulp = 0;
    void **ref = calloc((size_t)g->n_tensors, sizeof *ref);
    for (int l = 0; l < v.kp.n_launches; l++) {
        int ki = v.lp.launch_kernel[l];
        if (ki < 0) continue;
        const LibKernel *k = &v.lp.kernels[ki];
        const Op *op = &g->ops[v.kp.launches[l].op_lo];
        RefKernel rk = ref_kernel(op->kind);
        cr_assert_not_null(rk, "%s has no reference kernel", op_def(op->kind)->name);
        for (int i = 0; i <= op->n_in; i++) {
            int t = i < op->n_in ? op->in[i] : op->out[0];
            Buf *b = &v.b[t];
            cr_assert_eq(b->dt, k->dt[i], "%s operand %d", k->name, i);
            /* few levels: ties in every window (the pooled input of a max-pool gradient too) */
            fill(&v, t, i < op->n_in ? 3 + (int)(rng_next(&seed) % 3) : 0, &seed);
            strided += b->bs != 0;
            /* the reference reads packed tensors */
            int64_t numel = shape_numel(&g->tensors[t].shape);
            ref[t] = calloc((size_t)numel + 1, sizeof(float));
            cr_assert_not_null(ref[t]);
            cuda_view_gather(b->host, ref[t], numel / b->per, b->per, b->bs, sizeof(float));
            const Tensor *x = &g->tensors[t];
            if (!tensor_logical_order(x)) emul_to_nchw(ref[t], &x->shape);
        }
        cr_assert(rk(g, op, ref, err, sizeof err), "%s: %s", op_def(op->kind)->name, err);
        YlArgs a = cuda_lib_args(g, &v.p.fusion.views, op, v.ptr);
        run_threads(h, call_yl, sym(h, k->name), &a);
        for (int i = 0; i < op->n_in; i++) {
            int64_t bad = damaged(&v.b[op->in[i]], true);
            cr_expect_eq(bad, -1 - RZ, "launch %d %s input %d: element %lld outside its view changed", l, k->name, i, (long long)bad);
        }
        int t = op->out[0];
        const Buf *b = &v.b[t];
        int64_t bad = damaged(b, true);
        cr_expect_eq(bad, -1 - RZ, "launch %d %s (op %d): element %lld of its output outside the view or its span changed", l, k->name, op->id, (long long)bad);
        double tol = b->dt == DT_F32 ? 0 : 1, worst = 0;
        const Tensor *x = &g->tensors[t];
        const bool cl = !tensor_logical_order(x);
        /* a view's rows are images, or channels last its pixels: e's place among the packed elements first */
        const int64_t per_img = shape_numel(&x->shape) / x->shape.d[0];
        for (int64_t e = 0; e < b->span; e++) {
            if (!in_view(b, e)) continue;
            int64_t packed = packed_index(b, e), img = packed / per_img, r = packed % per_img;
            double want = ((float *)ref[t])[img * per_img + emul_logical(cl, cl ? x->shape.d[1] : 1, cl ? x->shape.d[2] * x->shape.d[3] : 1, r)];
            double d = diff(b, e, want, false);
            elements++;
            inexact += d > 0;
            if (d > worst) worst = d;
            if (d > tol && failed++ < 20)
                cr_log_error("launch %d %s (op %d %s) element %lld (image %lld, offset %lld): emulated %.9g, reference %.9g", l, k->name, op->id, op_def(op->kind)->name,
                             (long long)e, (long long)img, (long long)r, emu_value(b, e), want);
        }
        cr_expect_leq(worst, tol, "launch %d %s (op %d %s): differs from the reference by %.3g (%s)", l, k->name, op->id, op_def(op->kind)->name, worst,
                      b->dt == DT_F32 ? "relative" : "ulps");
        if (worst > worst_ulp) worst_ulp = worst;
        for (int i = 0; i <= op->n_in; i++) {
            int tt = i < op->n_in ? op->in[i] : op->out[0];
            free(ref[tt]);
            ref[tt] = NULL;
        }
        per_kind[op->kind]++;
        launches++;
        cr_log_info("%s launch %d %s (op %d, bs %lld/%lld/%lld): worst %.3g", precision, l, k->name, op->id, (long long)a.bs[0], (long long)a.bs[1], (long long)a.bs[2],
                    worst);
    }
    free(ref);
    char kinds[512] = "";
    size_t used = 0;
    for (int o = 0; o < OP_COUNT; o++)
        if (per_kind[o]) used += (size_t)snprintf(kinds + used, sizeof kinds - used, "%s%s x%d", used ? ", " : "", op_def((OpKind)o)->name, per_kind[o]);
    cr_log_info("%s: %d library launches (%s), %d view operands, %lld elements, %lld not bit-exact, worst %.3g", precision, launches, kinds, strided,
                (long long)elements, (long long)inexact, worst_ulp);
    printf("cuda_emul %s library: %d launches (%s), %d view operands, %lld elements, %lld not bit-exact, worst %.3g\n", precision, launches, kinds, strided,
           (long long)elements, (long long)inexact, worst_ulp);
    cr_expect_gt(launches, 0);
    if (strcmp(layout, "nchw") == 0) cr_expect_gt(strided, 0, "some operand of the tiny plan's library launches is a view");
    else cr_expect_gt(per_kind[OP_RESHAPE], 0, "the layout changes ran");

    /* the compute-copy cast over every parameter (random bits and the edge cases), and the unscale */
    if (v.lp.cast >= 0) {
        const LibKernel *k = &v.lp.kernels[v.lp.cast];
        int64_t n = 0;
        for (int t = 0; t < g->n_tensors; t++)
            if (g->tensors[t].kind == TK_PARAM) n += shape_numel(&g->tensors[t].shape);
        const float special[] = {0.0f, -0.0f, 1.00390625f, 1.01171875f, 65519.0f, 65520.0f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f, 0x1.ff8p-15f, INFINITY, -INFINITY, 1e-40f, 3.4e38f, NAN};
        n += (int64_t)(sizeof special / sizeof special[0]);
        float *x = malloc(sizeof(float) * (size_t)n);
        uint16_t *got = malloc(2 * ((size_t)n + 2 * RZ)), *want = malloc(2 * (size_t)n);
        cr_assert(x && got && want);
        memcpy(x, special, sizeof special);
        for (int64_t i = (int64_t)(sizeof special / sizeof special[0]); i < n; i++) {
            uint32_t r = (uint32_t)rng_next(&seed);
            if (i % 2) r = (r & 0x807fffffu) | ((uint32_t)(100 + r % 60) << 23); /* half of them near fp16's range */
            memcpy(&x[i], &r, 4);
        }
        for (int i = 0; i < 2 * RZ; i++) got[n + i] = POISON16;
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = x, a.t[1] = got, a.total = n;
        run_threads(h, call_yl, sym(h, k->name), &a);
        cuda_f32_to_storage(k->dt[1], x, want, n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            bool ok = isnan(x[i]) ? (got[i] & 0x7fff) > (k->dt[1] == DT_F16 ? 0x7c00 : 0x7f80) : got[i] == want[i];
            if (!ok && bad++ < 10) cr_log_error("%s element %lld: %.9g -> 0x%04x, the host rounds to 0x%04x", k->name, (long long)i, x[i], got[i], want[i]);
        }
        for (int i = 0; i < 2 * RZ; i++) bad += got[n + i] != POISON16;
        cr_expect_eq(bad, 0, "%s: %lld of %lld conversions differ from the host's (or it wrote past the end)", k->name, (long long)bad, (long long)n);
        printf("cuda_emul %s cast %s: %lld values, %lld differ\n", precision, k->name, (long long)n, (long long)bad);
        free(x), free(got), free(want);
    }
    if (v.lp.unscale >= 0) {
        const LibKernel *k = &v.lp.kernels[v.lp.unscale];
        enum { N = 10007 };
        float *gr = malloc(sizeof(float) * (N + RZ)), *want = malloc(sizeof(float) * N), scale = 65536.0f;
        cr_assert(gr && want);
        for (int i = 0; i < N; i++) gr[i] = (float)((rng_next(&seed) >> 40) * (1.0 / 16777216.0) - 0.5) * 1e5f;
        gr[0] = INFINITY, gr[1] = NAN, gr[2] = 0x1p-140f;
        for (int i = 0; i < RZ; i++) memcpy(&gr[N + i], &POISON32, 4);
        for (int i = 0; i < N; i++) want[i] = gr[i] / scale;
        YlArgs a;
        memset(&a, 0, sizeof a);
        a.t[0] = gr, a.t[1] = &scale, a.total = N;
        run_threads(h, call_yl, sym(h, k->name), &a);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += !(gr[i] == want[i] || (isnan(gr[i]) && isnan(want[i])));
        for (int i = 0; i < RZ; i++) bad += memcmp(&gr[N + i], &POISON32, 4) != 0;
        cr_expect_eq(bad, 0, "%s: %d of %d elements differ from the host's division", k->name, bad, N);
        printf("cuda_emul %s unscale %s: %d values, %d differ\n", precision, k->name, N, bad);
        free(gr), free(want);
    }
    dlclose(h);
    env_close(&v);
}

Test(cuda_emul, library_kernels_match_the_reference_fp32) { library_vs_reference("fp32", "nchw"); }
Test(cuda_emul, library_kernels_match_the_reference_bf16) { library_vs_reference("bf16", "nchw"); }
Test(cuda_emul, library_kernels_match_the_reference_fp16) { library_vs_reference("fp16", "nchw"); }
/* channels last: pooling and resize on NHWC operands, and the layout
 * changes (images and weights in, the head's levels out) */
Test(cuda_emul, library_kernels_match_the_reference_fp32_nhwc) { library_vs_reference("fp32", "nhwc"); }
Test(cuda_emul, library_kernels_match_the_reference_bf16_nhwc) { library_vs_reference("bf16", "nhwc"); }

/* ---- every library entry on odd shapes ---- */

/* Entries no model of models/ uses (average pooling, zero pad, crop) and odd
 * attributes (padding, stride, dilation, overlapping windows, non-integer
 * resize ratios, asymmetric pads), as tests/test_lib_kernels.c builds them for
 * the GPU: every op in fp32, bf16 and fp16 storage, packed and with 7
 * poisoned elements between images, NCHW and channels last, and where the
 * kernel takes a pixel stride (kernel_op_strided_rows) channels last with 5
 * poisoned elements between pixels, as a channel slice of a wider tensor
 * sits; against the reference kernel. */
/* About one element in eleven of b's view set to NaN, as stored and on the host; how many. */
static int64_t sprinkle_nans(Buf *b, uint64_t *seed) {
    int64_t n = 0;
    const float nan = NAN;
    for (int64_t e = 0; e < b->span; e++) {
        if (!in_view(b, e) || rng_next(seed) % 11) continue;
        cuda_f32_to_storage(b->dt, &nan, b->emu + (size_t)e * esize(b->dt), 1);
        ((float *)b->host)[e] = NAN;
        n++;
    }
    return n;
}

Test(cuda_emul, every_library_entry_on_odd_shapes) {
    skip_without_cxx();
    Arena ar;
    Graph g;
    lib_odd_graph(&g, &ar);
    Views views;
    char err[512];
    cr_assert(views_identity(&g, &ar, &views, err, sizeof err), "%s", err);
    const DType types[] = {DT_F32, DT_BF16, DT_F16};
    enum { NT = 3 };
    LibKernel *ks = calloc((size_t)g.n_ops * NT, sizeof *ks);
    cr_assert_not_null(ks);
    Unit u;
    unit_begin(&u);
    for (int o = 0; o < g.n_ops; o++)
        for (int ti = 0; ti < NT; ti++) {
            const Op *op = &g.ops[o];
            LibKernel *k = &ks[o * NT + ti];
            k->entry = (LibEntry)lib_entry_of(op->kind), k->n_operands = op->n_in + 1;
            for (int i = 0; i < k->n_operands; i++) k->dt[i] = types[ti];
            snprintf(k->name, sizeof k->name, "yl_odd_%d_%s", o, dt_name(types[ti]));
            char *src = lib_kernel_render(k);
            cr_assert_not_null(src);
            unit_add(&u, src);
            free(src);
        }
    void *h = unit_load(&u);
    uint64_t seed = 0x853c49e6748fea9bULL;
    int runs = 0, failed = 0, strided_ops = 0;
    int64_t elements = 0, inexact = 0, nans = 0;
    for (int o = 0; o < g.n_ops; o++)
        for (int ti = 0; ti < NT; ti++)
            for (int run = 0; run < 5; run++) {
                /* packed, with gaps between images, each in NCHW and channels last; then channels last with gaps between pixels */
                const int gap = run == 1 || run == 3 ? 7 : 0, pgap = run == 4 ? 5 : 0;
                const bool cl = run >= 2;
                const Op *op = &g.ops[o];
                if (pgap && !kernel_op_strided_rows(op->kind)) continue;
                strided_ops += pgap && ti == 0;
                const LibKernel *k = &ks[o * NT + ti];
                YlArgs a = lib_launch_args(&g, &views, op);
                if (cl) a.cl = (1 << k->n_operands) - 1;
                Buf b[YL_MAX_OPERANDS];
                void **ref = calloc((size_t)g.n_tensors, sizeof *ref);
                cr_assert_not_null(ref);
                int64_t nimg = g.tensors[op->out[0]].shape.d[0];
                for (int i = 0; i < k->n_operands; i++) {
                    int t = i < op->n_in ? op->in[i] : op->out[0];
                    const Shape *ts = &g.tensors[t].shape;
                    int64_t numel = shape_numel(ts), plane = ts->d[2] * ts->d[3];
                    /* rows: images, or with gaps between pixels the pixels of every image */
                    int64_t rows = pgap ? numel / ts->d[1] : nimg;
                    b[i] = (Buf){.dt = types[ti], .per = pgap ? ts->d[1] : numel / nimg};
                    b[i].bs = gap || pgap ? b[i].per + gap + pgap : 0;
                    b[i].span = b[i].bs ? (rows - 1) * b[i].bs + b[i].per : numel;
                    b[i].emu_base = calloc((size_t)(b[i].span + 2 * RZ), esize(b[i].dt));
                    b[i].host = calloc((size_t)b[i].span + 1, sizeof(float));
                    ref[t] = calloc((size_t)numel + 1, sizeof(float));
                    cr_assert(b[i].emu_base && b[i].host && ref[t]);
                    b[i].emu = b[i].emu_base + RZ * esize(b[i].dt);
                    /* the first max pool reads two levels only: windows full of ties */
                    fill_buf(&b[i], i < op->n_in ? (o == 0 ? 2 : 3 + (int)(rng_next(&seed) % 3)) : 0, -1.0f, &seed);
                    /* gapped runs: NaNs in a max pool's input win their windows (the last of several) */
                    bool pooled = (op->kind == OP_MAXPOOL2D && i == 0) || (op->kind == OP_MAXPOOL2D_BWD && i == 1);
                    if (pooled && (gap || pgap)) nans += sprinkle_nans(&b[i], &seed);
                    cuda_view_gather(b[i].host, ref[t], rows, b[i].per, b[i].bs, sizeof(float));
                    if (cl) emul_to_nchw(ref[t], ts);
                    a.t[i] = b[i].emu;
                    a.bs[i] = pgap ? plane * b[i].bs : gap ? b[i].bs : b[i].per;
                    if (cl) a.ps[i] = pgap ? b[i].bs : ts->d[1];
                }
                cr_assert(ref_kernel(op->kind)(&g, op, ref, err, sizeof err), "%s", err);
                run_threads(h, call_yl, sym(h, k->name), &a);
                const Buf *ob = &b[op->n_in];
                float *want = ref[op->out[0]];
                const Shape *os = &g.tensors[op->out[0]].shape;
                const int64_t out_per = shape_numel(os) / nimg;
                double tol = ob->dt == DT_F32 ? 0 : 1, worst = 0;
                for (int64_t e = 0; e < ob->span; e++) {
                    if (!in_view(ob, e)) continue;
                    /* e's place among the packed elements, as stored: its image and the offset there */
                    int64_t packed = packed_index(ob, e), img = packed / out_per, r = packed % out_per;
                    int64_t at = img * out_per + emul_logical(cl, os->d[1], os->d[2] * os->d[3], r);
                    double d = diff(ob, e, want[at], false);
                    elements++;
                    inexact += d > 0;
                    if (d > worst) worst = d;
                    if (d > tol && failed++ < 20)
                        cr_log_error("%s (%s, gap %d, pixel gap %d%s) element %lld (image %lld, offset %lld): emulated %.9g, reference %.9g", k->name,
                                     op_def(op->kind)->name, gap, pgap, cl ? ", channels last" : "", (long long)e, (long long)img, (long long)r, emu_value(ob, e), want[at]);
                }
                cr_expect_leq(worst, tol, "%s (%s storage, gap %d, pixel gap %d%s): differs from the reference by %.3g", op_def(op->kind)->name, dt_name(types[ti]),
                              gap, pgap, cl ? ", channels last" : "", worst);
                for (int i = 0; i < k->n_operands; i++) {
                    int64_t bad = damaged(&b[i], true);
                    cr_expect_eq(bad, -1 - RZ, "%s (%s, gap %d, pixel gap %d) operand %d: element %lld outside its view changed", op_def(op->kind)->name,
                                 dt_name(types[ti]), gap, pgap, i, (long long)bad);
                    free(b[i].emu_base), free(b[i].host);
                }
                for (int t = 0; t < g.n_tensors; t++) free(ref[t]);
                free(ref);
                runs++;
            }
    printf("cuda_emul odd shapes: %d ops x 3 storage types x packed/gapped x NCHW/channels last, and %d ops with gaps between channels-last pixels = %d runs, %lld "
           "elements, %lld not bit-exact; %lld NaNs in max-pool inputs\n",
           g.n_ops, strided_ops, runs, (long long)elements, (long long)inexact, (long long)nans);
    cr_expect_gt(nans, 0, "some max-pool window holds a NaN");
    cr_log_info("odd shapes: %d runs, %lld elements, %lld not bit-exact", runs, (long long)elements, (long long)inexact);
    cr_expect_gt(strided_ops, 3, "pooling and resize take pixel strides");
    cr_expect_eq(runs, g.n_ops * NT * 4 + strided_ops * NT);
    dlclose(h);
    free(ks);
    arena_free(&ar);
}

/* ---- the library kernels' index arithmetic ---- */

/* The multiply-and-shift division of templates/cuda/lib/common.cuh against
 * C's, for every divisor up to 3000 and divisors at and around each power of
 * two up to 2^32 - 1 (the ones whose magic number is largest), on dividends
 * at the edges (0, around multiples of the divisor, 2^32 - 1) and random
 * ones; and the grid-stride walk over images (yl_each_in_images) on grids
 * whose stride is smaller than, equal to and larger than an image, against
 * i / per and i % per for every index each emulated thread should own. */
Test(cuda_emul, library_index_division_by_multiply_and_shift_is_exact) {
    skip_without_cxx();
    LibKernel k = {.entry = LK_CAST, .n_operands = 2, .dt = {DT_F32, DT_BF16}, .name = "yl_index_cast"};
    char *src = lib_kernel_render(&k);
    cr_assert_not_null(src);
    const char *probe = "\nextern \"C\" __attribute__((visibility(\"default\"))) unsigned yl_probe_quot(unsigned x, long long d) { return yl_quot(x, yl_div_by(d)); }\n"
                        "extern \"C\" __attribute__((visibility(\"default\"))) long long yl_probe_walk(long long total, long long per, long long *ns, long long *rs, long long cap) {\n"
                        "    YlArgs a = {};\n    a.total = total;\n    long long k = 0;\n"
                        "    yl_each_in_images(a, per, [&](long long n, long long r) { if (k < cap) ns[k] = n, rs[k] = r; k++; });\n    return k;\n}\n";
    size_t len = strlen(src) + strlen(probe) + 1;
    char *text = malloc(len);
    cr_assert_not_null(text);
    snprintf(text, len, "%s%s", src, probe);
    free(src);
    void *h = emul_build(text, strlen(text), "the index probes");
    free(text);
    unsigned (*quot)(unsigned, long long) = (unsigned (*)(unsigned, long long))dlsym(h, "yl_probe_quot");
    long long (*walk)(long long, long long, long long *, long long *, long long) =
        (long long (*)(long long, long long, long long *, long long *, long long))dlsym(h, "yl_probe_walk");
    void (*thread)(unsigned, unsigned, unsigned, unsigned) = (void (*)(unsigned, unsigned, unsigned, unsigned))dlsym(h, "yk_emu_thread");
    cr_assert(quot && walk && thread);

    int64_t divisors[3000 + 32 * 3 + 64];
    int nd = 0;
    for (int64_t d = 1; d <= 3000; d++) divisors[nd++] = d;
    for (int s = 12; s <= 32; s++)
        for (int64_t e = -1; e <= 1; e++)
            if (((int64_t)1 << s) + e < ((int64_t)1 << 32)) divisors[nd++] = ((int64_t)1 << s) + e;
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 64; i++) divisors[nd++] = 1 + (int64_t)(rng_next(&seed) % 0xffffffffULL);
    const uint32_t max = 0xffffffffu;
    int64_t checked = 0, wrong = 0;
    for (int i = 0; i < nd; i++) {
        const uint32_t d = (uint32_t)divisors[i], top = max / d;
        uint32_t xs[40] = {0, 1, d - 1, d, max, max - 1, top * d, top * d - 1, (top - 1) * d, (top - 1) * d + d - 1};
        int nx = 10;
        while (nx < 40) xs[nx++] = (uint32_t)rng_next(&seed);
        for (int j = 0; j < nx; j++, checked++)
            if (quot(xs[j], d) != xs[j] / d && wrong++ < 5) cr_log_error("%u / %u: %u, not %u", xs[j], d, quot(xs[j], d), xs[j] / d);
    }
    cr_log_info("cuda_emul index: %d divisors, %lld quotients, %lld wrong", nd, (long long)checked, (long long)wrong);
    cr_expect_eq(wrong, 0);

    /* grids of 1 x 1 (stride 1), 2 x 3 (6) and 5 x 7 (35) threads over images of 1, 6, 7 and 40 elements */
    const unsigned grids[][2] = {{1, 1}, {2, 3}, {5, 7}};
    const long long pers[] = {1, 6, 7, 40}, total = 123;
    long long ns[200], rs[200];
    for (int gi = 0; gi < 3; gi++)
        for (int pi = 0; pi < 4; pi++)
            for (unsigned b = 0; b < grids[gi][0]; b++)
                for (unsigned t = 0; t < grids[gi][1]; t++) {
                    thread(grids[gi][0], grids[gi][1], b, t);
                    const long long first = b * grids[gi][1] + t, step = grids[gi][0] * grids[gi][1], per = pers[pi];
                    const long long got = walk(total, per, ns, rs, 200), want = first < total ? (total - first + step - 1) / step : 0;
                    cr_assert_eq(got, want, "grid %ux%u thread %u.%u, images of %lld: %lld elements, not %lld", grids[gi][0], grids[gi][1], b, t, per, got, want);
                    for (long long e = 0; e < got; e++) {
                        const long long i = first + e * step;
                        cr_assert(ns[e] == i / per && rs[e] == i % per, "grid %ux%u thread %u.%u, images of %lld: element %lld is (%lld, %lld), not (%lld, %lld)",
                                  grids[gi][0], grids[gi][1], b, t, per, i, ns[e], rs[e], i / per, i % per);
                    }
                }
}

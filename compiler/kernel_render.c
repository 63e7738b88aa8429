/* compiler/kernel_render.c — renders kernel IR into the skeletons of
 * templates/c and templates/cuda. The two targets differ only in how a
 * buffer is loaded and stored (C: fp32 storage; CUDA: the plan's storage
 * types) and in the skeletons; instructions render identically. */
#include "kernel_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_reuse.h"
#include "templates.h"

typedef struct Out {
    FILE *f;
    bool ok;
} Out;

/* Writes template `path` with each @KEY@ replaced by its value. */
static void emit_template(Out *o, const char *path, const char *const *kv, int n_kv) {
    size_t len;
    const char *t = template_get(path, &len);
    if (!t) {
        o->ok = false;
        return;
    }
    for (size_t i = 0; i < len;) {
        if (t[i] == '@') {
            size_t j = i + 1;
            while (j < len && t[j] != '@' && t[j] != '\n') j++;
            bool done = false;
            for (int k = 0; j < len && t[j] == '@' && k < n_kv && !done; k++)
                if (strlen(kv[2 * k]) == j - i - 1 && strncmp(kv[2 * k], t + i + 1, j - i - 1) == 0) {
                    fputs(kv[2 * k + 1], o->f);
                    i = j + 1;
                    done = true;
                }
            if (done) continue;
        }
        fputc(t[i++], o->f);
    }
}

static const char *dtype_tag(DType d) { return d == DT_BF16 ? "bf16" : d == DT_F16 ? "f16" : "f32"; }

/* Where a load or store of an element buffer starts: i when packed; for a
 * view (a strided slot, inside a wider buffer) the element's place in its
 * row, bs[slot] elements per row: every skeleton has the element's n, c and
 * k in hand. The CUDA map's array form takes V elements from there as a
 * whole (yk_ldv / yk_stv), packed or strided: the launch takes V > 1 only
 * where a view's row stride keeps its rows on V-element boundaries. */
static const char *elem_text_at(const Kernel *k, KTarget tg, const KInstr *in, const char *i, const char *n, const char *kk, char *buf, size_t cap) {
    /* CUDA: in the skeleton's index type I (32-bit where the launch allows: YkArgs.idx32) */
    if (k->buf_strided[in->buf]) snprintf(buf, cap, "%s * %sa.bs[%d] + c * inner_ + %s", n, tg == KT_CUDA ? "(I)" : "", in->buf, kk);
    else snprintf(buf, cap, "%s", i);
    return buf;
}

static const char *elem_text(const Kernel *k, KTarget tg, const KInstr *in, char *buf, size_t cap) { return elem_text_at(k, tg, in, "i", "n", "k", buf, cap); }

/* Index of a load or store: an element's (elem_text), a channel vector's
 * entry at the element's channel (array form: element v's), the channel's
 * first element (n = k = 0: the same place packed or strided), or fixed. */
static void index_text(const Kernel *k, KTarget tg, const KInstr *in, bool arr, char *buf, size_t cap) {
    if (in->at == KA_ELEM) elem_text(k, tg, in, buf, cap);
    else if (in->at == KA_CHAN) snprintf(buf, cap, arr ? "c + v * cstep_" : "c");
    else if (in->at == KA_FIRST) snprintf(buf, cap, arr ? "(c + v * cstep_) * inner_" : "c * inner_");
    else snprintf(buf, cap, "%lld", (long long)in->imm);
}

static void load_text(const Kernel *k, KTarget tg, const KInstr *in, bool arr, char *buf, size_t cap) {
    char idx[96];
    index_text(k, tg, in, arr, idx, sizeof idx);
    if (tg == KT_CUDA) snprintf(buf, cap, "yk_ld_%s(a.t[%d], %s)", dtype_tag(k->buf_dtype[in->buf]), in->buf, idx);
    else snprintf(buf, cap, "((const float *)a.t[%d])[%s]", in->buf, idx);
}

static const char *const FN1[KI_COUNT_OPS] = {[KI_EXP] = "yk_exp", [KI_SQRT] = "yk_sqrt", [KI_ERF] = "yk_erf", [KI_SIGMOID] = "yk_sigmoid"};
static const char *const OP2[KI_COUNT_OPS] = {[KI_ADD] = "+", [KI_SUB] = "-", [KI_MUL] = "*", [KI_DIV] = "/"};

/* Which part of a section to write: all of it, or the channel-invariant
 * part and the per-element part separately; the CUDA map assigns the
 * invariant part to registers declared before its loop (PART_DECLARE),
 * again only when the thread's channel changes (PART_CHANNEL_ASSIGN). The
 * CUDA reduction takes U_ rows at once (reduce_unroll): their element
 * loads first, raw, into w<buf>[u_] (PART_ELEM_LOADS), so that all are in
 * flight before any is waited on; then each row's per-element part in row
 * order, as one row at a time did: it unpacks them, adds to the fp64 sums
 * and stores only where the row is in range (PART_ELEM_AFTER_LOADS). */
typedef enum { PART_ALL, PART_CHANNEL, PART_ELEMENT, PART_DECLARE, PART_CHANNEL_ASSIGN, PART_ELEM_LOADS, PART_ELEM_AFTER_LOADS } Part;

/* Whether element load r of section s is the first of its buffer's there:
 * PART_ELEM_LOADS loads each buffer once a row, into w<buf>, ahead of the
 * rows' work. Right because a section's loads of a buffer come before its
 * stores to it (a row reads its elements before writing them back, as the
 * optimizer's in-place updates do); *stale is set where a load follows a
 * store, which would read what the row wrote, and the kernel is refused. */
static bool first_elem_load(const Kernel *k, KSection s, int r, bool *stale) {
    const KInstr *in = &k->code[s.first + r];
    bool first = true;
    for (int q = 0; q < r; q++) {
        const KInstr *o = &k->code[s.first + q];
        if (o->buf != in->buf || o->at != KA_ELEM) continue;
        if (o->op == KI_STORE) *stale = true;
        if (o->op == KI_LOAD) first = false;
    }
    return first;
}

/* One section; body registers are r<N> of type yk_real, finalize registers
 * f<N> of type double. arr: the CUDA form, each register an array of its V
 * elements (r<N>[v]) and each instruction a loop over them; a packed
 * element buffer is loaded and stored V elements at once. lane: a CUDA
 * reduction's sums and variables, one of each per channel v of the thread
 * (acc_[s][v], var_[s][v]), its finalize run for each v. */
static void emit_section(Out *o, const Kernel *k, KTarget tg, KSection s, bool finalize, const char *indent, Part part, bool arr, bool lane) {
    const char p = finalize ? 'f' : 'r', *type = finalize ? "double" : "yk_real", *el = arr ? "[v]" : "", *lv = lane ? "[v]" : "";
    char a[192], idx[96], head[96], x[4][24];
    bool *inv = calloc((size_t)s.n + 1, sizeof(bool));
    if (!inv) {
        o->ok = false;
        return;
    }
    kernel_channel_invariant(k, s, inv);
    bool channel = part == PART_CHANNEL || part == PART_DECLARE || part == PART_CHANNEL_ASSIGN, declared = false;
    const bool element = part == PART_ELEMENT || part == PART_ELEM_LOADS || part == PART_ELEM_AFTER_LOADS;
    for (int r = 0; r < s.n; r++) {
        const KInstr *in = &k->code[s.first + r];
        if ((channel && !inv[r]) || (element && inv[r])) continue;
        const bool whole = arr && in->at == KA_ELEM && (in->op == KI_LOAD || in->op == KI_STORE); /* V elements in one access */
        if (part == PART_ELEM_LOADS) {
            bool stale = false;
            if (whole && in->op == KI_LOAD && first_elem_load(k, s, r, &stale)) {
                const char *t = dtype_tag(k->buf_dtype[in->buf]);
                fprintf(o->f, "%syk_pack_t<yk_%s_t, V> w%d[U_];\n", indent, t, in->buf);
                fprintf(o->f, "%sfor (int u_ = 0; u_ < U_; u_++) w%d[u_] = yk_ldraw<yk_%s_t, V>(a.t[%d], ok_[u_], %s);\n", indent, in->buf, t, in->buf,
                        elem_text_at(k, tg, in, "iu_[u_]", "nu_[u_]", "ku_[u_]", idx, sizeof idx));
            }
            o->ok &= !stale;
            continue;
        }
        if (part == PART_DECLARE) {
            if (declared) fputs(", ", o->f);
            else fprintf(o->f, "%s%s ", indent, type);
            fprintf(o->f, "%c%d%s", p, r, arr ? "[V]" : "");
            declared = true;
            continue;
        }
        const char *vloop = arr ? "for (int v = 0; v < V; v++) " : "";
        if (part == PART_CHANNEL_ASSIGN) snprintf(head, sizeof head, "%s%c%d%s = ", vloop, p, r, el);
        else if (arr) snprintf(head, sizeof head, "%s %c%d[V];\n%s%s%c%d[v] = ", type, p, r, indent, vloop, p, r);
        else snprintf(head, sizeof head, "const %s %c%d = ", in->op == KI_ACC ? "double" : type, p, r);
        const int ops[4] = {in->a, in->b, in->c, in->d};
        for (int j = 0; j < 4; j++) snprintf(x[j], sizeof x[j], "%c%d%s", p, ops[j], el);
        fputs(indent, o->f);
        switch (in->op) {
        case KI_LOAD:
            if (whole && part == PART_ELEM_AFTER_LOADS) {
                fprintf(o->f, "%s %c%d[V];\n%syk_unpackv<yk_%s_t, V>(w%d[u_], %c%d);\n", type, p, r, indent, dtype_tag(k->buf_dtype[in->buf]), in->buf, p, r);
                break;
            }
            if (whole) {
                fprintf(o->f, "%s %c%d[V];\n%syk_ldv<yk_%s_t, V>(a.t[%d], %s, %c%d);\n", type, p, r, indent, dtype_tag(k->buf_dtype[in->buf]), in->buf, elem_text(k, tg, in, idx, sizeof idx), p, r);
                break;
            }
            load_text(k, tg, in, arr, a, sizeof a);
            fprintf(o->f, "%s(%s)%s;\n", head, type, a);
            break;
        case KI_STORE:
            if (whole) {
                if (part == PART_ELEM_AFTER_LOADS) fputs("if (ok_[u_]) ", o->f);
                fprintf(o->f, "yk_stv<yk_%s_t, V>(a.t[%d], %s, %c%d);\n", dtype_tag(k->buf_dtype[in->buf]), in->buf, elem_text(k, tg, in, idx, sizeof idx), p, in->a);
                break;
            }
            index_text(k, tg, in, arr, idx, sizeof idx);
            if (tg == KT_CUDA) fprintf(o->f, "%syk_st_%s(a.t[%d], %s, (float)%s);\n", vloop, dtype_tag(k->buf_dtype[in->buf]), in->buf, idx, x[0]);
            else fprintf(o->f, "((float *)a.t[%d])[%s] = (float)%s;\n", in->buf, idx, x[0]);
            break;
        case KI_CONST: fprintf(o->f, "%s(%s)%.17g;\n", head, type, in->imm); break;
        case KI_ACC: fprintf(o->f, "%sacc_[%d]%s;\n", head, in->b, lv); break;
        case KI_COUNT: fprintf(o->f, "%s(%s)count_;\n", head, type); break;
        case KI_VAR: fprintf(o->f, "%s(%s)var_[%d]%s;\n", head, type, in->b, lv); break;
        /* a CUDA reduction stores only the variables its finalize sets, so the others need no register */
        case KI_SETVAR:
            if (lane) fprintf(o->f, "vars_[c * YK_RED_VARS + %d] = var_[%d][v] = %s;\n", in->b, in->b, x[0]);
            else fprintf(o->f, "var_[%d] = %s;\n", in->b, x[0]);
            break;
        case KI_ACCUM:
            /* a row past the end adds +0 (without a branch): the sums start at +0, so are never -0, and stay as they were */
            if (part == PART_ELEM_AFTER_LOADS) fprintf(o->f, "%sacc_[%d]%s += (double)(ok_[u_] ? %s : (yk_real)0);\n", vloop, in->b, lv, x[0]);
            else if (tg == KT_C) fprintf(o->f, "lane_acc_[%d][l_] += (double)%s;\n", in->b, x[0]); /* the C reduction's lanes (reduce_phase.c) */
            else fprintf(o->f, "%sacc_[%d]%s += (double)%s;\n", vloop, in->b, lv, x[0]);
            break;
        case KI_INC_I64: fprintf(o->f, "if (c == 0) ((long long *)a.t[%d])[0] += 1;\n", in->buf); break;
        case KI_NEG: fprintf(o->f, "%s-%s;\n", head, x[0]); break;
        case KI_F32: fprintf(o->f, "%s(%s)(float)%s;\n", head, type, x[0]); break;
        case KI_EXP: case KI_SQRT: case KI_ERF: case KI_SIGMOID: fprintf(o->f, "%s%s(%s);\n", head, FN1[in->op], x[0]); break;
        case KI_ADD: case KI_SUB: case KI_MUL: case KI_DIV: fprintf(o->f, "%s%s %s %s;\n", head, x[0], OP2[in->op], x[1]); break;
        case KI_POW: fprintf(o->f, "%syk_pow(%s, %s);\n", head, x[0], x[1]); break;
        case KI_SEL_GT: case KI_SEL_GE: fprintf(o->f, "%s%s %s %s ? %s : %s;\n", head, x[0], in->op == KI_SEL_GT ? ">" : ">=", x[1], x[2], x[3]); break;
        default: o->ok = false;
        }
    }
    if (declared) fputs(";\n", o->f);
    free(inv);
}

/* Rows a CUDA reduction's thread loads at once in a phase: enough that
 * about REDUCE_ROW_BYTES are in flight a thread (BN statistics read 8 bytes
 * a row, so 4 rows; BN backward 16, so 2), at most 4, since the loaded rows
 * stay in registers next to the fp64 sums and variables. */
enum { REDUCE_ROW_BYTES = 32 };
static int reduce_unroll(const Kernel *k, KSection s) {
    int bytes = 0;
    bool stale = false;
    for (int r = 0; r < s.n; r++) {
        const KInstr *in = &k->code[s.first + r];
        if (in->op == KI_LOAD && in->at == KA_ELEM && first_elem_load(k, s, r, &stale))
            bytes += kernel_elem_vec(k) * kernel_storage_bytes(k->buf_dtype[in->buf]);
    }
    int u = 1;
    while (u < 4 && (u * 2) * bytes <= REDUCE_ROW_BYTES) u *= 2;
    return u;
}

/* Renders a section into a malloc'd string (a template value). */
static char *section_text(const Kernel *k, KTarget tg, KSection s, bool finalize, const char *indent, Part part, bool arr, bool lane) {
    char *buf = NULL;
    size_t len = 0;
    Out o = {open_memstream(&buf, &len), true};
    if (!o.f) return NULL;
    emit_section(&o, k, tg, s, finalize, indent, part, arr, lane);
    fclose(o.f);
    if (!o.ok) {
        free(buf);
        return NULL;
    }
    if (len && buf[len - 1] == '\n') buf[len - 1] = 0; /* the template supplies the line end */
    return buf;
}

/* A CUDA map's entry for multi-tensor launches: block row blockIdx.y runs
 * row blockIdx.y of a.list as a [1, 1, len] map (a flat kernel has nothing
 * per channel). The C target calls the map once per row instead (gen_cpu). */
static char *multi_rows_text(const Kernel *k) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    const int v = kernel_elem_vec(k);
    fprintf(f, "    if (a.list_n) { /* a multi-tensor launch: row blockIdx.y of a.list, %d tensors a row */\n", k->n_bufs);
    fprintf(f, "        const long long row_ = blockIdx.y * %dLL;\n        YkArgs r = a;\n", k->n_bufs);
    for (int s = 0; s < k->n_bufs; s++) fprintf(f, "        r.t[%d] = a.list[row_ + %d];\n", s, s);
    fprintf(f, "        r.n = r.c = 1, r.inner = a.list_len[row_];\n");
    fprintf(f, "        if (r.vec == %d && r.idx32) %s_run<%d, int>(r);\n        else %s_run<1, long long>(r);\n        return;\n    }\n", v, k->name, v, k->name);
    fclose(f);
    return buf;
}

static void emit_kernel(Out *o, const Kernel *k, KTarget tg) {
    const char *ext = tg == KT_CUDA ? "cu" : "c", *dir = tg == KT_CUDA ? "cuda" : "c";
    const char *body_indent = tg == KT_CUDA ? (k->skel == KS_MAP ? "        " : "                ") : (k->skel == KS_MAP ? "                " : "                        ");
    const char *fin_indent = "            ", *chan_indent = "            ";
    char path[64];
    switch (k->skel) {
    case KS_MAP: {
        /* both targets compute a channel's invariant part once: C per
         * channel loop, CUDA when the thread's channel changes */
        const bool arr = tg == KT_CUDA;
        char *body = section_text(k, tg, k->body[0], false, body_indent, PART_ELEMENT, arr, false);
        char *chan = section_text(k, tg, k->body[0], false, chan_indent, tg == KT_C ? PART_CHANNEL : PART_CHANNEL_ASSIGN, arr, false);
        char *decl = tg == KT_CUDA ? section_text(k, tg, k->body[0], false, "    ", PART_DECLARE, arr, false) : strdup("");
        char vec[16];
        snprintf(vec, sizeof vec, "%d", kernel_elem_vec(k));
        char *rows = tg == KT_CUDA && k->multi ? multi_rows_text(k) : strdup("");
        const char *kv[] = {"NAME", k->name, "BODY", body ? body : "", "CHAN", chan ? chan : "", "DECL", decl ? decl : "", "VEC", vec, "ROWS", rows ? rows : ""};
        snprintf(path, sizeof path, "%s/map.%s", dir, ext);
        emit_template(o, path, kv, 6);
        o->ok &= body && chan && decl && rows;
        free(rows);
        free(body);
        free(chan);
        free(decl);
        break;
    }
    case KS_CHANNEL_REDUCE: {
        /* CUDA: a thread takes V adjacent channels, its registers, sums and variables one per channel */
        const bool arr = tg == KT_CUDA;
        char nvars[16], vec[16];
        snprintf(nvars, sizeof nvars, "%d", k->n_vars > 0 ? k->n_vars : 1);
        snprintf(vec, sizeof vec, "%d", kernel_elem_vec(k));
        const char *kv[] = {"NAME", k->name, "NVARS", nvars, "VEC", vec};
        snprintf(path, sizeof path, "%s/reduce_begin.%s", dir, ext);
        emit_template(o, path, kv, 3);
        for (int ph = 0; ph < k->n_phases; ph++) {
            /* each thread keeps its channels, so both targets compute their invariant part once */
            char *body = section_text(k, tg, k->body[ph], false, arr ? "                    " : body_indent, arr ? PART_ELEM_AFTER_LOADS : PART_ELEMENT, arr, arr),
                 *fin = section_text(k, tg, k->finalize[ph], true, arr ? "                " : fin_indent, PART_ALL, false, arr);
            char *chan = section_text(k, tg, k->body[ph], false, chan_indent, PART_CHANNEL, arr, arr);
            char *loads = arr ? section_text(k, tg, k->body[ph], false, body_indent, PART_ELEM_LOADS, arr, arr) : strdup("");
            char naccs[16], used[16], phase[16], unroll[16];
            snprintf(unroll, sizeof unroll, "%d", reduce_unroll(k, k->body[ph]));
            snprintf(naccs, sizeof naccs, "%d", k->n_accs[ph] > 0 ? k->n_accs[ph] : 1);
            snprintf(used, sizeof used, "%d", k->n_accs[ph]);
            snprintf(phase, sizeof phase, "%d", ph);
            const char *pv[] = {"NACCS", naccs, "NACCS_USED", used, "LOOP_N", k->body[ph].n ? "a.n" : "0", "BODY", body ? body : "", "FINALIZE", fin ? fin : "",
                                "CHAN", chan ? chan : "", "PHASE", phase, "LOADS", loads ? loads : "", "UNROLL", unroll};
            snprintf(path, sizeof path, "%s/reduce_phase.%s", dir, ext);
            emit_template(o, path, pv, 9);
            o->ok &= body && fin && chan && loads;
            free(loads);
            free(body);
            free(fin);
            free(chan);
        }
        snprintf(path, sizeof path, "%s/reduce_end.%s", dir, ext);
        emit_template(o, path, kv, 3);
        break;
    }
    case KS_LIST_NORM: {
        char *fin = section_text(k, tg, k->finalize[0], true, "        ", PART_ALL, false, false);
        const char *kv[] = {"NAME", k->name, "FINALIZE", fin ? fin : ""};
        snprintf(path, sizeof path, "%s/list_norm.%s", dir, ext);
        emit_template(o, path, kv, 2);
        o->ok &= fin != NULL;
        free(fin);
        break;
    }
    case KS_COPY: {
        char esize[16];
        snprintf(esize, sizeof esize, "%d", kernel_storage_bytes(k->buf_dtype[0]));
        const char *kv[] = {"NAME", k->name, "SRC", dtype_tag(k->buf_dtype[0]), "DST", dtype_tag(k->buf_dtype[1]), "SAME",
                            k->buf_dtype[0] == k->buf_dtype[1] ? "1" : "0", "ESIZE", esize};
        snprintf(path, sizeof path, "%s/copy.%s", dir, ext);
        emit_template(o, path, kv, 5);
        break;
    }
    default: o->ok = false;
    }
}

static void emit_prelude(Out *o, KTarget tg) {
    size_t len;
    const char *abi = template_get("kernel_abi.h", &len);
    if (!abi) {
        o->ok = false;
        return;
    }
    char *abi_text = strndup(abi, len);
    if (!abi_text) {
        o->ok = false;
        return;
    }
    if (abi_text[0] && abi_text[strlen(abi_text) - 1] == '\n') abi_text[strlen(abi_text) - 1] = 0;
    const char *kv[] = {"ABI", abi_text};
    emit_template(o, tg == KT_CUDA ? "cuda/prelude.cu" : "c/prelude.h", kv, 1);
    free(abi_text);
}

static char *render(const KProgram *kp, const Kernel *one, KTarget tg, bool reuse) {
    char *buf = NULL;
    size_t len = 0;
    Out o = {open_memstream(&buf, &len), true};
    if (!o.f) return NULL;
    emit_prelude(&o, tg);
    if (one) emit_kernel(&o, one, tg);
    for (int i = 0; kp && i < kp->n_kernels; i++) {
        Kernel r;
        const bool rewritten = reuse && kernel_reuse_phase_value(&kp->kernels[i], &r);
        emit_kernel(&o, rewritten ? &r : &kp->kernels[i], tg);
        if (rewritten) kernel_reuse_free(&r);
    }
    fclose(o.f);
    if (!o.ok) {
        free(buf);
        return NULL;
    }
    return buf;
}

char *kernel_render_c_unit(const KProgram *kp, bool reuse_phase_values) { return render(kp, NULL, KT_C, reuse_phase_values); }

char *kernel_render_cuda(const Kernel *k) { return render(NULL, k, KT_CUDA, false); }

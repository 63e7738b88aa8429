/* runtime/gen_cpu.c — loads the CPU target's kernels from a plan and calls
 * them. The plan's program is lowered again here; the SHA-256 of its C source
 * must equal the one the shared object was built from, so launches and
 * kernels cannot disagree. Must not schedule ops or touch library kernels. */
#include "gen_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../compiler/codegen.h"

bool gen_cpu_open(GenCpu *gc, const Plan *p, char *err, int errcap) {
    memset(gc, 0, sizeof *gc);
    if (!p->kernels) return snprintf(err, (size_t)errcap, "the plan carries no kernels (compile it with --target cpu)"), false;
    cJSON *idx = NULL;
    const unsigned char *blobs;
    size_t blobs_len;
    if (!codegen_parse_section(p->kernels, p->kernels_len, &idx, &blobs, &blobs_len, err, errcap)) return false;
    bool ok = false;
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(idx, "target"), *sha = cJSON_GetObjectItemCaseSensitive(idx, "source_sha256");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(idx, "so");
    char hex[65];
    if (strcmp(target->valuestring, "cpu") != 0) {
        snprintf(err, (size_t)errcap, "the plan's kernels are for the %s target, not the CPU", target->valuestring);
    } else if (!cJSON_IsString(sha) || !so) {
        snprintf(err, (size_t)errcap, "the plan's CPU kernels lack their source hash or shared object");
    } else if (kernel_lower(&p->g, &p->fusion, p->precision, &gc->kp, err, errcap) && codegen_c_source_hash(&gc->kp, hex, err, errcap)) {
        if (strcmp(hex, sha->valuestring) != 0) {
            snprintf(err, (size_t)errcap, "the plan's kernels were generated from other source than this yolocc generates for it (recompile the plan)");
        } else {
            size_t off = (size_t)cJSON_GetObjectItemCaseSensitive(so, "offset")->valuedouble, n = (size_t)cJSON_GetObjectItemCaseSensitive(so, "bytes")->valuedouble;
            ok = kernel_so_open(&gc->so, blobs + off, n, err, errcap);
        }
    }
    cJSON_Delete(idx);
    if (!ok) return gen_cpu_close(gc), false;
    gc->fusion = &p->fusion;
    gc->fn = calloc((size_t)gc->kp.n_kernels + 1, sizeof *gc->fn);
    gc->list = calloc((size_t)gc->kp.n_list + 1, sizeof *gc->list);
    gc->list_len = calloc((size_t)gc->kp.n_list + 1, sizeof *gc->list_len);
    if (!gc->fn || !gc->list || !gc->list_len) return gen_cpu_close(gc), snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int j = 0; j < gc->kp.n_list; j++) gc->list_len[j] = (long long)gc->kp.list_len[j];
    for (int i = 0; i < gc->kp.n_kernels; i++) {
        void *sym = kernel_so_sym(&gc->so, gc->kp.kernels[i].name);
        if (!sym) return snprintf(err, (size_t)errcap, "kernel %s is missing from the plan's shared object", gc->kp.kernels[i].name), gen_cpu_close(gc), false;
        /* POSIX guarantees dlsym results convert to function pointers */
        memcpy(&gc->fn[i], &sym, sizeof sym);
    }
    return true;
}

void gen_cpu_close(GenCpu *gc) {
    kernel_program_free(&gc->kp);
    kernel_so_close(&gc->so);
    free(gc->fn);
    free(gc->list);
    free(gc->list_len);
    memset(gc, 0, sizeof *gc);
}

void gen_cpu_launch(const GenCpu *gc, const KLaunch *ln, KRows rows, void **buf) {
    YkArgs a = kernel_launch_args(ln);
    if (kernel_is_multi(&gc->kp, ln)) {
        /* the C map is a loop over its elements already: one call per row */
        for (int r = rows.lo; r < rows.hi; r++) {
            const int *t = kernel_row_args(&gc->kp, ln, r);
            for (int i = 0; i < ln->n_args; i++) a.t[i] = buf[t[i]];
            a.n = a.c = 1, a.inner = kernel_row_len(&gc->kp, ln, r);
            gc->fn[ln->kernel](&a);
        }
        return;
    }
    for (int i = 0; i < ln->n_args; i++) a.t[i] = buf[ln->args[i]];
    if (ln->list_n) {
        for (int j = 0; j < ln->list_n; j++) {
            int t = gc->kp.list[ln->list_first + j];
            gc->list[ln->list_first + j] = buf[t];
        }
        a.list = gc->list + ln->list_first;
        a.list_len = gc->list_len + ln->list_first;
        a.list_n = ln->list_n;
    }
    gc->fn[ln->kernel](&a);
}

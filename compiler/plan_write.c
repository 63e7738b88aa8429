/* compiler/plan_write.c — serialises a graph: string table, tensors, ops,
 * graph lists, META; then header, section table with a CRC-32 per section,
 * and an atomic write. */
#include "plan_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../ir/atomic_file.h"
#include "../ir/plan_codec.h"
#include "../ir/plan_format.h"

/* String table with de-duplication (scopes repeat for every op of a module). */
typedef struct Strings {
    PlanCodec bytes;
    const char **keys;
    uint32_t *offs;
    size_t cap;
} Strings;

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static uint32_t intern(Strings *st, const char *s) {
    if (!s) return PLAN_NO_STRING;
    size_t i = (size_t)(hash(s) & (st->cap - 1));
    for (; st->keys[i]; i = (i + 1) & (st->cap - 1))
        if (strcmp(st->keys[i], s) == 0) return st->offs[i];
    st->keys[i] = s;
    st->offs[i] = (uint32_t)st->bytes.len;
    for (const char *c = s;; c++) {
        uint8_t b = (uint8_t)*c;
        pc_u8(&st->bytes, &b, "string");
        if (!*c) break;
    }
    return st->offs[i];
}

static void write_tensors(PlanCodec *c, Strings *st, const Graph *g) {
    uint32_t n = (uint32_t)g->n_tensors;
    pc_u32(c, &n, "tensor count");
    for (int i = 0; i < g->n_tensors; i++) {
        const Tensor *t = &g->tensors[i];
        uint8_t b[8] = {(uint8_t)t->kind, (uint8_t)t->dtype, (uint8_t)t->shape.nd, t->frozen, (uint8_t)t->init, 0, 0, 0};
        for (int k = 0; k < 8; k++) pc_u8(c, &b[k], "tensor");
        uint32_t name = intern(st, t->name), zero = 0;
        double arg = t->init_arg;
        pc_u32(c, &name, "tensor name");
        pc_u32(c, &zero, "tensor padding");
        pc_f64(c, &arg, "tensor init");
        for (int k = 0; k < IR_MAX_DIMS; k++) {
            int64_t d = k < t->shape.nd ? t->shape.d[k] : 0;
            pc_i64(c, &d, "tensor shape");
        }
    }
}

static void write_ops(PlanCodec *c, Strings *st, const Graph *g) {
    uint32_t n = (uint32_t)g->n_ops;
    pc_u32(c, &n, "op count");
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        uint32_t kind = (uint32_t)op->kind, n_in = (uint32_t)op->n_in, n_out = (uint32_t)op->n_out, scope = intern(st, op->scope);
        int32_t row = op->row;
        OpAttrs a = op->a;
        pc_u32(c, &kind, "op kind");
        pc_u32(c, &n_in, "op inputs");
        pc_u32(c, &n_out, "op outputs");
        pc_i32(c, &row, "op row");
        pc_u32(c, &scope, "op scope");
        pc_attrs(c, &a);
        for (int i = 0; i < op->n_in; i++) pc_i32(c, &op->in[i], "op input");
        for (int i = 0; i < op->n_out; i++) pc_i32(c, &op->out[i], "op output");
    }
}

static void write_list(PlanCodec *c, const int *ids, int n) {
    uint32_t count = (uint32_t)n;
    pc_u32(c, &count, "list length");
    for (int i = 0; i < n; i++) {
        int32_t v = ids[i];
        pc_i32(c, &v, "list entry");
    }
}

static void write_memplan(PlanCodec *c, const Graph *g, const MemPlan *mp, const Views *v) {
    uint32_t precision = (uint32_t)mp->precision, zero = 0, n = (uint32_t)g->n_tensors, nv = (uint32_t)v->n_views;
    uint64_t arena = (uint64_t)mp->arena_bytes;
    pc_u32(c, &precision, "precision");
    pc_u32(c, &zero, "padding");
    pc_u64(c, &arena, "arena bytes");
    pc_u32(c, &n, "tensor count");
    pc_u32(c, &zero, "padding");
    for (int t = 0; t < g->n_tensors; t++) pc_i64(c, &mp->offset[t], "offset");
    pc_u32(c, &nv, "view count");
    pc_u32(c, &zero, "padding");
    for (int t = 0; t < g->n_tensors; t++) {
        if (v->base[t] == t) continue;
        int32_t ids[2] = {t, v->base[t]};
        pc_i32(c, &ids[0], "view");
        pc_i32(c, &ids[1], "view base");
        pc_i64(c, &v->chan[t], "view channel");
    }
}

static void write_groups(PlanCodec *c, const Fusion *fu) {
    uint32_t n = (uint32_t)fu->n_groups;
    pc_u32(c, &n, "group count");
    for (int i = 0; i < fu->n_groups; i++) {
        uint32_t v[4] = {(uint32_t)fu->groups[i].kind, (uint32_t)fu->groups[i].pattern, (uint32_t)fu->groups[i].first, (uint32_t)fu->groups[i].n};
        for (int k = 0; k < 4; k++) pc_u32(c, &v[k], "group");
    }
}

/* One plan's bytes (header, table, sections) in out->out; nested is the
 * EVAL payload (NULL: an empty section). */
static bool plan_encode(const PlanPart *part, const PlanCodec *nested, PlanCodec *out, char *err, int errcap) {
    enum { NSEC = PLAN_SECTIONS };
    const Graph *g = part->g;
    const MemPlan *mp = part->mp;
    const char *meta_json = part->meta_json;
    Strings st = {.cap = 1};
    while (st.cap < 2 * (size_t)(g->n_tensors + g->n_ops) + 16) st.cap <<= 1;
    st.keys = calloc(st.cap, sizeof(char *));
    st.offs = calloc(st.cap, sizeof(uint32_t));
    PlanCodec sec[NSEC];
    for (int i = 0; i < NSEC; i++) pc_writer(&sec[i]);
    pc_writer(&st.bytes);
    bool ok = false;
    if (!st.keys || !st.offs) {
        snprintf(err, (size_t)errcap, "out of memory");
        goto out;
    }
    /* sections: META, STRINGS (filled while the others are written), TENSORS, OPS, GRAPH, MEMPLAN, EVAL, GROUPS, KERNELS */
    pc_append(&sec[0], (const unsigned char *)meta_json, strlen(meta_json));
    write_tensors(&sec[2], &st, g);
    write_ops(&sec[3], &st, g);
    write_list(&sec[4], g->inputs, g->n_inputs);
    write_list(&sec[4], g->outputs, g->n_outputs);
    write_list(&sec[4], g->state, g->n_state);
    write_memplan(&sec[5], g, mp, &part->fu->views);
    if (nested) pc_append(&sec[6], nested->out, nested->len);
    write_groups(&sec[7], part->fu);
    if (part->kernels) pc_append(&sec[8], part->kernels, part->kernels_len);
    uint8_t nul = 0;
    pc_u8(&st.bytes, &nul, "strings"); /* a final NUL: every offset reads a terminated string */
    sec[1] = st.bytes;
    st.bytes.out = NULL;
    for (int i = 0; i < NSEC; i++)
        if (sec[i].failed) {
            snprintf(err, (size_t)errcap, "%s", sec[i].err);
            goto out;
        }
    static const uint32_t ids[NSEC] = {PLAN_SEC_META, PLAN_SEC_STRINGS, PLAN_SEC_TENSORS, PLAN_SEC_OPS, PLAN_SEC_GRAPH, PLAN_SEC_MEMPLAN, PLAN_SEC_EVAL, PLAN_SEC_GROUPS, PLAN_SEC_KERNELS};
    PlanCodec *head = out;
    uint64_t offset = PLAN_HEADER_BYTES + (uint64_t)NSEC * PLAN_ENTRY_BYTES, total = offset;
    for (int i = 0; i < NSEC; i++) total += sec[i].len;
    for (int i = 0; i < 8; i++) {
        uint8_t m = (uint8_t)PLAN_MAGIC[i];
        pc_u8(head, &m, "magic");
    }
    uint32_t version = PLAN_VERSION, count = NSEC, zero = 0;
    pc_u32(head, &version, "version");
    pc_u32(head, &count, "sections");
    pc_u64(head, &total, "size");
    for (int i = 0; i < NSEC; i++) {
        uint32_t id = ids[i], crc = (uint32_t)crc32(0L, sec[i].out, (uInt)sec[i].len);
        uint64_t len = sec[i].len;
        pc_u32(head, &id, "id");
        pc_u32(head, &zero, "pad");
        pc_u64(head, &offset, "offset");
        pc_u64(head, &len, "length");
        pc_u32(head, &crc, "crc");
        pc_u32(head, &zero, "pad");
        offset += len;
    }
    for (int i = 0; i < NSEC; i++) pc_append(head, sec[i].out, sec[i].len);
    ok = !head->failed;
    if (!ok) snprintf(err, (size_t)errcap, "%s", head->err);
out:
    for (int i = 0; i < NSEC; i++) pc_free(&sec[i]);
    pc_free(&st.bytes);
    free(st.keys);
    free(st.offs);
    return ok;
}

bool plan_encode_bytes(const PlanPart *part, unsigned char **out, size_t *len, char *err, int errcap) {
    PlanCodec c;
    pc_writer(&c);
    if (!plan_encode(part, NULL, &c, err, errcap)) return pc_free(&c), false;
    *out = c.out, *len = c.len;
    return true;
}

bool plan_write(const char *path, PlanPart train, const PlanPart *eval, char *err, int errcap) {
    PlanCodec nested, whole;
    pc_writer(&nested);
    pc_writer(&whole);
    bool ok = (!eval || plan_encode(eval, NULL, &nested, err, errcap)) && plan_encode(&train, eval ? &nested : NULL, &whole, err, errcap);
    if (ok) {
        const void *chunk = whole.out ? whole.out : (const void *)"";
        ok = atomic_write(path, &chunk, &whole.len, 1, err, errcap);
    }
    pc_free(&nested);
    pc_free(&whole);
    return ok;
}

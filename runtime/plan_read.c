/* runtime/plan_read.c — plan file reader: header and section table checks
 * (overflow-safe), CRC-32 per section, then tensors and ops replayed through
 * the graph API, then graph lists and META. */
#include "plan_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "../ir/plan_codec.h"
#include "../ir/plan_format.h"
#include "../passes/views.h"

typedef struct Section {
    uint32_t id;
    uint64_t off, len;
    const unsigned char *data;
} Section;

#define FAIL(...) return (snprintf(err, (size_t)errcap, __VA_ARGS__), false)

static bool read_table(const unsigned char *buf, size_t len, Section *secs, char *err, int errcap) {
    if (len < PLAN_HEADER_BYTES) FAIL("offset 0: file is %zu bytes, shorter than the %d-byte header", len, PLAN_HEADER_BYTES);
    if (memcmp(buf, PLAN_MAGIC, 8) != 0) FAIL("offset 0: not a yolocc plan (bad magic)");
    PlanCodec c;
    pc_reader(&c, buf + 8, len - 8, 8);
    uint32_t version, count;
    uint64_t size;
    pc_u32(&c, &version, "version");
    pc_u32(&c, &count, "section count");
    pc_u64(&c, &size, "file size");
    if (version != PLAN_VERSION) FAIL("offset 8: plan version %u, this yolocc reads version %d", version, PLAN_VERSION);
    if (size != len) FAIL("offset 16: header says %llu bytes, file has %zu (truncated or extended)", (unsigned long long)size, len);
    if (count != PLAN_SECTIONS) FAIL("offset 12: %u sections, expected %d", count, PLAN_SECTIONS);
    uint64_t table_end = PLAN_HEADER_BYTES + (uint64_t)count * PLAN_ENTRY_BYTES;
    if (table_end > len) FAIL("offset %d: section table runs past the end of the file", PLAN_HEADER_BYTES);
    uint64_t prev_end = table_end;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t at = PLAN_HEADER_BYTES + (uint64_t)i * PLAN_ENTRY_BYTES;
        pc_reader(&c, buf + at, PLAN_ENTRY_BYTES, at);
        uint32_t id, pad1, crc, pad2;
        Section *s = &secs[i];
        pc_u32(&c, &id, "section id");
        pc_u32(&c, &pad1, "section padding");
        pc_u64(&c, &s->off, "section offset");
        pc_u64(&c, &s->len, "section length");
        pc_u32(&c, &crc, "section checksum");
        pc_u32(&c, &pad2, "section padding");
        if (id != i + 1 || pad1 || pad2) FAIL("offset %llu: section %u has id %u, expected %u", (unsigned long long)at, i, id, i + 1);
        /* sections follow each other in order, inside the file; checked without overflow */
        if (s->off != prev_end || s->len > len - s->off)
            FAIL("offset %llu: section %u spans %llu+%llu, outside the file or out of order", (unsigned long long)at, id, (unsigned long long)s->off,
                 (unsigned long long)s->len);
        prev_end = s->off + s->len;
        s->id = id;
        s->data = buf + s->off;
        uint32_t got = (uint32_t)crc32(0L, s->data, (uInt)s->len);
        if (got != crc) FAIL("offset %llu: section %u checksum mismatch (stored %08x, computed %08x)", (unsigned long long)s->off, id, crc, got);
    }
    if (prev_end != len) FAIL("offset %llu: %llu bytes after the last section", (unsigned long long)prev_end, (unsigned long long)(len - prev_end));
    return true;
}

typedef struct StoredTensor {
    uint8_t kind, dtype, frozen, init;
    const char *name;
    double init_arg;
    Shape shape;
} StoredTensor;

static const char *string_at(const Section *strs, uint32_t off, PlanCodec *c, const char *what) {
    if (off == PLAN_NO_STRING) return NULL;
    if (off >= strs->len) return pc_fail(c, "%s refers to string %u outside the string table", what, off), NULL;
    return (const char *)strs->data + off;
}

static StoredTensor *read_tensors(Plan *p, const Section *sec, const Section *strs, uint32_t *count, char *err, int errcap) {
    PlanCodec c;
    pc_reader(&c, sec->data, sec->len, sec->off);
    if (!pc_u32(&c, count, "tensor count")) return snprintf(err, (size_t)errcap, "%s", c.err), NULL;
    if (*count == 0 || (uint64_t)*count * PLAN_TENSOR_BYTES != sec->len - 4 || *count > GRAPH_MAX_TENSORS)
        return snprintf(err, (size_t)errcap, "offset %llu: %u tensors do not fit the %llu-byte section", (unsigned long long)sec->off, *count,
                        (unsigned long long)sec->len),
               NULL;
    StoredTensor *ts = arena_array(&p->arena, *count, sizeof(StoredTensor));
    if (!ts) return snprintf(err, (size_t)errcap, "out of memory"), NULL;
    for (uint32_t i = 0; i < *count; i++) {
        StoredTensor *t = &ts[i];
        uint8_t nd, pad[3];
        uint32_t name, pad4;
        pc_u8(&c, &t->kind, "tensor kind");
        pc_u8(&c, &t->dtype, "tensor dtype");
        pc_u8(&c, &nd, "tensor rank");
        pc_u8(&c, &t->frozen, "tensor frozen");
        pc_u8(&c, &t->init, "tensor init");
        for (int k = 0; k < 3; k++) pc_u8(&c, &pad[k], "tensor padding");
        pc_u32(&c, &name, "tensor name");
        pc_u32(&c, &pad4, "tensor padding");
        pc_f64(&c, &t->init_arg, "tensor init");
        t->shape.nd = nd;
        for (int k = 0; k < IR_MAX_DIMS; k++) pc_i64(&c, &t->shape.d[k], "tensor shape");
        if (c.failed) break;
        c.pos -= PLAN_TENSOR_BYTES;
        if (t->kind > TK_OPTIM || t->dtype > DT_I64 || nd > IR_MAX_DIMS || t->frozen > 1 || t->init > INIT_TRUNC_NORMAL || pad[0] | pad[1] | pad[2] || pad4) {
            pc_fail(&c, "tensor %u has an invalid kind, dtype, rank or flag", i);
            break;
        }
        c.pos += PLAN_TENSOR_BYTES;
        t->name = string_at(strs, name, &c, "tensor name");
        if (t->kind != TK_ACTIVATION && !t->name && !c.failed) pc_fail(&c, "tensor %u (state or input) has no name", i);
    }
    if (c.failed) return snprintf(err, (size_t)errcap, "%s", c.err), NULL;
    return ts;
}

/* Creates tensor t as stored (it must be an input, parameter, buffer or optimizer state). */
static bool create_leaf(Plan *p, const StoredTensor *st, uint32_t t, char *err, int errcap) {
    Graph *g = &p->g;
    if (st->kind == TK_ACTIVATION) FAIL("tensor %u is an activation that no op produces", t);
    int id = st->kind == TK_INPUT ? graph_add_input(g, st->name, st->shape, (DType)st->dtype)
                                  : graph_add_state(g, (TensorKind)st->kind, st->name, st->shape, (DType)st->dtype);
    if (id != (int)t) FAIL("tensor %u (%s): %s", t, st->name, id < 0 ? g->err : "numbering differs");
    g->tensors[id].frozen = st->frozen;
    g->tensors[id].init = (InitKind)st->init;
    g->tensors[id].init_arg = st->init_arg;
    return true;
}

static bool replay_ops(Plan *p, const Section *sec, const Section *strs, const StoredTensor *ts, uint32_t nt, char *err, int errcap) {
    Graph *g = &p->g;
    PlanCodec c;
    pc_reader(&c, sec->data, sec->len, sec->off);
    uint32_t nops;
    if (!pc_u32(&c, &nops, "op count")) FAIL("%s", c.err);
    if (nops > GRAPH_MAX_OPS || nops > sec->len / 16) FAIL("offset %llu: %u ops cannot fit the section", (unsigned long long)sec->off, nops);
    int32_t *ins = arena_array(&p->arena, 1 << 16, sizeof(int32_t)), outs[IR_MAX_SPLIT];
    if (!ins) FAIL("out of memory");
    uint32_t next_t = 0;
    for (uint32_t o = 0; o < nops; o++) {
        uint64_t op_at = sec->off + c.pos;
        uint32_t kind, n_in, n_out, scope_off;
        int32_t row;
        OpAttrs a = {0};
        pc_u32(&c, &kind, "op kind");
        pc_u32(&c, &n_in, "op input count");
        pc_u32(&c, &n_out, "op output count");
        pc_i32(&c, &row, "op row");
        pc_u32(&c, &scope_off, "op scope");
        if (!c.failed && (kind >= OP_COUNT || n_in > (1u << 16) || n_out > IR_MAX_SPLIT)) pc_fail(&c, "op %u has kind %u, %u inputs, %u outputs", o, kind, n_in, n_out);
        const char *scope = string_at(strs, scope_off, &c, "op scope");
        pc_attrs(&c, &a);
        int32_t need = 0;
        for (uint32_t i = 0; i < n_in && !c.failed; i++) {
            pc_i32(&c, &ins[i], "op input");
            if (!c.failed && (ins[i] < 0 || (uint32_t)ins[i] >= nt)) pc_fail(&c, "op %u input %u refers to tensor %d of %u", o, i, ins[i], nt);
            if (ins[i] + 1 > need) need = ins[i] + 1;
        }
        for (uint32_t i = 0; i < n_out && !c.failed; i++) {
            pc_i32(&c, &outs[i], "op output");
            if (!c.failed && (outs[i] < 0 || (uint32_t)outs[i] >= nt || (i > 0 && outs[i] != outs[i - 1] + 1)))
                pc_fail(&c, "op %u output %u is tensor %d: outputs must be consecutive tensors", o, i, outs[i]);
        }
        if (c.failed) FAIL("%s", c.err);
        /* leaves numbered before this op's first output (or its last input) come first */
        uint32_t until = n_out ? (uint32_t)outs[0] : (uint32_t)need;
        if (until > nt) FAIL("offset %llu: op %u refers to tensors beyond %u", (unsigned long long)op_at, o, nt);
        for (; next_t < until; next_t++)
            if (!create_leaf(p, &ts[next_t], next_t, err, errcap)) return false;
        if (n_out && (uint32_t)outs[0] != next_t) FAIL("offset %llu: op %u's outputs start at %d, expected %u", (unsigned long long)op_at, o, outs[0], next_t);
        int id = graph_add_op(g, (OpKind)kind, ins, (int)n_in, &a, (int)n_out, row, scope);
        if (id < 0) FAIL("offset %llu: op %u (%s): %s", (unsigned long long)op_at, o, op_def((OpKind)kind)->name, g->err);
        if (g->ops[id].n_out != (int)n_out) FAIL("offset %llu: op %u has %u outputs, its kind has %d", (unsigned long long)op_at, o, n_out, g->ops[id].n_out);
        for (uint32_t i = 0; i < n_out; i++) {
            const StoredTensor *st = &ts[next_t + i];
            if (st->kind != TK_ACTIVATION || (DType)st->dtype != g->tensors[next_t + i].dtype || !shape_eq(&st->shape, &g->tensors[next_t + i].shape))
                FAIL("offset %llu: op %u output %u: the stored tensor differs from what the op produces", (unsigned long long)op_at, o, i);
        }
        next_t += n_out;
    }
    if (c.pos != c.in_len) FAIL("offset %llu: %zu bytes after the last op", (unsigned long long)(sec->off + c.pos), c.in_len - c.pos);
    for (; next_t < nt; next_t++)
        if (!create_leaf(p, &ts[next_t], next_t, err, errcap)) return false;
    return true;
}

static bool read_lists(Plan *p, const Section *sec, char *err, int errcap) {
    Graph *g = &p->g;
    PlanCodec c;
    pc_reader(&c, sec->data, sec->len, sec->off);
    for (int which = 0; which < 3; which++) {
        uint32_t n;
        if (!pc_u32(&c, &n, "list length")) FAIL("%s", c.err);
        if (n > (uint32_t)g->n_tensors) FAIL("offset %llu: list of %u entries for %d tensors", (unsigned long long)(sec->off + c.pos - 4), n, g->n_tensors);
        int *ids = arena_array(&p->arena, (size_t)n + 1, sizeof(int));
        if (!ids) FAIL("out of memory");
        for (uint32_t i = 0; i < n; i++) {
            if (!pc_i32(&c, &ids[i], "list entry")) FAIL("%s", c.err);
            if (ids[i] < 0 || ids[i] >= g->n_tensors) FAIL("offset %llu: list entry %d is not a tensor", (unsigned long long)(sec->off + c.pos - 4), ids[i]);
        }
        if (which == 0) {
            if ((int)n != g->n_inputs || memcmp(ids, g->inputs, sizeof(int) * n) != 0) FAIL("offset %llu: graph inputs differ from the input tensors", (unsigned long long)sec->off);
        } else if (which == 1) {
            for (uint32_t i = 0; i < n; i++)
                if (!graph_mark_output(g, ids[i])) FAIL("out of memory");
        } else {
            for (uint32_t i = 0; i < n; i++) {
                TensorKind k = g->tensors[ids[i]].kind;
                if (k != TK_PARAM && k != TK_BUFFER) FAIL("offset %llu: state entry %u is not a parameter or buffer", (unsigned long long)sec->off, i);
            }
            g->state = ids;
            g->n_state = (int)n;
        }
    }
    if (c.pos != c.in_len) FAIL("offset %llu: trailing bytes in the graph section", (unsigned long long)(sec->off + c.pos));
    return true;
}

typedef struct Span {
    int64_t off, end;
    int def, last;
} Span;

static int span_by_offset(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The views the memory plan stores: each a tensor inside a base that is
 * itself no view, in a slice of its channels, at the offset that slice has. */
static bool read_views(Plan *p, PlanCodec *c, uint32_t nv, const int *last, char *err, int errcap) {
    const Graph *g = &p->g;
    Views *v = &p->fusion.views;
    for (uint32_t i = 0; i < nv; i++) {
        uint64_t at = c->base + c->pos;
        int32_t t, b;
        int64_t chan;
        pc_i32(c, &t, "view");
        pc_i32(c, &b, "view base");
        pc_i64(c, &chan, "view channel");
        if (c->failed) FAIL("%s", c->err);
        if (t < 0 || t >= g->n_tensors || b < 0 || b >= g->n_tensors || t == b || v->base[t] != t || !views_fits(g, t, b, chan) ||
            g->tensors[t].kind != TK_ACTIVATION || p->fusion.internal[t] || last[t] >= g->n_ops)
            FAIL("offset %llu: view %u (tensor %d in %d at channel %lld) is not a slice of its base", (unsigned long long)at, i, t, b, (long long)chan);
        v->base[t] = b;
        v->chan[t] = chan;
        v->n_views++;
    }
    for (int t = 0; t < g->n_tensors; t++) {
        int b = v->base[t];
        if (b == t) continue;
        if (v->base[b] != b || p->offset[b] < 0) FAIL("offset %llu: tensor %d is a view of %d, which has no arena bytes of its own", (unsigned long long)c->base, t, b);
        int64_t want = p->offset[b] + views_elem_offset(g, v, t) * (memplan_tensor_bytes(g, t, false, p->precision) / shape_numel(&g->tensors[t].shape));
        if (p->offset[t] != want) FAIL("offset %llu: view %d sits at %lld, its slice of %d at %lld", (unsigned long long)c->base, t, (long long)p->offset[t], b, (long long)want);
    }
    return true;
}

/* Offsets must keep every arena tensor inside the arena, and tensors whose
 * lifetimes overlap must not share bytes (a base lives as long as its
 * views): a plan that lies here would make kernels overwrite live data. */
static bool read_memplan(Plan *p, const Section *sec, char *err, int errcap) {
    const Graph *g = &p->g;
    PlanCodec c;
    pc_reader(&c, sec->data, sec->len, sec->off);
    uint32_t precision, pad1, n, pad2, nv = 0, pad3 = 0;
    uint64_t arena;
    pc_u32(&c, &precision, "precision");
    pc_u32(&c, &pad1, "padding");
    pc_u64(&c, &arena, "arena bytes");
    pc_u32(&c, &n, "tensor count");
    pc_u32(&c, &pad2, "padding");
    if (c.failed) FAIL("%s", c.err);
    if (precision > PREC_FP16 || pad1 || pad2 || n != (uint32_t)g->n_tensors || arena > PLAN_MAX_BYTES * 64 || sec->len < 32 + 8ULL * n)
        FAIL("offset %llu: memory plan header is invalid", (unsigned long long)sec->off);
    p->precision = (Precision)precision;
    p->arena_bytes = (int64_t)arena;
    p->offset = arena_array(&p->arena, (size_t)n + 1, sizeof(int64_t));
    int *last = arena_array(&p->arena, (size_t)n + 1, sizeof(int)), *def = arena_array(&p->arena, (size_t)n + 1, sizeof(int));
    Span *spans = arena_array(&p->arena, (size_t)n + 1, sizeof(Span));
    if (!p->offset || !last || !def || !spans) FAIL("out of memory");
    graph_last_use(g, last);
    for (uint32_t t = 0; t < n; t++) pc_i64(&c, &p->offset[t], "offset");
    pc_u32(&c, &nv, "view count");
    pc_u32(&c, &pad3, "padding");
    if (c.failed) FAIL("%s", c.err);
    if (pad3 || nv > n || sec->len != 32 + 8ULL * n + 16ULL * nv) FAIL("offset %llu: memory plan with %u views has the wrong length", (unsigned long long)sec->off, nv);
    if (!read_views(p, &c, nv, last, err, errcap)) return false;
    const Views *v = &p->fusion.views;
    for (uint32_t t = 0; t < n; t++) def[t] = g->tensors[t].producer;
    views_widen_lifetimes(v, (int)n, def, last);
    int ns = 0;
    for (uint32_t t = 0; t < n; t++) {
        uint64_t at = sec->off + 24 + 8ULL * t;
        int64_t off = p->offset[t], bytes = memplan_tensor_bytes(g, (int)t, false, p->precision);
        if ((off == MEMPLAN_INTERNAL) != p->fusion.internal[t])
            FAIL("offset %llu: tensor %u %s its fusion group, but the memory plan %s", (unsigned long long)at, t,
                 p->fusion.internal[t] ? "never leaves" : "leaves", p->fusion.internal[t] ? "gives it storage" : "gives it none");
        if (off == -1 || off == MEMPLAN_INTERNAL || v->base[t] != (int)t) continue;
        if (g->tensors[t].kind != TK_ACTIVATION || off < 0 || off % MEMPLAN_ALIGN || bytes > (int64_t)arena || off > (int64_t)arena - bytes)
            FAIL("offset %llu: tensor %u cannot sit at arena offset %lld", (unsigned long long)at, t, (long long)off);
        spans[ns++] = (Span){off, off + bytes, def[t], last[t]};
    }
    qsort(spans, (size_t)ns, sizeof(Span), span_by_offset);
    for (int i = 0; i < ns; i++)
        for (int j = i + 1; j < ns && spans[j].off < spans[i].end; j++)
            if (spans[i].def <= spans[j].last && spans[j].def <= spans[i].last)
                FAIL("offset %llu: the memory plan puts tensors that are live together in the same bytes", (unsigned long long)sec->off);
    return true;
}

/* The fusion groups: a partition of the ops that fuse_check re-derives from
 * the rules, so a plan cannot claim a tensor is internal when it is not. */
static bool read_groups(Plan *p, const Section *sec, char *err, int errcap) {
    PlanCodec c;
    pc_reader(&c, sec->data, sec->len, sec->off);
    uint32_t n;
    pc_u32(&c, &n, "group count");
    if (c.failed) FAIL("%s", c.err);
    if (n > (uint32_t)p->g.n_ops || sec->len != 4 + 16ULL * n) FAIL("offset %llu: %u fusion groups do not fit the %llu-byte section or the %d ops", (unsigned long long)sec->off, n,
                                                                  (unsigned long long)sec->len, p->g.n_ops);
    Fusion *f = &p->fusion;
    f->groups = arena_array(&p->arena, (size_t)n + 1, sizeof(FusionGroup));
    if (!f->groups) FAIL("out of memory");
    f->n_groups = (int)n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t v[4];
        for (int k = 0; k < 4; k++) pc_u32(&c, &v[k], "group");
        if (v[0] >= GROUP_KINDS || v[1] >= PATTERN_COUNT || v[2] > (uint32_t)p->g.n_ops || v[3] > (uint32_t)p->g.n_ops)
            FAIL("offset %llu: fusion group %u is invalid", (unsigned long long)(sec->off + 4 + 16ULL * i), i);
        f->groups[i] = (FusionGroup){(GroupKind)v[0], (GroupPattern)v[1], (int)v[2], (int)v[3]};
        if (v[1] != PATTERN_SINGLE) f->policy = FUSE_FULL;
    }
    char why[200];
    if (!fuse_check(&p->g, &p->arena, f, why, sizeof why)) FAIL("offset %llu: fusion groups: %s", (unsigned long long)sec->off, why);
    return true;
}

static bool parse_plan(const unsigned char *buf, size_t len, Plan *p, bool nested, char *err, int errcap) {
    memset(p, 0, sizeof *p);
    arena_init(&p->arena, (size_t)1 << 31);
    graph_init(&p->g, &p->arena);
    p->file_bytes = len;
    Section secs[PLAN_SECTIONS];
    if (!read_table(buf, len, secs, err, errcap)) return false;
    const Section *strs = &secs[1];
    if (strs->len == 0 || strs->data[strs->len - 1] != 0) FAIL("offset %llu: the string table must end with a NUL byte", (unsigned long long)strs->off);
    /* copy the string table so names outlive the caller's buffer */
    unsigned char *own = arena_alloc(&p->arena, strs->len);
    if (!own) FAIL("out of memory");
    memcpy(own, strs->data, strs->len);
    Section strs_own = *strs;
    strs_own.data = own;
    uint32_t nt;
    StoredTensor *ts = read_tensors(p, &secs[2], &strs_own, &nt, err, errcap);
    if (!ts || !replay_ops(p, &secs[3], &strs_own, ts, nt, err, errcap) || !read_lists(p, &secs[4], err, errcap) ||
        !read_groups(p, &secs[7], err, errcap) || !read_memplan(p, &secs[5], err, errcap))
        return false;
    if (secs[0].len > PLAN_MAX_META_BYTES) FAIL("offset %llu: META is %llu bytes, the limit is %u", (unsigned long long)secs[0].off, (unsigned long long)secs[0].len, PLAN_MAX_META_BYTES);
    p->meta = cJSON_ParseWithLength((const char *)secs[0].data, secs[0].len);
    if (!cJSON_IsObject(p->meta)) FAIL("offset %llu: META is not a JSON object", (unsigned long long)secs[0].off);
    char verr[256];
    if (!graph_verify(&p->g, verr, sizeof verr)) FAIL("plan graph fails verification: %s", verr);
    if (secs[8].len > 0) {
        unsigned char *k = arena_alloc(&p->arena, secs[8].len);
        if (!k) FAIL("out of memory");
        memcpy(k, secs[8].data, secs[8].len);
        p->kernels = k;
        p->kernels_len = secs[8].len;
    }
    const Section *ev = &secs[6];
    if (ev->len > 0) {
        if (nested) FAIL("offset %llu: an eval plan cannot hold another eval plan", (unsigned long long)ev->off);
        p->eval = calloc(1, sizeof *p->eval);
        if (!p->eval) FAIL("out of memory");
        char why[400];
        if (!parse_plan(ev->data, ev->len, p->eval, true, why, sizeof why)) FAIL("in the eval plan at offset %llu: %s", (unsigned long long)ev->off, why);
    }
    return true;
}

bool plan_parse(const unsigned char *buf, size_t len, Plan *p, char *err, int errcap) { return parse_plan(buf, len, p, false, err, errcap); }

bool plan_read(const char *path, Plan *p, char *err, int errcap) {
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "rb");
    if (!f) FAIL("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > PLAN_MAX_BYTES) {
        fclose(f);
        FAIL("%s: not a regular file of at most 4 GiB", path);
    }
    unsigned char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    bool rerr = ferror(f);
    fclose(f);
    if (!buf || rerr || n != (size_t)st.st_size) {
        free(buf);
        FAIL("%s: cannot read the file", path);
    }
    char why[400];
    bool ok = plan_parse(buf, n, p, why, sizeof why);
    free(buf);
    if (!ok) FAIL("%s: %s", path, why);
    return true;
}

void plan_free(Plan *p) {
    if (p->eval) {
        plan_free(p->eval);
        free(p->eval);
        p->eval = NULL;
    }
    cJSON_Delete(p->meta);
    p->meta = NULL;
    arena_free(&p->arena);
}

double cjson_number(const cJSON *obj, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

bool plan_loss_gains(const Plan *p, double gains[3]) {
    for (int i = 0; i < p->g.n_ops; i++)
        if (p->g.ops[i].kind == OP_DETECT_LOSS) return memcpy(gains, p->g.ops[i].a.gains, sizeof p->g.ops[i].a.gains), true;
    return false;
}

int plan_meta_tensor(const Plan *p, const char *group, const char *key) {
    const cJSON *o = group ? cJSON_GetObjectItemCaseSensitive(p->meta, group) : p->meta;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= p->g.n_tensors || v->valuedouble != (int)v->valuedouble) return -1;
    return (int)v->valuedouble;
}

bool plan_eval_io(const Plan *ep, EvalIO *io) {
    *io = (EvalIO){.images = plan_meta_tensor(ep, "inputs", "images"), .boxes = plan_meta_tensor(ep, "inputs", "boxes"),
                   .counts = plan_meta_tensor(ep, "inputs", "counts"), .pred = plan_meta_tensor(ep, "outputs", "predictions"),
                   .items = plan_meta_tensor(ep, "outputs", "items"), .end2end = cJSON_IsTrue(cJSON_GetObjectItem(ep->meta, "end2end"))};
    if (io->images < 0 || io->boxes < 0 || io->counts < 0 || io->pred < 0 || io->items < 0) return false;
    const Shape *im = &ep->g.tensors[io->images].shape, *p = &ep->g.tensors[io->pred].shape, *bx = &ep->g.tensors[io->boxes].shape;
    if (im->nd != 4 || im->d[1] != 3 || p->nd != 3 || p->d[0] != im->d[0] || p->d[1] < 5 || bx->nd != 3 || bx->d[0] != im->d[0] || bx->d[2] != 5)
        return false;
    io->batch = (int)im->d[0], io->h = (int)im->d[2], io->w = (int)im->d[3], io->imgsz = io->h > io->w ? io->h : io->w, io->nc = (int)p->d[1] - 4, io->anchors = (int)p->d[2], io->max_boxes = (int)bx->d[1];
    return true;
}

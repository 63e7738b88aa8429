/* compiler/value.c — PyYAML scalar typing, a Python-literal reader (the subset
 * ast.literal_eval accepts that model files use) and Python repr. */
#include "value.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *value_kind_name(VKind k) {
    static const char *names[] = {"None", "bool", "int", "float", "string", "list"};
    return names[k];
}

Value value_int(int64_t i, Mark m) { return (Value){.kind = V_INT, .i = i, .mark = m}; }
Value value_float(double f, Mark m) { return (Value){.kind = V_FLOAT, .f = f, .mark = m}; }
/* Python bools are ints: .i holds 0/1 so integer readers see them too */
Value value_bool(bool b, Mark m) { return (Value){.kind = V_BOOL, .b = b, .i = b, .mark = m}; }
Value value_none(Mark m) { return (Value){.kind = V_NONE, .mark = m}; }

bool value_is_int(const Value *v) { return v->kind == V_INT || v->kind == V_BOOL; }
bool value_is_number(const Value *v) { return value_is_int(v) || v->kind == V_FLOAT; }
double value_number(const Value *v) {
    return v->kind == V_FLOAT ? v->f : v->kind == V_BOOL ? (double)v->b : (double)v->i;
}

static bool in_set(const char *s, const char *const *set) {
    for (; *set; set++)
        if (strcmp(s, *set) == 0) return true;
    return false;
}

/* Parses digits of a YAML 1.1 / Python integer body (underscores allowed
 * between digits). Returns false on bad syntax; *overflow on range. */
static bool parse_int_body(const char *s, int base, bool allow_underscore, int64_t *out, bool *overflow) {
    uint64_t v = 0;
    bool any = false;
    *overflow = false;
    for (; *s; s++) {
        if (*s == '_' && allow_underscore) continue;
        int dv;
        if (*s >= '0' && *s <= '9') dv = *s - '0';
        else if (*s >= 'a' && *s <= 'f') dv = *s - 'a' + 10;
        else if (*s >= 'A' && *s <= 'F') dv = *s - 'A' + 10;
        else return false;
        if (dv >= base) return false;
        if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base) *overflow = true;
        else v = v * (uint64_t)base + (uint64_t)dv;
        any = true;
    }
    if (v > (uint64_t)INT64_MAX) *overflow = true;
    *out = (int64_t)v;
    return any;
}

/* YAML 1.1 int as PyYAML resolves it (no base-60). */
static bool yaml11_int(const char *s, int64_t *out, bool *overflow) {
    bool neg = false;
    if (*s == '-' || *s == '+') neg = *s++ == '-';
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) { base = 16; s += 2; }
    else if (s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) { base = 2; s += 2; }
    else if (s[0] == '0' && s[1]) { base = 8; s += 1; }
    else if (s[0] == '_') return false;
    if (!parse_int_body(s, base, true, out, overflow)) return false;
    if (neg) *out = -*out;
    return true;
}

/* YAML 1.1 float as PyYAML resolves it: needs a '.', optional exponent with sign. */
static bool yaml11_float(const char *s, double *out) {
    static const char *const inf[] = {".inf", ".Inf", ".INF", NULL}, *const nan[] = {".nan", ".NaN", ".NAN", NULL};
    const char *p = s;
    bool neg = false;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    if (in_set(p, inf)) { *out = neg ? -INFINITY : INFINITY; return true; }
    if (p == s && in_set(p, nan)) { *out = NAN; return true; }
    const char *q = p;
    int digits = 0;
    while ((*q >= '0' && *q <= '9') || (*q == '_' && q != p)) digits += *q++ != '_';
    if (*q != '.') return false;
    if (digits == 0 && !(q[1] >= '0' && q[1] <= '9')) return false;
    q++;
    while ((*q >= '0' && *q <= '9') || *q == '_') q++;
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q != '-' && *q != '+') return false;
        q++;
        if (!(*q >= '0' && *q <= '9')) return false;
        while (*q >= '0' && *q <= '9') q++;
    }
    if (*q) return false;
    char buf[128];
    size_t k = 0;
    for (const char *c = s; *c && k < sizeof buf - 1; c++)
        if (*c != '_') buf[k++] = *c;
    buf[k] = 0;
    *out = strtod(buf, NULL);
    return true;
}

bool value_from_yaml(Arena *a, const YNode *n, Value *out, Diag *d) {
    memset(out, 0, sizeof *out);
    out->mark = n->mark;
    if (n->kind == YN_MAP) return diag_error(d, n->mark, "expected a scalar or a list, found a mapping");
    if (n->kind == YN_SEQ) {
        out->kind = V_LIST;
        out->n = n->n;
        out->items = arena_array(a, (size_t)(n->n ? n->n : 1), sizeof(Value));
        if (!out->items) return diag_error(d, n->mark, "out of memory");
        for (int i = 0; i < n->n; i++)
            if (!value_from_yaml(a, n->items[i], &out->items[i], d)) return false;
        return true;
    }
    const char *s = n->str;
    out->kind = V_STR;
    out->s = s;
    if (!n->plain) return true;
    static const char *const trues[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", NULL};
    static const char *const falses[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", NULL};
    if (yaml_is_null(n)) { out->kind = V_NONE; return true; }
    if (in_set(s, trues)) { *out = value_bool(true, n->mark); return true; }
    if (in_set(s, falses)) { *out = value_bool(false, n->mark); return true; }
    int64_t iv;
    bool ovf;
    if (yaml11_int(s, &iv, &ovf)) {
        if (ovf) return diag_error(d, n->mark, "integer '%s' out of range", s);
        *out = value_int(iv, n->mark);
        return true;
    }
    double fv;
    if (yaml11_float(s, &fv)) { *out = value_float(fv, n->mark); return true; }
    return true;
}

/* ---- Python literal reader (ast.literal_eval subset) ---- */

typedef struct {
    const char *p;
    Arena *a;
    Mark mark;
    int depth;
} Lit;

static void lit_ws(Lit *l) {
    while (*l->p == ' ' || *l->p == '\t') l->p++;
}

static bool lit_value(Lit *l, Value *v);

static bool lit_number(Lit *l, Value *v, bool neg) {
    const char *s = l->p;
    if (s[0] == '0' && strchr("xXoObB", s[1]) && s[1]) {
        int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
        const char *e = s + 2;
        while ((*e >= '0' && *e <= '9') || (*e >= 'a' && *e <= 'f') || (*e >= 'A' && *e <= 'F') || *e == '_') e++;
        char *body = arena_strndup(l->a, s + 2, (size_t)(e - s - 2));
        int64_t iv;
        bool ovf;
        if (!body || !parse_int_body(body, base, true, &iv, &ovf) || ovf) return false;
        *v = value_int(neg ? -iv : iv, l->mark);
        l->p = e;
        return true;
    }
    const char *e = s;
    bool is_float = false;
    while ((*e >= '0' && *e <= '9') || *e == '_') e++;
    if (*e == '.') { is_float = true; e++; while ((*e >= '0' && *e <= '9') || *e == '_') e++; }
    if (e == s || (e == s + 1 && *s == '.')) return false;
    if (*e == 'e' || *e == 'E') {
        const char *x = e + 1;
        if (*x == '+' || *x == '-') x++;
        if (!(*x >= '0' && *x <= '9')) return false;
        while (*x >= '0' && *x <= '9') x++;
        e = x;
        is_float = true;
    }
    char *body = arena_strndup(l->a, s, (size_t)(e - s));
    if (!body) return false;
    char *w = body;
    for (char *r = body; *r; r++)
        if (*r != '_') *w++ = *r;
    *w = 0;
    if (is_float) {
        *v = value_float(neg ? -strtod(body, NULL) : strtod(body, NULL), l->mark);
    } else {
        if (body[0] == '0' && body[1]) {
            for (char *c = body; *c; c++)
                if (*c != '0') return false;  /* Python rejects leading zeros */
        }
        int64_t iv;
        bool ovf;
        if (!parse_int_body(body, 10, false, &iv, &ovf) || ovf) return false;
        *v = value_int(neg ? -iv : iv, l->mark);
    }
    l->p = e;
    return true;
}

static bool lit_string(Lit *l, Value *v) {
    char q = *l->p++;
    const char *start = l->p;
    char *buf = arena_alloc(l->a, strlen(start) + 1), *w = buf;
    if (!buf) return false;
    while (*l->p && *l->p != q) {
        if (*l->p == '\\') {
            l->p++;
            char c = *l->p;
            if (!c) return false;
            *w++ = c == 'n' ? '\n' : c == 't' ? '\t' : c;
            l->p++;
        } else {
            *w++ = *l->p++;
        }
    }
    if (*l->p != q) return false;
    l->p++;
    *v = (Value){.kind = V_STR, .s = buf, .mark = l->mark};
    return true;
}

static bool lit_seq(Lit *l, Value *v) {
    char close = *l->p == '[' ? ']' : ')';
    bool tuple = close == ')';
    l->p++;
    if (++l->depth > YAML_MAX_DEPTH) return false;
    int cap = 0;
    Value out = {.kind = V_LIST, .is_tuple = tuple, .mark = l->mark};
    bool trailing_comma = false;
    for (;;) {
        lit_ws(l);
        if (*l->p == close) { l->p++; break; }
        Value item;
        if (!lit_value(l, &item)) return false;
        if (!arena_grow(l->a, (void **)&out.items, out.n, &cap, sizeof(Value))) return false;
        out.items[out.n++] = item;
        lit_ws(l);
        trailing_comma = false;
        if (*l->p == ',') { l->p++; trailing_comma = true; continue; }
        if (*l->p == close) { l->p++; break; }
        return false;
    }
    /* "(x)" is a parenthesised value in Python, not a tuple */
    if (tuple && out.n == 1 && !trailing_comma) *v = out.items[0];
    else *v = out;
    l->depth--;
    return true;
}

static bool word_is(const char *p, const char *w) {
    size_t n = strlen(w);
    if (strncmp(p, w, n) != 0) return false;
    char c = p[n];
    return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
}

static bool lit_value(Lit *l, Value *v) {
    lit_ws(l);
    const char *p = l->p;
    if (*p == '[' || *p == '(') return lit_seq(l, v);
    if (*p == '\'' || *p == '"') return lit_string(l, v);
    if (word_is(p, "None")) { *v = value_none(l->mark); l->p += 4; return true; }
    if (word_is(p, "True")) { *v = value_bool(true, l->mark); l->p += 4; return true; }
    if (word_is(p, "False")) { *v = value_bool(false, l->mark); l->p += 5; return true; }
    bool neg = false;
    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        l->p++;
        lit_ws(l);
    }
    return lit_number(l, v, neg);
}

void value_resolve_arg(Arena *a, Value *v, int64_t nc) {
    if (v->kind != V_STR) return;
    if (strcmp(v->s, "nc") == 0) {
        *v = value_int(nc, v->mark);
        return;
    }
    Lit l = {.p = v->s, .a = a, .mark = v->mark};
    Value out;
    if (lit_value(&l, &out)) {
        lit_ws(&l);
        if (*l.p == 0) *v = out;
    }
}

/* ---- Python repr ---- */

typedef struct {
    char *buf;
    int cap, len;
} Out;

static void put(Out *o, const char *s) {
    int n = (int)strlen(s);
    if (o->len + n < o->cap) memcpy(o->buf + o->len, s, (size_t)n + 1);
    o->len += n;
}

/* Python's float repr: shortest round-trip digits; exponent form when the
 * decimal exponent is < -4 or >= 16. */
static void repr_float(double x, char *b, size_t n) {
    if (isnan(x)) { snprintf(b, n, "nan"); return; }
    if (isinf(x)) { snprintf(b, n, x < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    int nd = 0, exp10;
    const char *c = e;
    bool neg = *c == '-';
    if (neg) c++;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    exp10 = atoi(c + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *w = b;
    size_t left = n;
#define EMIT(...) do { int k_ = snprintf(w, left, __VA_ARGS__); if (k_ < 0 || (size_t)k_ >= left) return; w += k_; left -= (size_t)k_; } while (0)
    if (neg) EMIT("-");
    if (exp10 < -4 || exp10 >= 16) {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        EMIT("0.");
        for (int k = 0; k < -exp10 - 1; k++) EMIT("0");
        EMIT("%s", digits);
    } else {
        for (int k = 0; k <= exp10; k++) EMIT("%c", k < nd ? digits[k] : '0');
        EMIT(".");
        if (nd > exp10 + 1) EMIT("%s", digits + exp10 + 1);
        else EMIT("0");
    }
#undef EMIT
}

static void repr_into(const Value *v, Out *o) {
    char tmp[64];
    switch (v->kind) {
    case V_NONE: put(o, "None"); break;
    case V_BOOL: put(o, v->b ? "True" : "False"); break;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); put(o, tmp); break;
    case V_FLOAT: repr_float(v->f, tmp, sizeof tmp); put(o, tmp); break;
    case V_STR: {
        char q = strchr(v->s, '\'') && !strchr(v->s, '"') ? '"' : '\'';
        char qs[2] = {q, 0};
        put(o, qs);
        for (const char *c = v->s; *c; c++) {
            char ch[3] = {*c, 0, 0};
            if (*c == q || *c == '\\') { ch[0] = '\\'; ch[1] = *c; }
            put(o, ch);
        }
        put(o, qs);
        break;
    }
    case V_LIST:
        put(o, v->is_tuple ? "(" : "[");
        for (int i = 0; i < v->n; i++) {
            if (i) put(o, ", ");
            repr_into(&v->items[i], o);
        }
        if (v->is_tuple && v->n == 1) put(o, ",");
        put(o, v->is_tuple ? ")" : "]");
        break;
    }
}

bool value_repr(const Value *v, char *buf, int cap) {
    Out o = {buf, cap, 0};
    if (cap > 0) buf[0] = 0;
    repr_into(v, &o);
    return o.len < cap;
}

/* compiler/module_table.c — the registry of modules a YAML row may name, and
 * checking of their constructor arguments. One entry per module; structure
 * lives in the mod_*.c files. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "modules.h"

#define U "ultralytics.nn.modules."
#define CH RK_CHANNEL
#define REP (MF_REPEAT)

static const ModuleDef MODULES[] = {
    {"Conv", U "conv.Conv", CH, 0, "c1:c c2:c k:k? s:i? p:p? g:i? d:i? act:b?", row_conv},
    {"DWConv", U "conv.DWConv", CH, 0, "c1:c c2:c k:k? s:i? d:i? act:b?", row_dwconv},
    {"GhostConv", U "conv.GhostConv", CH, 0, "c1:c c2:c k:k? s:i? g:i? act:b?", row_ghostconv},
    {"Concat", U "conv.Concat", RK_CONCAT, MF_MULTI_INPUT, "dimension:i?", row_concat},
    {"Bottleneck", U "block.Bottleneck", CH, 0, "c1:c c2:c shortcut:b? g:i? k:v? e:f?", row_bottleneck},
    {"GhostBottleneck", U "block.GhostBottleneck", CH, 0, "c1:c c2:c k:i? s:i?", row_ghost_bottleneck},
    {"SPP", U "block.SPP", CH, 0, "c1:c c2:c k:l?", row_spp},
    {"SPPF", U "block.SPPF", CH, 0, "c1:c c2:c k:i?", row_sppf},
    {"C1", U "block.C1", CH, REP, "c1:c c2:c n:i?", row_c1},
    {"C2", U "block.C2", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_c2},
    {"C2f", U "block.C2f", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_c2f},
    {"C3", U "block.C3", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_c3},
    {"C3x", U "block.C3x", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_c3x},
    {"C3Ghost", U "block.C3Ghost", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_c3ghost},
    {"C3k2", U "block.C3k2", CH, REP | MF_NONLEGACY | MF_C3K_AT_MLX, "c1:c c2:c n:i? c3k:b? e:f? g:i? shortcut:b?", row_c3k2},
    {"BottleneckCSP", U "block.BottleneckCSP", CH, REP, "c1:c c2:c n:i? shortcut:b? g:i? e:f?", row_bottleneck_csp},
    {"RepNCSPELAN4", U "block.RepNCSPELAN4", CH, 0, "c1:c c2:c c3:c c4:c n:i?", row_repncspelan4},
    {"ELAN1", U "block.ELAN1", CH, 0, "c1:c c2:c c3:c c4:c", row_elan1},
    {"AConv", U "block.AConv", CH, 0, "c1:c c2:c", row_aconv},
    {"ADown", U "block.ADown", CH, 0, "c1:c c2:c", row_adown},
    {"SPPELAN", U "block.SPPELAN", CH, 0, "c1:c c2:c c3:c k:i?", row_sppelan},
    {"CBLinear", U "block.CBLinear", RK_CBLINEAR, 0, "c1:c c2s:l k:k? s:i? p:p? g:i?", row_cblinear},
    {"CBFuse", U "block.CBFuse", RK_CBFUSE, MF_MULTI_INPUT, "idx:l", row_cbfuse},
    {"SCDown", U "block.SCDown", CH, 0, "c1:c c2:c k:k s:i", row_scdown},
    {"C2fCIB", U "block.C2fCIB", CH, REP, "c1:c c2:c n:i? shortcut:b? lk:b? g:i? e:f?", row_c2fcib},
    {"C2PSA", U "block.C2PSA", CH, REP, "c1:c c2:c n:i? e:f?", row_c2psa},
    {"C2fPSA", U "block.C2fPSA", CH, REP, "c1:c c2:c n:i? e:f?", row_c2fpsa},
    {"PSA", U "block.PSA", CH, 0, "c1:c c2:c e:f?", row_psa},
    {"A2C2f", U "block.A2C2f", CH, REP | MF_NONLEGACY | MF_A2_AT_LX,
     "c1:c c2:c n:i? a2:b? area:i? residual:b? mlp_ratio:f? e:f? g:i? shortcut:b?", row_a2c2f},
    {"Detect", U "head.Detect", RK_HEAD, MF_MULTI_INPUT, "nc:c ch:l", row_detect},
    {"v10Detect", U "head.v10Detect", RK_HEAD, MF_MULTI_INPUT, "nc:c ch:l", row_v10detect},
    {"nn.Upsample", "torch.nn.modules.upsampling.Upsample", RK_PLAIN, 0, "size:u? scale_factor:x? mode:s?", row_upsample},
    {"nn.MaxPool2d", "torch.nn.modules.pooling.MaxPool2d", RK_PLAIN, 0,
     "kernel_size:k stride:u? padding:k? dilation:k? return_indices:b? ceil_mode:b?", row_maxpool},
    {"nn.ZeroPad2d", "torch.nn.modules.padding.ZeroPad2d", RK_PLAIN, 0, "padding:z", row_zeropad},
    {"nn.Identity", "torch.nn.modules.linear.Identity", RK_PLAIN, 0, "args:x? more:x?", row_identity},
    {"nn.BatchNorm2d", "torch.nn.modules.batchnorm.BatchNorm2d", RK_BATCHNORM, 0, "num_features:c", row_batchnorm},
    {"nn.ConvTranspose2d", "torch.nn.modules.conv.ConvTranspose2d", CH, 0, "c1:c c2:c k:k s:i? p:i?", row_conv_transpose},
};

#define N_MODULES ((int)(sizeof MODULES / sizeof MODULES[0]))

const ModuleDef *module_find(const char *name) {
    for (int i = 0; i < N_MODULES; i++)
        if (strcmp(MODULES[i].name, name) == 0) return &MODULES[i];
    return NULL;
}

const char *module_names(void) {
    static char buf[1024];
    if (!buf[0])
        for (int i = 0; i < N_MODULES; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", MODULES[i].name);
    return buf;
}

/* ---- argument specs ---- */

typedef struct {
    char name[32];
    char type;
    bool optional;
} ArgSpec;

static int parse_spec(const char *spec, ArgSpec *out, int cap) {
    int n = 0;
    for (const char *p = spec; *p && n < cap;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *colon = strchr(p, ':');
        if (!colon) break;
        ArgSpec *s = &out[n++];
        snprintf(s->name, sizeof s->name, "%.*s", (int)(colon - p), p);
        s->type = colon[1];
        s->optional = colon[2] == '?';
        p = colon + 2 + s->optional;
    }
    return n;
}

static bool small_int(const Value *v) { return value_is_int(v) && v->i >= -(1 << 20) && v->i <= (1 << 20); }

static bool int_pair(const Value *v) {
    return v->kind == V_LIST && v->n == 2 && small_int(&v->items[0]) && small_int(&v->items[1]);
}

static bool type_ok(char t, const Value *v) {
    switch (t) {
    case 'c': return v->kind == V_INT && v->i >= 1 && v->i <= (1 << 16);
    case 'i': return small_int(v);
    case 'f': return value_is_number(v) && isfinite(value_number(v)) && fabs(value_number(v)) <= 1e6;
    case 'b': return v->kind == V_BOOL || v->kind == V_INT;
    case 'k': return small_int(v) || int_pair(v);
    case 'p': return v->kind == V_NONE || small_int(v) || int_pair(v);
    case 'u': return v->kind == V_NONE || small_int(v) || int_pair(v);
    case 'z':
        if (small_int(v)) return true;
        if (v->kind != V_LIST || v->n != 4) return false;
        for (int i = 0; i < 4; i++)
            if (!small_int(&v->items[i])) return false;
        return true;
    case 's': return v->kind == V_STR;
    case 'l':
        if (v->kind != V_LIST || v->n < 1 || v->n > 16) return false;
        for (int i = 0; i < v->n; i++)
            if (!small_int(&v->items[i])) return false;
        return true;
    case 'v': return v->kind == V_LIST && v->n == 2 && type_ok('k', &v->items[0]) && type_ok('k', &v->items[1]);
    default: return true;
    }
}

static const char *type_words(char t) {
    switch (t) {
    case 'c': return "a channel count (integer 1..65536)";
    case 'i': return "an integer";
    case 'f': return "a number";
    case 'b': return "True or False";
    case 'k': return "an integer or [h, w]";
    case 'p': return "None, an integer or [h, w]";
    case 'u': return "None, an integer or [h, w]";
    case 'z': return "an integer or [left, right, top, bottom]";
    case 's': return "a string";
    case 'l': return "a list of 1..16 integers";
    case 'v': return "a pair of kernels";
    default: return "a value";
    }
}

bool module_check_args(Builder *b, const ModuleDef *def, const RowArgs *a, int inserted, int appended, Mark args_mark) {
    ArgSpec spec[16];
    int n = parse_spec(def->ctor, spec, 16), required = 0;
    for (int i = 0; i < n; i++) required += !spec[i].optional;
    if (a->n < required || a->n > n) {
        /* in YAML terms: without the arguments parse_model inserts or appends */
        int hi = n - inserted - appended, lo = required - inserted - appended, found = a->n - inserted - appended;
        char names[256] = "";
        for (int i = inserted; i < n - appended; i++) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i > inserted ? ", " : "", spec[i].name);
        if (lo < 0) lo = 0;
        b->mark = args_mark;
        if (lo == hi) return build_fail(b, "expects %d argument%s [%s], found %d", lo, lo == 1 ? "" : "s", names, found);
        return build_fail(b, "expects %d to %d arguments [%s], found %d", lo, hi, names, found);
    }
    for (int i = 0; i < a->n; i++) {
        if (type_ok(spec[i].type, &a->v[i])) continue;
        char got[64];
        if (!value_repr(&a->v[i], got, sizeof got)) snprintf(got, sizeof got, "a %s", value_kind_name(a->v[i].kind));
        if (i >= inserted) b->mark = a->v[i].mark;
        return build_fail(b, "argument '%s' must be %s, found %s", spec[i].name, type_words(spec[i].type), got);
    }
    return true;
}

/* ---- readers ---- */

int64_t arg_int(const RowArgs *a, int i, int64_t dflt) {
    if (i >= a->n || a->v[i].kind == V_NONE) return dflt;
    return a->v[i].kind == V_BOOL ? a->v[i].b : a->v[i].i;
}

double arg_num(const RowArgs *a, int i, double dflt) {
    if (i >= a->n || a->v[i].kind == V_NONE) return dflt;
    return value_number(&a->v[i]);
}

bool arg_bool(const RowArgs *a, int i, bool dflt) {
    if (i >= a->n) return dflt;
    const Value *v = &a->v[i];
    return v->kind == V_BOOL ? v->b : v->kind == V_INT ? v->i != 0 : dflt;
}

bool arg_none(const RowArgs *a, int i) { return i >= a->n || a->v[i].kind == V_NONE; }

void arg_pair(const RowArgs *a, int i, int dflt, int out[2]) {
    out[0] = out[1] = dflt;
    if (i >= a->n) return;
    const Value *v = &a->v[i];
    if (v->kind == V_LIST && v->n == 2) {
        out[0] = (int)v->items[0].i;
        out[1] = (int)v->items[1].i;
    } else if (value_is_int(v)) {
        out[0] = out[1] = (int)arg_int(a, i, dflt);
    }
}

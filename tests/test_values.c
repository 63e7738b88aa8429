/* tests/test_values.c — PyYAML scalar typing, parse_model's literal_eval of
 * string arguments, Python repr, and the model-name rules. Expected values
 * are Python's own behaviour (PyYAML 6, CPython 3). */
#include <math.h>

#include "test_util.h"

static Value parse_scalar(Arena *a, const char *yaml) {
    Diag d;
    diag_init(&d, "t");
    YNode *n = yaml_doc_parse(a, yaml, strlen(yaml), &d);
    cr_assert(n, "parse failed: %s", d.msg);
    Value v;
    cr_assert(value_from_yaml(a, n, &v, &d), "%s", d.msg);
    return v;
}

Test(values, pyyaml_typing_of_plain_scalars) {
    Arena a;
    arena_init(&a, 0);
    struct { const char *src; VKind k; double num; } cases[] = {
        {"yes", V_BOOL, 1}, {"Off", V_BOOL, 0}, {"True", V_BOOL, 1}, {"~", V_NONE, 0}, {"null", V_NONE, 0},
        {"0x10", V_INT, 16}, {"010", V_INT, 8}, {"1_000", V_INT, 1000}, {"-7", V_INT, -7}, {"0b101", V_INT, 5},
        {"1.5", V_FLOAT, 1.5}, {"1.5e+3", V_FLOAT, 1500}, {".5", V_FLOAT, 0.5}, {"-.inf", V_FLOAT, -INFINITY},
        /* YAML 1.1 floats need a dot: PyYAML reads 1e3 as a string */
        {"1e3", V_STR, 0}, {"None", V_STR, 0}, {"nearest", V_STR, 0}, {"'5'", V_STR, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Value v = parse_scalar(&a, cases[i].src);
        cr_expect_eq(v.kind, cases[i].k, "%s: kind %d, expected %d", cases[i].src, v.kind, cases[i].k);
        if (v.kind == V_INT || v.kind == V_BOOL || v.kind == V_FLOAT)
            cr_expect_eq(value_number(&v), cases[i].num, "%s: %g", cases[i].src, value_number(&v));
    }
    arena_free(&a);
}

Test(values, parse_model_literal_eval_of_string_args) {
    Arena a;
    arena_init(&a, 0);
    struct { const char *src; const char *repr; } cases[] = {
        {"None", "None"}, {"nc", "17"}, {"nearest", "'nearest'"}, {"'[1, 2]'", "[1, 2]"}, {"'(1,)'", "(1,)"},
        {"'(3)'", "3"}, {"1e3", "1000.0"}, {"'-0.5'", "-0.5"}, {"'[None, (1, 2), True]'", "[None, (1, 2), True]"},
        {"'01'", "'01'"}, {"'a b'", "'a b'"}, {"'[1,'", "'[1,'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Value v = parse_scalar(&a, cases[i].src);
        value_resolve_arg(&a, &v, 17);
        char buf[128];
        cr_assert(value_repr(&v, buf, sizeof buf));
        cr_expect_str_eq(buf, cases[i].repr, "%s", cases[i].src);
    }
    arena_free(&a);
}

Test(values, python_float_repr) {
    struct { double x; const char *repr; } cases[] = {
        {0.25, "0.25"}, {1.0, "1.0"}, {1.2, "1.2"}, {1e-05, "1e-05"}, {0.0001, "0.0001"}, {1e16, "1e+16"},
        {123456789012345678.0, "1.2345678901234568e+17"}, {0.1 + 0.2, "0.30000000000000004"}, {-2.5, "-2.5"}, {100.0, "100.0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Value v = value_float(cases[i].x, (Mark){0, 0});
        char buf[64];
        cr_assert(value_repr(&v, buf, sizeof buf));
        cr_expect_str_eq(buf, cases[i].repr);
    }
}

Test(values, model_name_rules) {
    cr_expect_eq(model_scale_from_stem("yolov8n-p6"), 'n');
    cr_expect_eq(model_scale_from_stem("yolo11x"), 'x');
    cr_expect_eq(model_scale_from_stem("yolov10b"), 0);
    cr_expect_eq(model_scale_from_stem("yolov3-tiny"), 0);
    cr_expect_eq(model_scale_from_stem("my-yolov5s-custom"), 's');
    char out[64];
    cr_expect(model_unified_stem("yolov8s-p2", out, sizeof out));
    cr_expect_str_eq(out, "yolov8-p2");
    cr_expect(model_unified_stem("yolo11x", out, sizeof out));
    cr_expect_str_eq(out, "yolo11");
    cr_expect_not(model_unified_stem("yolov8", out, sizeof out));
}

Test(values, thousands_separator) {
    char b[32];
    format_thousands(3157200, b, sizeof b);
    cr_expect_str_eq(b, "3,157,200");
    format_thousands(464, b, sizeof b);
    cr_expect_str_eq(b, "464");
    format_thousands(0, b, sizeof b);
    cr_expect_str_eq(b, "0");
}

/* compiler/value.h — Python-like values for YAML row arguments: how PyYAML
 * types a scalar, how Ultralytics' parse_model evaluates string arguments
 * (ast.literal_eval), and Python's repr for the summary table.
 * Knows no module semantics. */
#ifndef YOLOCC_VALUE_H
#define YOLOCC_VALUE_H
#include <stdbool.h>
#include <stdint.h>

#include "../ir/arena.h"
#include "../ir/diag.h"
#include "yaml_doc.h"

typedef enum { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST } VKind;

typedef struct Value {
    VKind kind;
    Mark mark;
    bool is_tuple;          /* V_LIST printed as (...) */
    bool b;
    int64_t i;
    double f;
    const char *s;
    int n;
    struct Value *items;
} Value;

/* YAML node -> value with PyYAML's (YAML 1.1) implicit typing of plain scalars. */
bool value_from_yaml(Arena *a, const YNode *n, Value *out, Diag *d);
/* parse_model's treatment of a string argument: "nc" -> nc, a Python literal
 * -> that literal, anything else stays a string. */
void value_resolve_arg(Arena *a, Value *v, int64_t nc);
/* Python repr() into buf; returns false if it did not fit. */
bool value_repr(const Value *v, char *buf, int cap);
const char *value_kind_name(VKind k);
/* Python truthiness / numeric views (bool counts as int, like Python). */
bool value_is_int(const Value *v);
bool value_is_number(const Value *v);
double value_number(const Value *v);
Value value_int(int64_t i, Mark m);
Value value_float(double f, Mark m);
Value value_bool(bool b, Mark m);
Value value_none(Mark m);

#endif

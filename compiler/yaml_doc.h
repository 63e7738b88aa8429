/* compiler/yaml_doc.h — reads one YAML document with libyaml into a small tree
 * of scalars, sequences and mappings, each with its source position.
 * Enforces the hard input limits; knows nothing about models. */
#ifndef YOLOCC_YAML_DOC_H
#define YOLOCC_YAML_DOC_H
#include <stdbool.h>
#include <stddef.h>

#include "../ir/arena.h"
#include "../ir/diag.h"

enum {
    YAML_MAX_BYTES = 1 << 20,   /* 1 MiB */
    YAML_MAX_DEPTH = 32,
    YAML_MAX_NODES = 200000,
};

typedef enum { YN_SCALAR, YN_SEQ, YN_MAP } YNodeKind;

typedef struct YNode {
    YNodeKind kind;
    Mark mark;
    /* scalar */
    const char *str;
    size_t len;
    bool plain;            /* unquoted: subject to YAML 1.1 implicit typing */
    /* sequence items, or mapping values with keys[] beside them */
    int n;
    struct YNode **items;
    struct YNode **keys;
} YNode;

/* Parses buf[0..len). On error returns NULL with d filled in. */
YNode *yaml_doc_parse(Arena *a, const char *buf, size_t len, Diag *d);
/* Reads a whole file with the size limit applied; NUL-terminated. */
char *yaml_read_file(Arena *a, const char *path, size_t *len, Diag *d);
/* Mapping lookup; NULL when absent. */
YNode *yaml_map_get(const YNode *map, const char *key);
/* A plain scalar YAML 1.1 reads as null: empty, ~, null, Null, NULL. */
bool yaml_is_null(const YNode *n);

#endif

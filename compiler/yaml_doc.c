/* compiler/yaml_doc.c — libyaml event stream -> YNode tree, with the limits of
 * DESIGN decision 10 (size, depth, node count, no anchors/aliases/tags,
 * duplicate keys, strict UTF-8). Model meaning lives in model_cfg.c. */
#include "yaml_doc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

static Mark mark_of(yaml_mark_t m) { return (Mark){(int)m.line + 1, (int)m.column + 1}; }

/* Position (line, col) of byte offset off, for errors found before libyaml runs. */
static Mark mark_at_offset(const char *buf, size_t off) {
    Mark m = {1, 1};
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') { m.line++; m.col = 1; }
        else if (((unsigned char)buf[i] & 0xC0) != 0x80) m.col++;
    }
    return m;
}

/* Returns the offset of the first invalid UTF-8 sequence, or len if valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned min;
        if (c < 0x80) { i++; continue; }
        else if ((c & 0xE0) == 0xC0) { n = 1; min = 0x80; c &= 0x1F; }
        else if ((c & 0xF0) == 0xE0) { n = 2; min = 0x800; c &= 0x0F; }
        else if ((c & 0xF8) == 0xF0) { n = 3; min = 0x10000; c &= 0x07; }
        else return i;
        if (len - i <= n) return i;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return i;
        i += n + 1;
    }
    return len;
}

typedef struct {
    yaml_parser_t p;
    Arena *a;
    Diag *d;
    int nodes;
} Reader;

static bool next_event(Reader *r, yaml_event_t *ev) {
    if (yaml_parser_parse(&r->p, ev)) return true;
    const char *problem = r->p.problem ? r->p.problem : "malformed YAML";
    Mark m = mark_of(r->p.problem_mark);
    if (r->p.context)
        return diag_error(r->d, m, "invalid YAML: %s %s", problem, r->p.context);
    return diag_error(r->d, m, "invalid YAML: %s", problem);
}

static bool reject_decorations(Reader *r, const yaml_event_t *ev) {
    const yaml_char_t *anchor = NULL, *tag = NULL;
    if (ev->type == YAML_SCALAR_EVENT) { anchor = ev->data.scalar.anchor; tag = ev->data.scalar.tag; }
    if (ev->type == YAML_SEQUENCE_START_EVENT) { anchor = ev->data.sequence_start.anchor; tag = ev->data.sequence_start.tag; }
    if (ev->type == YAML_MAPPING_START_EVENT) { anchor = ev->data.mapping_start.anchor; tag = ev->data.mapping_start.tag; }
    if (anchor)
        return diag_error(r->d, mark_of(ev->start_mark), "YAML anchors are not allowed (found '&%s')", (const char *)anchor);
    if (tag)
        return diag_error(r->d, mark_of(ev->start_mark), "YAML tags are not allowed (found '%s')", (const char *)tag);
    return true;
}

static bool same_scalar(const YNode *a, const YNode *b) {
    return a->kind == YN_SCALAR && b->kind == YN_SCALAR && a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

/* Builds the node whose first event is ev (already consumed). */
static YNode *read_node(Reader *r, yaml_event_t *ev, int depth) {
    if (!reject_decorations(r, ev)) return NULL;
    if (ev->type == YAML_ALIAS_EVENT) {
        diag_error(r->d, mark_of(ev->start_mark), "YAML aliases are not allowed (found '*%s')", (const char *)ev->data.alias.anchor);
        return NULL;
    }
    if (depth > YAML_MAX_DEPTH) {
        diag_error(r->d, mark_of(ev->start_mark), "nesting deeper than %d levels", YAML_MAX_DEPTH);
        return NULL;
    }
    if (++r->nodes > YAML_MAX_NODES) {
        diag_error(r->d, mark_of(ev->start_mark), "more than %d YAML nodes", YAML_MAX_NODES);
        return NULL;
    }
    YNode *n = arena_alloc(r->a, sizeof *n);
    if (!n) { diag_error(r->d, mark_of(ev->start_mark), "out of memory"); return NULL; }
    n->mark = mark_of(ev->start_mark);
    if (ev->type == YAML_SCALAR_EVENT) {
        n->kind = YN_SCALAR;
        n->len = ev->data.scalar.length;
        n->str = arena_strndup(r->a, (const char *)ev->data.scalar.value, n->len);
        n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        if (!n->str) { diag_error(r->d, n->mark, "out of memory"); return NULL; }
        return n;
    }
    bool is_map = ev->type == YAML_MAPPING_START_EVENT;
    if (!is_map && ev->type != YAML_SEQUENCE_START_EVENT) {
        diag_error(r->d, n->mark, "invalid YAML: unexpected event");
        return NULL;
    }
    n->kind = is_map ? YN_MAP : YN_SEQ;
    int cap = 0, kcap = 0;
    for (;;) {
        yaml_event_t e;
        if (!next_event(r, &e)) return NULL;
        if (e.type == YAML_SEQUENCE_END_EVENT || e.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&e);
            return n;
        }
        YNode *key = NULL;
        if (is_map) {
            key = read_node(r, &e, depth + 1);
            yaml_event_delete(&e);
            if (!key) return NULL;
            if (key->kind != YN_SCALAR) {
                diag_error(r->d, key->mark, "mapping keys must be plain scalars");
                return NULL;
            }
            for (int i = 0; i < n->n; i++)
                if (same_scalar(n->keys[i], key)) {
                    diag_error(r->d, key->mark, "duplicate key '%s' (first at line %d)", key->str, n->keys[i]->mark.line);
                    return NULL;
                }
            if (!next_event(r, &e)) return NULL;
        }
        YNode *val = read_node(r, &e, depth + 1);
        yaml_event_delete(&e);
        if (!val) return NULL;
        if (!arena_grow(r->a, (void **)&n->items, n->n, &cap, sizeof(YNode *)) ||
            (is_map && !arena_grow(r->a, (void **)&n->keys, n->n, &kcap, sizeof(YNode *)))) {
            diag_error(r->d, val->mark, "out of memory");
            return NULL;
        }
        if (is_map) n->keys[n->n] = key;
        n->items[n->n++] = val;
    }
}

YNode *yaml_doc_parse(Arena *a, const char *buf, size_t len, Diag *d) {
    if (len > YAML_MAX_BYTES)
        return diag_error(d, (Mark){0, 0}, "file is %zu bytes; the limit is %d (1 MiB)", len, YAML_MAX_BYTES), NULL;
    size_t bad = utf8_invalid_at((const unsigned char *)buf, len);
    if (bad < len) {
        diag_error(d, mark_at_offset(buf, bad), "invalid UTF-8 at byte offset %zu", bad);
        return NULL;
    }
    if (memchr(buf, '\0', len)) {
        size_t off = (size_t)((const char *)memchr(buf, '\0', len) - buf);
        diag_error(d, mark_at_offset(buf, off), "NUL byte at byte offset %zu", off);
        return NULL;
    }
    Reader r = {.a = a, .d = d};
    if (!yaml_parser_initialize(&r.p)) return diag_error(d, (Mark){0, 0}, "cannot initialise libyaml"), NULL;
    yaml_parser_set_input_string(&r.p, (const unsigned char *)buf, len);
    YNode *root = NULL;
    yaml_event_t e;
    int docs = 0;
    bool ok = true;
    while (ok) {
        if (!(ok = next_event(&r, &e))) break;
        yaml_event_type_t t = e.type;
        if (t == YAML_STREAM_END_EVENT) { yaml_event_delete(&e); break; }
        if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
            ok = diag_error(d, mark_of(e.start_mark), "more than one YAML document");
        } else if (t != YAML_STREAM_START_EVENT && t != YAML_DOCUMENT_START_EVENT && t != YAML_DOCUMENT_END_EVENT) {
            root = read_node(&r, &e, 1);
            ok = root != NULL;
        }
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&r.p);
    if (!ok) return NULL;
    if (!root) return diag_error(d, (Mark){1, 1}, "empty YAML document"), NULL;
    return root;
}

char *yaml_read_file(Arena *a, const char *path, size_t *len, Diag *d) {
    FILE *f = fopen(path, "rb");
    if (!f) return diag_error(d, (Mark){0, 0}, "cannot open: %s", strerror(errno)), NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return diag_error(d, (Mark){0, 0}, "not a regular file"), NULL;
    }
    if (st.st_size > YAML_MAX_BYTES) {
        fclose(f);
        return diag_error(d, (Mark){0, 0}, "file is %lld bytes; the limit is %d (1 MiB)", (long long)st.st_size, YAML_MAX_BYTES), NULL;
    }
    char *buf = arena_alloc(a, (size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size + 1, f) : 0;
    bool err = !buf || ferror(f);
    fclose(f);
    if (err) return diag_error(d, (Mark){0, 0}, "cannot read file"), NULL;
    if (n > (size_t)st.st_size) return diag_error(d, (Mark){0, 0}, "file grew while being read"), NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

bool yaml_is_null(const YNode *n) {
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    if (!n || n->kind != YN_SCALAR || !n->plain) return false;
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp(n->str, nulls[i]) == 0) return true;
    return false;
}

YNode *yaml_map_get(const YNode *map, const char *key) {
    if (!map || map->kind != YN_MAP) return NULL;
    size_t kl = strlen(key);
    for (int i = 0; i < map->n; i++)
        if (map->keys[i]->len == kl && memcmp(map->keys[i]->str, key, kl) == 0) return map->items[i];
    return NULL;
}

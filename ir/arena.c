/* ir/arena.c — bump allocator backing all compile-time objects.
 * Owns block management only. */
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK = 1 << 16 };

void arena_init(Arena *a, size_t limit) {
    a->head = NULL;
    a->total = 0;
    a->limit = limit;
}

void arena_free(Arena *a) {
    ArenaBlock *b = a->head;
    while (b) {
        ArenaBlock *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
    a->total = 0;
}

void *arena_alloc(Arena *a, size_t n) {
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->total > a->limit - n)) return NULL;
    ArenaBlock *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    a->total += n;
    memset(p, 0, n);
    return p;
}

void *arena_array(Arena *a, size_t count, size_t elem) {
    if (elem && count > SIZE_MAX / elem) return NULL;
    return arena_alloc(a, count * elem);
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (p) memcpy(p, s, n);
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = arena_alloc(a, (size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

int arena_grow(Arena *a, void **arr, int count, int *cap, size_t elem) {
    if (count < *cap) return 1;
    if (*cap > (1 << 28)) return 0;
    int ncap = *cap ? *cap * 2 : 16;
    void *n = arena_array(a, (size_t)ncap, elem);
    if (!n) return 0;
    if (count) memcpy(n, *arr, (size_t)count * elem);
    *arr = n;
    *cap = ncap;
    return 1;
}

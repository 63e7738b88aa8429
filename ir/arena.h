/* ir/arena.h — bump allocator: every object of one compile lives in one arena
 * and is freed at once. Owns memory only; knows nothing about graphs or YAML. */
#ifndef YOLOCC_ARENA_H
#define YOLOCC_ARENA_H
#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
    size_t total;      /* bytes handed out, for limits and reports */
    size_t limit;      /* 0 = unlimited; allocation past it fails */
} Arena;

void arena_init(Arena *a, size_t limit);
void arena_free(Arena *a);
/* Zeroed, 16-byte aligned; NULL on overflow, limit or out-of-memory. */
void *arena_alloc(Arena *a, size_t n);
void *arena_array(Arena *a, size_t count, size_t elem);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows *arr (count elements used, *cap allocated) to hold one more. */
int arena_grow(Arena *a, void **arr, int count, int *cap, size_t elem);

#endif

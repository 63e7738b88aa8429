/* ir/atomic_file.h — writes a file so that readers see either the old or the
 * whole new contents: temp file in the same directory, write, fsync, rename,
 * fsync of the directory. Used for plans, weights and checkpoints. */
#ifndef YOLOCC_ATOMIC_FILE_H
#define YOLOCC_ATOMIC_FILE_H
#include <stdbool.h>
#include <stddef.h>

/* Writes the concatenation of chunks[0..n). On failure the target is
 * untouched, the temp file removed, and err says which call failed. */
bool atomic_write(const char *path, const void *const *chunks, const size_t *lens, int n, char *err, int errcap);

#endif

/* compiler/kcache.h — on-disk cache of compiled kernel artifacts (cubins,
 * PTX, shared objects) under $XDG_CACHE_HOME/yolocc or ~/.cache/yolocc.
 * Owns the key hash and the entry format; must not know what an artifact is
 * or decide what goes into a key (callers hash source, options, versions). */
#ifndef YOLOCC_KCACHE_H
#define YOLOCC_KCACHE_H
#include <stdbool.h>
#include <stddef.h>

/* SHA-256 over parts[0..n), each prefixed by its length as 8 little-endian
 * bytes, so ("ab","c") and ("a","bc") differ. hex gets 64 lowercase digits;
 * it is "" if OpenSSL fails, which kcache_get treats as a miss and
 * kcache_put as an error. */
void kcache_key(const void *const *parts, const size_t *lens, int n, char hex[65]);

/* The entry for hex, malloc'd into *out. False when absent, unreadable or
 * failing verification (a bad entry is removed), or when YOLOCC_NO_CACHE is
 * set to anything but "" or "0". */
bool kcache_get(const char *hex, unsigned char **out, size_t *len);

/* Stores data under hex atomically (readers see the old entry or the whole
 * new one), creating the cache directory (0700) as needed. With
 * YOLOCC_NO_CACHE set it stores nothing and returns true. */
bool kcache_put(const char *hex, const void *data, size_t len, char *err, int errcap);

#endif

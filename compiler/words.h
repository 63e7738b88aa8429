/* compiler/words.h — joins a fixed list of words with spaces: the compiler
 * and NVRTC options as the text that goes into cache keys. Only formatting. */
#ifndef YOLOCC_WORDS_H
#define YOLOCC_WORDS_H
#include <stdbool.h>
#include <stdio.h>

/* False when cap is too small (buf then holds a truncated prefix). */
static inline bool words_join(const char *const *words, int n, char *buf, int cap) {
    if (cap <= 0) return false;
    int used = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        int k = snprintf(buf + used, (size_t)(cap - used), "%s%s", i ? " " : "", words[i]);
        if (k < 0 || k >= cap - used) return false;
        used += k;
    }
    return true;
}

#endif

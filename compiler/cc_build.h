/* compiler/cc_build.h — compiles one generated C source into a shared object
 * with the system C compiler ($CC, else cc) at plan-compile time. Owns the
 * compiler invocation and its temporary directory; must not load the result
 * (runtime/kernel_so.h does) or cache it (compiler/kcache.h does). */
#ifndef YOLOCC_CC_BUILD_H
#define YOLOCC_CC_BUILD_H
#include <stdbool.h>
#include <stddef.h>

/* Builds src into a shared object, returned malloc'd in *so. $CC may hold a
 * command with arguments ("ccache gcc"), split at blanks without quoting.
 * Works in a private directory under $TMPDIR (else /tmp) that is removed on
 * every path. On failure err names name_for_errors and holds the start of
 * the compiler's output. */
bool cc_build_shared(const char *src, const char *name_for_errors, unsigned char **so, size_t *so_len, char *err, int errcap);

/* The first line of `$CC --version`, for cache keys; false with the reason
 * in buf. */
bool cc_version(char *buf, int cap);

/* The flags every build passes, space-separated, for cache keys; false
 * when cap is too small. */
bool cc_options_string(char *buf, int cap);

#endif

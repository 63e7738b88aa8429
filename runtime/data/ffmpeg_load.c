/* runtime/data/ffmpeg_load.c — dlopen/dlsym of FFmpeg's libraries into the
 * FFmpeg table, each by the soname of the major version its headers
 * describe (struct layouts are part of that ABI). Must not call into them. */
#include "ffmpeg_load.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"

#define SONAME(name, major) "lib" name ".so." AV_STRINGIFY(major)
static const char *const LIBS[] = {SONAME("avformat", LIBAVFORMAT_VERSION_MAJOR), SONAME("avcodec", LIBAVCODEC_VERSION_MAJOR),
                                   SONAME("avutil", LIBAVUTIL_VERSION_MAJOR), SONAME("swscale", LIBSWSCALE_VERSION_MAJOR)};

static const struct {
    int lib;
    const char *name;
    size_t off;
} SYMS[] = {
#define FFMPEG_SYM(lib, fn) {lib, #fn, offsetof(FFmpeg, fn)},
    FFMPEG_FUNCS(FFMPEG_SYM)
#undef FFMPEG_SYM
};

static FFmpeg table;
static char why[512];
static bool loaded;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Handles stay open for the process's life: frames and contexts may outlive any one video. */
static void load(void) {
    void *h[4] = {0};
    for (int i = 0; i < 4; i++)
        if (!(h[i] = dlopen(LIBS[i], RTLD_NOW | RTLD_LOCAL))) {
            snprintf(why, sizeof why, "videos need FFmpeg's %s (Debian: libavformat59, libavcodec59, libswscale6): %s", LIBS[i], dlerror());
            return;
        }
    for (size_t i = 0; i < sizeof SYMS / sizeof SYMS[0]; i++) {
        void *p = dlsym(h[SYMS[i].lib], SYMS[i].name);
        if (!p) {
            snprintf(why, sizeof why, "%s has no %s", LIBS[SYMS[i].lib], SYMS[i].name);
            return;
        }
        memcpy((char *)&table + SYMS[i].off, &p, sizeof p);
    }
    loaded = true;
}

const FFmpeg *ffmpeg_load(char *err, int errcap) {
    pthread_once(&once, load);
    if (!loaded) return errf(err, errcap, "%s", why), NULL;
    return &table;
}

/* compiler/version.h — the yolocc version: printed by --version and part of
 * every compiled-kernel cache key. */
#ifndef YOLOCC_VERSION_H
#define YOLOCC_VERSION_H
#define YOLOCC_VERSION "0.2.0"
#endif

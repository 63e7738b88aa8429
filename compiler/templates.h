/* compiler/templates.h — the kernel templates of templates/, embedded into
 * the binary at build time (scripts/embed-templates.sh); looked up by path
 * relative to templates/, e.g. "cuda/map.cu". Read-only text. */
#ifndef YOLOCC_TEMPLATES_H
#define YOLOCC_TEMPLATES_H
#include <stddef.h>

/* The template's text (not NUL-terminated) and its length; NULL if absent. */
const char *template_get(const char *path, size_t *len);

#endif

/* compiler/templates.c — finds one embedded template in the blob the build
 * assembles from templates/ (each file after a line "@@@ PATH"). Must not
 * modify the text. */
#include "templates.h"

#include <string.h>

extern const char yk_templates[];

const char *template_get(const char *path, size_t *len) {
    size_t pl = strlen(path);
    for (const char *p = strstr(yk_templates, "\n@@@ "); p; p = strstr(p + 1, "\n@@@ ")) {
        const char *name = p + 5;
        if (strncmp(name, path, pl) != 0 || name[pl] != '\n') continue;
        const char *text = name + pl + 1, *end = strstr(text, "\n@@@ ");
        *len = (size_t)(end - text);
        return text;
    }
    return NULL;
}

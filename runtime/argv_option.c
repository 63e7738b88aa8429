/* runtime/argv_option.c — finding and taking out one option of yolort's
 * command line (see argv_option.h). Must not interpret values. */
#include "argv_option.h"

#include <string.h>

#include "../ir/diag.h"

bool argv_find_option(int argc, char **argv, const char *name, const char **value, int *at, int *span, char *err, int errcap) {
    *value = NULL, *at = -1, *span = 0;
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++) {
        bool joined = strncmp(argv[i], name, len) == 0 && argv[i][len] == '=';
        if (!joined && strcmp(argv[i], name) != 0) continue;
        if (*at >= 0) return errf(err, errcap, "%s is given twice", name);
        *at = i, *span = joined ? 1 : 2;
        *value = joined ? argv[i] + len + 1 : i + 1 < argc ? argv[i + 1] : NULL;
        if (!joined && i + 1 >= argc) *span = 1;
    }
    return true;
}

void argv_remove(int *argc, char **argv, int at, int span) {
    memmove(&argv[at], &argv[at + span], sizeof *argv * (size_t)(*argc - at - span + 1));
    *argc -= span;
}

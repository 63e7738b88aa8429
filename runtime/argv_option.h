/* runtime/argv_option.h — an option found anywhere on yolort's command line
 * before the command's own parser sees it (--ranks, --device), so it can be
 * acted on first and taken out. Must not interpret the option's value. */
#ifndef YOLOCC_ARGV_OPTION_H
#define YOLOCC_ARGV_OPTION_H
#include <stdbool.h>

/* "NAME VALUE" or "NAME=VALUE" in argv[1..argc): *at its index (-1 when
 * absent), *span the entries it takes (2 or 1) and *value (NULL when NAME
 * ends argv). False with one line in err when it is given twice. */
bool argv_find_option(int argc, char **argv, const char *name, const char **value, int *at, int *span, char *err, int errcap);

/* argv[at .. at + span) taken out (the terminating NULL moves with it). */
void argv_remove(int *argc, char **argv, int at, int span);

#endif

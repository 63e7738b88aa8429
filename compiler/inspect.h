/* compiler/inspect.h — `yolocc inspect FILE.plan`: what a plan holds, as text
 * or JSON. Reads through runtime/plan_read, so a plan it shows is one the
 * runtime accepts. */
#ifndef YOLOCC_INSPECT_H
#define YOLOCC_INSPECT_H
#include <stdbool.h>

/* Returns the process exit status (0, or 2 for a bad plan). svg_path (may be
 * NULL): also draw the memory plan there. */
int inspect_main(const char *path, bool json, const char *svg_path);

#endif

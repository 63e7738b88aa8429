/* tests/fuzz/fuzz_labels.c — libFuzzer harness for the YOLO label-file parser
 * (dataset_parse_labels in runtime/data/dataset.c). Owns this harness only;
 * seeds are tests/fuzz/seeds/fuzz_labels/.
 * Every input must give boxes that pass the checks by themselves (class in
 * [0, nc), coordinates in [0, 1], sizes > 0, no two equal), account for every
 * non-blank line exactly once (a box, or one counted problem), and report the
 * problems as single "FILE:LINE: warning: " lines, capped per file.
 * Crashes, sanitizer reports, leaks and aborts are findings.
 * Build and run: make build/fuzz/fuzz_labels, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_labels */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { NC = 80, SHOWN_MAX = 20 };

static void check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "fuzz_labels: %s\n", what);
    abort();
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Non-blank lines, counted independently of the parser. */
static int nonblank_lines(const uint8_t *d, size_t n) {
    if (n >= 3 && memcmp(d, "\xEF\xBB\xBF", 3) == 0) d += 3, n -= 3;
    int count = 0;
    bool seen = false;
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\n') {
            count += seen;
            seen = false;
        } else if (!blank((char)d[i])) {
            seen = true;
        }
    }
    return count + seen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *warn = NULL;
    size_t wlen = 0;
    FILE *w = open_memstream(&warn, &wlen);
    check(w != NULL, "open_memstream failed");
    DataIssues iss = {0};
    Label *out = NULL;
    int n = -1;
    /* data is passed as libFuzzer owns it (exactly size bytes), so ASan sees
     * any read past the end */
    bool ok = dataset_parse_labels((const char *)data, size, "f.txt", NC, &out, &n, &iss, w);
    check(fclose(w) == 0, "fclose of the warning stream failed");
    check(ok, "parse failed (out of memory?)");
    check(n >= 0 && (n == 0) == (out == NULL), "count and array disagree");
    for (int i = 0; i < n; i++) {
        const Label *l = &out[i];
        check(l->cls >= 0 && l->cls < NC, "class out of range");
        check(l->cx >= 0 && l->cx <= 1 && l->cy >= 0 && l->cy <= 1, "centre outside [0, 1]");
        check(l->w > 0 && l->w <= 1 && l->h > 0 && l->h <= 1, "size outside (0, 1]");
        for (int j = 0; j < i; j++)
            check(!(l->cls == out[j].cls && l->cx == out[j].cx && l->cy == out[j].cy && l->w == out[j].w && l->h == out[j].h), "duplicate kept");
    }
    int problems = iss.bad_lines + iss.bad_classes + iss.bad_coords + iss.duplicate_lines;
    check(iss.missing_images == 0 && iss.unreadable_images == 0 && iss.unreadable_labels == 0, "image counters touched");
    check(n + problems == nonblank_lines(data, size), "a non-blank line was not accounted for exactly once");
    int lines = 0;
    for (char *s = warn; *s;) {
        char *nl = strchr(s, '\n');
        check(nl != NULL, "warning without a newline");
        *nl = 0;
        check(strncmp(s, "f.txt:", 6) == 0 && strstr(s, ": warning: "), "warning line not in FILE:LINE: warning: form");
        lines++;
        s = nl + 1;
    }
    int want = problems <= SHOWN_MAX ? problems : SHOWN_MAX + 1;
    check(lines == want, "warning lines do not match the problem count");
    free(warn);
    free(out);
    return 0;
}

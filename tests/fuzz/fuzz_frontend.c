/* tests/fuzz/fuzz_frontend.c — libFuzzer harness for the whole frontend:
 * YAML bytes -> model config -> compiled, verified IR -> summary JSON.
 * Every input must either fail with a recorded diagnostic or produce a graph
 * that verifies; crashes, sanitizer reports and leaks are findings.
 * Build and run: make fuzz, make fuzz-run FUZZ_SECONDS=N (add
 * -dict=tests/fuzz/yaml.dict when running build/fuzz/fuzz_frontend by hand). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../compiler/lower.h"
#include "../../compiler/model_cfg.h"
#include "../../compiler/summary.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Arena a;
    /* a byte limit, so that fuzzed huge models fail cleanly instead of
     * exhausting memory */
    arena_init(&a, (size_t)256 << 20);
    Diag d;
    diag_init(&d, "fuzz.yaml");
    /* the scale as --scale would give it, picked by the input's length so
     * that a reproducer stays one file: none (the file's first scale, or
     * the C3k2/A2C2f rules with scale ""), or one of n, s, m, l, x */
    static const char *const scales[] = {NULL, "n", "s", "m", "l", "x"};
    ModelOptions opts = {.scale = scales[size % 6]};
    ModelConfig cfg;
    Model m;
    ModelSummary s;
    /* the buffer is passed as libFuzzer owns it (exactly size bytes, no NUL
     * after it), so ASan sees any read past len */
    bool ok = model_cfg_parse(&a, "fuzz.yaml", (const char *)data, size, &opts, &cfg, &d) &&
              model_compile(&a, &cfg, 64, 1, false, &m, &s, &d);
    if (ok) {
        /* model_compile verified the graph already; verify again, and an
         * error recorded on success is a bug too */
        char err[256];
        if (d.failed || !graph_verify(&m.g, err, sizeof err)) {
            fprintf(stderr, "fuzz_frontend: compiled model does not verify: %s\n", d.failed ? d.msg : err);
            abort();
        }
        char *json = summary_json(&m, &s);
        free(json);
    } else if (!d.failed) {
        /* every failure must leave a diagnostic for the CLI to print */
        fprintf(stderr, "fuzz_frontend: failed without a diagnostic\n");
        abort();
    } else {
        /* and the CLI formats it into a bounded buffer */
        char msg[1024];
        diag_format(&d, msg, sizeof msg);
    }
    arena_free(&a);
    return 0;
}

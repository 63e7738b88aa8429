/* tests/fuzz/fuzz_plan.c — libFuzzer harness for the plan reader: any bytes
 * must give a graph that verifies, or one error; never a crash or a leak.
 * A KERNELS section that loads must have an index whose blobs lie inside it. */
#include <stdint.h>
#include <stdlib.h>

#include "../../compiler/codegen.h"
#include "../../runtime/plan_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Plan p;
    char err[512];
    if (plan_parse(data, size, &p, err, sizeof err)) {
        char verr[256];
        if (!graph_verify(&p.g, verr, sizeof verr)) abort();
        cJSON *idx = NULL;
        const unsigned char *blobs;
        size_t blobs_len;
        if (p.kernels && !codegen_parse_section(p.kernels, p.kernels_len, &idx, &blobs, &blobs_len, verr, sizeof verr) && !verr[0]) abort();
        if (idx && (blobs < p.kernels || blobs + blobs_len != p.kernels + p.kernels_len)) abort();
        cJSON_Delete(idx);
    } else if (!err[0]) {
        abort(); /* a rejection must say why */
    }
    plan_free(&p);
    return 0;
}

/* tests/fuzz/fuzz_plan.c — libFuzzer harness for the plan reader: any bytes
 * must give a graph that verifies, or one error; never a crash or a leak. */
#include <stdint.h>
#include <stdlib.h>

#include "../../runtime/plan_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Plan p;
    char err[512];
    if (plan_parse(data, size, &p, err, sizeof err)) {
        char verr[256];
        if (!graph_verify(&p.g, verr, sizeof verr)) abort();
    } else if (!err[0]) {
        abort(); /* a rejection must say why */
    }
    plan_free(&p);
    return 0;
}

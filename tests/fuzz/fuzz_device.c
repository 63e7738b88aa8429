/* tests/fuzz/fuzz_device.c — libFuzzer harness for `--device` (device_parse
 * and device_user_name in runtime/device_select.c). Owns this harness only;
 * seeds are tests/fuzz/seeds/fuzz_device/.
 * A value either parses into a choice that holds independent of the parser
 * (cpu with no devices, at most DEVICE_MAX entries, no index twice, the -1s
 * counted, and its normalised text parsing back to the same choice), or
 * fails with one line. The same bytes as CUDA_VISIBLE_DEVICES must give
 * each ordinal a name that fits its buffer. Crashes, sanitizer reports and
 * leaks are findings.
 * Build and run: make build/fuzz/fuzz_device, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_device */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/device_select.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, const char *value) {
    if (ok) return;
    fprintf(stderr, "fuzz_device: %s for '%s'\n", what, value);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 400) return 0;
    char value[401];
    memcpy(value, data, size);
    value[size] = 0; /* a NUL inside ends the value, as it would on a command line */
    DeviceChoice d, again;
    char err[512] = "";
    if (!device_parse(value, &d, err, sizeof err)) {
        check(err[0] && !strchr(err, '\n'), "a refusal without one line", value);
    } else {
        check(!d.cpu || d.n == 0, "cpu with devices", value);
        check(d.n >= 0 && d.n <= DEVICE_MAX, "a count out of range", value);
        int idle = 0;
        for (int i = 0; i < d.n; i++) {
            check(d.id[i] >= -1, "an index below -1", value);
            idle += d.id[i] == -1;
            for (int j = 0; j < i; j++) check(d.id[i] == -1 || d.id[i] != d.id[j], "an index twice", value);
        }
        check(idle == d.idle, "the -1s miscounted", value);
        check(device_parse(d.text, &again, err, sizeof err), "its own text refused", value);
        check(again.cpu == d.cpu && again.n == d.n && again.idle == d.idle && memcmp(again.id, d.id, sizeof d.id[0] * (size_t)d.n) == 0,
              "its own text parsed differently", value);
    }
    if (setenv("CUDA_VISIBLE_DEVICES", value, 1) == 0) {
        char name[8];
        for (int ordinal = 0; ordinal < 4; ordinal++) {
            device_user_name(ordinal, name, sizeof name);
            check(strlen(name) < sizeof name, "a name past its buffer", value);
        }
    }
    return 0;
}

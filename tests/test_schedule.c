/* tests/test_schedule.c — the trainer's numbers against the values the
 * training semantics (§5.1, §5.3, §6) spell out, and the training-state file
 * (checkpoint.c): round trip, corruption caught, failed writes harmless. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../compiler/train_compile.h"
#include "../runtime/train/checkpoint.h"
#include "../runtime/train/schedule.h"

Test(schedule, linear_and_cosine_lr_factor) {
    /* §5.3: E = 100, lrf = 0.01 */
    cr_assert_float_eq(lr_factor(0, 100, 0.01, false), 1.0, 1e-12);
    cr_assert_float_eq(lr_factor(1, 100, 0.01, false), 0.9901, 1e-12);
    cr_assert_float_eq(lr_factor(50, 100, 0.01, false), 0.505, 1e-12);
    cr_assert_float_eq(lr_factor(99, 100, 0.01, false), 0.0199, 1e-12);
    /* cosine: 1 at the start, (1 + lrf) / 2 halfway, lrf at the end */
    cr_assert_float_eq(lr_factor(0, 100, 0.01, true), 1.0, 1e-12);
    cr_assert_float_eq(lr_factor(50, 100, 0.01, true), 0.505, 1e-12);
    cr_assert_float_eq(lr_factor(100, 100, 0.01, true), 0.01, 1e-12);
}

Test(schedule, coco_warmup_iterations_and_accumulation) {
    /* §5.3: COCO at batch 16: nb = 7393, nw = 22179; accumulate runs 1 (ni
     * 0-3696), 2 (3697-11089), 3 (11090-18482), 4 from 18483 */
    int nw = warmup_iterations(3.0, 7393);
    cr_assert_eq(nw, 22179);
    int expect[][2] = {{0, 1}, {3696, 1}, {3697, 2}, {11089, 2}, {11090, 3}, {18482, 3}, {18483, 4}, {22179, 4}};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        WarmupValues w = warmup_values(expect[i][0], nw, 0.01, 0.1, 0.8, 0.937, 64, 16);
        cr_expect_eq(w.accumulate, expect[i][1], "ni %d: accumulate %d, expected %d", expect[i][0], w.accumulate, expect[i][1]);
    }
    /* short runs still warm up for 100 iterations; warmup_epochs 0 turns it off */
    cr_assert_eq(warmup_iterations(3.0, 10), 100);
    cr_assert_eq(warmup_iterations(0.0, 10), -1);
}

Test(schedule, warmup_interpolates_lr_and_momentum) {
    WarmupValues w0 = warmup_values(0, 100, 0.02, 0.1, 0.8, 0.937, 64, 16);
    cr_assert_float_eq(w0.lr[0], 0.1, 1e-12);   /* bias lr starts at warmup_bias_lr */
    cr_assert_float_eq(w0.lr[1], 0.0, 1e-12);
    cr_assert_float_eq(w0.momentum, 0.8, 1e-12);
    WarmupValues w = warmup_values(25, 100, 0.02, 0.1, 0.8, 0.937, 64, 16);
    cr_assert_float_eq(w.lr[0], 0.1 + 0.25 * (0.02 - 0.1), 1e-12);
    cr_assert_float_eq(w.lr[1], 0.005, 1e-12);
    cr_assert_float_eq(w.lr[2], 0.005, 1e-12);
    cr_assert_float_eq(w.momentum, 0.8 + 0.25 * 0.137, 1e-12);
    WarmupValues end = warmup_values(100, 100, 0.02, 0.1, 0.8, 0.937, 64, 16);
    cr_assert_float_eq(end.lr[0], 0.02, 1e-12);
    cr_assert_float_eq(end.momentum, 0.937, 1e-12);
}

Test(schedule, accumulation_weight_decay_auto_lr_and_ema_decay) {
    /* §5.1: accumulate = max(round(64 / batch), 1), Python rounding */
    cr_assert_eq(train_accumulate(16), 4);
    cr_assert_eq(train_accumulate(24), 3);   /* 2.67 */
    cr_assert_eq(train_accumulate(128), 1);  /* 0.5 rounds to even 0, then max 1 */
    cr_assert_eq(train_accumulate(26), 2);   /* 2.46 */
    cr_assert_float_eq(auto_adamw_lr(80), 0.000119, 1e-15);
    cr_assert_float_eq(auto_adamw_lr(3), 0.001429, 1e-15);
    /* §6: d(1) = 0.0005, d(2000) = 0.632, d(10000) = 0.9932 (rounded) */
    cr_assert_float_eq(ema_decay(1), 0.0005, 1e-6);
    cr_assert_float_eq(ema_decay(2000), 0.632, 5e-4);
    cr_assert_float_eq(ema_decay(10000), 0.9932, 5e-5);
}

static char *tmp_path(const char *leaf) {
    char *dir = strdup("/tmp/yolocc-ckpt-XXXXXX");
    cr_assert(mkdtemp(dir));
    char *p = malloc(strlen(dir) + strlen(leaf) + 2);
    sprintf(p, "%s/%s", dir, leaf);
    free(dir);
    return p;
}

Test(checkpoint, round_trip_and_corruption) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t n = 7, shape_a[2] = {2, 3};
    StWriteItem items[2] = {{"model/w", ST_F32, 2, shape_a, a}, {"model/n", ST_I64, 0, NULL, &n}};
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "epoch", 3);
    char *path = tmp_path("last.state"), err[512];
    cr_assert(ckpt_write(path, items, 2, st, err, sizeof err), "%s", err);
    StFile f;
    cJSON *back;
    cr_assert(ckpt_read(path, &f, &back, err, sizeof err), "%s", err);
    cr_assert_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(back, "epoch")), 3);
    const StTensor *w = st_find(&f, "model/w");
    cr_assert(w && w->nbytes == sizeof a && memcmp(w->data, a, sizeof a) == 0);
    st_free(&f);
    cJSON_Delete(back);
    /* flip one byte of tensor data: the checksum names the tensor */
    FILE *fp = fopen(path, "r+b");
    cr_assert(fp);
    fseek(fp, -3, SEEK_END);
    int c = fgetc(fp);
    fseek(fp, -3, SEEK_END);
    fputc(c ^ 0x40, fp);
    fclose(fp);
    cr_assert_not(ckpt_read(path, &f, &back, err, sizeof err));
    cr_assert(strstr(err, "checksum") && strstr(err, "model/"), "%s", err);
    cr_assert_null(back);
    /* a write that cannot happen leaves the old file as it was */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/last.state", path);
    cr_assert_not(ckpt_write(bad, items, 2, st, err, sizeof err));
    cJSON_Delete(st);
    unlink(path);
    free(path);
}

Test(checkpoint, rejects_plain_safetensors) {
    float a[2] = {1, 2};
    int64_t shape[1] = {2};
    StWriteItem it = {"x", ST_F32, 1, shape, a};
    char *path = tmp_path("plain.safetensors"), err[512];
    cr_assert(st_write(path, &it, 1, NULL, err, sizeof err), "%s", err);
    StFile f;
    cJSON *st;
    cr_assert_not(ckpt_read(path, &f, &st, err, sizeof err));
    cr_assert(strstr(err, "not a yolocc training-state file"), "%s", err);
    unlink(path);
    free(path);
}

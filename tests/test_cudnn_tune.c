/* tests/test_cudnn_tune.c — the host side of choosing cuDNN's engine per shape
 * (runtime/cuda/cuda_step_tune.c): the YOLOCC_CUDNN_TUNE knob, which timed candidate wins,
 * the tuning cache's entry (written, read back, and every damaged form refused) and the route
 * summary's clauses. The timing itself needs a GPU (test_cuda_step_gpu.c). Owns no runtime code. */
#include "../runtime/cuda/cuda_step.h"
#include "test_util.h"

Test(cudnn_tune, the_knob_keeps_candidates_to_time_or_the_first_choice) {
    char err[256] = "";
    int n = 0;
    cr_expect(cudnn_tune_knob(NULL, &n, err, sizeof err) && n == CONV_TUNE_MAX, "unset: time");
    n = 0;
    cr_expect(cudnn_tune_knob("", &n, err, sizeof err) && n == CONV_TUNE_MAX, "empty: time");
    n = 0;
    cr_expect(cudnn_tune_knob("time", &n, err, sizeof err) && n == CONV_TUNE_MAX);
    cr_expect(cudnn_tune_knob("heuristic", &n, err, sizeof err) && n == 1);
    n = 7;
    cr_expect_not(cudnn_tune_knob("fastest", &n, err, sizeof err));
    cr_expect_str_eq(err, "YOLOCC_CUDNN_TUNE=fastest: expected time or heuristic");
    cr_expect_eq(n, 7, "a refused value changes nothing");
}

Test(cudnn_tune, the_fastest_candidate_wins_by_a_margin_over_the_first_choice) {
    const float close[] = {1.0f, 0.98f, 2.0f}, faster[] = {1.0f, 0.9f, 0.95f}, first_failed[] = {-1.0f, 2.0f, 1.0f}, none[] = {-1.0f, -1.0f},
                later_failed[] = {1.0f, -1.0f, 0.5f}, first_best[] = {0.5f, 1.0f, 0.6f};
    cr_expect_eq(cudnn_tune_pick(close, 3), 0, "2% faster is noise: the heuristics' first stays");
    cr_expect_eq(cudnn_tune_pick(faster, 3), 1, "10% faster wins, and the fastest of those");
    cr_expect_eq(cudnn_tune_pick(first_failed, 3), 2, "without the first, the fastest that ran");
    cr_expect_eq(cudnn_tune_pick(none, 2), -1, "nothing ran");
    cr_expect_eq(cudnn_tune_pick(later_failed, 3), 2, "a failed candidate is never picked");
    cr_expect_eq(cudnn_tune_pick(first_best, 3), 0);
    cr_expect_eq(cudnn_tune_pick(first_best, 1), 0, "one candidate");
}

Test(cudnn_tune, a_cache_entry_reads_back_as_written) {
    const float ms[4] = {0.125f, -1.0f, 0.0625f, 3.5f};
    char buf[256];
    int len = cudnn_tune_entry_format(buf, sizeof buf, 2, 4, ms);
    cr_assert_gt(len, 0);
    cr_expect_str_eq(buf, "yolocc cudnn tune 1\nrank 2 of 4\nms 0.125 -1 0.0625 3.5\n");
    int rank = -1;
    float back[4] = {0};
    cr_assert(cudnn_tune_entry_parse(buf, (size_t)len, 4, &rank, back));
    cr_expect_eq(rank, 2);
    for (int i = 0; i < 4; i++) cr_expect_eq(back[i], ms[i], "ms[%d]", i);
    char small[40];
    cr_expect_eq(cudnn_tune_entry_format(small, sizeof small, 2, 4, ms), -1, "a buffer too small is refused");
}

/* Anything but a well-formed entry of the expected candidates is a miss (the shape is timed again). */
Test(cudnn_tune, a_damaged_or_foreign_cache_entry_is_refused) {
    const char *bad[] = {
        "yolocc cudnn tune 2\nrank 0 of 2\nms 1 2\n",     /* another format version */
        "yolocc cudnn tune 1\nrank 2 of 2\nms 1 2\n",     /* rank out of range */
        "yolocc cudnn tune 1\nrank -1 of 2\nms 1 2\n",
        "yolocc cudnn tune 1\nrank 0 of 3\nms 1 2 3\n",   /* another number of candidates */
        "yolocc cudnn tune 1\nrank 0 of 2\nms 1\n",       /* a time missing */
        "yolocc cudnn tune 1\nrank 0 of 2\nms 1 2 3\n",   /* one too many */
        "yolocc cudnn tune 1\nrank 0 of 2\nms 1 2",       /* cut short */
        "yolocc cudnn tune 1\nrank 0 of 2\nms 1 2x\n",
        "yolocc cudnn tune 1\nrank 1 of 2\nms 1 -1\n",    /* the chosen one never ran */
        "yolocc cudnn tune 1\nrank 0 of 2\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rank = 99;
        float ms[3];
        cr_expect_not(cudnn_tune_entry_parse(bad[i], strlen(bad[i]), 2, &rank, ms), "accepted: %s", bad[i]);
        cr_expect_eq(rank, 99, "a refused entry sets no rank");
    }
    const char nul[] = "yolocc cudnn tune 1\nrank 0 of 2\nms 1 2\n\0";
    int rank;
    float ms[2];
    cr_expect_not(cudnn_tune_entry_parse(nul, sizeof nul - 1, 2, &rank, ms), "a NUL inside is refused");
    cr_expect(cudnn_tune_entry_parse(nul, sizeof nul - 2, 2, &rank, ms), "the same text without it is fine");
}

/* Every single-byte change of a valid entry either fails or still gives a rank in range whose
 * candidate ran (under ASan: no read past the entry). */
Test(cudnn_tune, every_one_byte_change_of_an_entry_is_refused_or_in_range) {
    const float ms[3] = {1.5f, 0.75f, 2.0f};
    char good[256];
    const int len = cudnn_tune_entry_format(good, sizeof good, 1, 3, ms);
    cr_assert_gt(len, 0);
    const unsigned char values[] = {0, '\n', ' ', '-', '0', '1', '2', '3', '9', 'x', 'e', '.', 0xff};
    int accepted = 0;
    for (int at = 0; at < len; at++)
        for (size_t v = 0; v < sizeof values; v++) {
            char *copy = malloc((size_t)len);
            memcpy(copy, good, (size_t)len);
            copy[at] = (char)values[v];
            int rank = -1;
            float back[3] = {0};
            if (cudnn_tune_entry_parse(copy, (size_t)len, 3, &rank, back)) {
                cr_expect(rank >= 0 && rank < 3 && back[rank] >= 0, "byte %d -> %u: rank %d", at, values[v], rank);
                accepted++;
            }
            free(copy);
        }
    for (int cut = 0; cut < len; cut++) {
        int rank;
        float back[3];
        cr_expect_not(cudnn_tune_entry_parse(good, (size_t)cut, 3, &rank, back), "cut at %d", cut);
    }
    cr_log_info("%d of %d one-byte changes still parse (digits changed within the times)", accepted, len * (int)sizeof values);
}

Test(cudnn_tune, the_route_summary_says_how_engines_were_chosen) {
    CudaStep cs;
    memset(&cs, 0, sizeof cs);
    char line[1024];
    cs.kernel_launches = 10, cs.cudnn_ops = 6;
    cs.tune_shapes = 5, cs.tune_cached = 2, cs.tune_changed = 3, cs.tune_ms[0] = 2.0, cs.tune_ms[1] = 1.5;
    cs.conv.candidates = CONV_TUNE_MAX;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; cuDNN engines timed for 5 convolution shapes (2 choices from the tuning cache), 3 faster than the heuristics' first (1.500 ms a step instead of 2.000)"),
              "%s", line);
    cs.tune_failed = 2;
    snprintf(cs.tune_why, sizeof cs.tune_why, "cudnnBackendExecute failed");
    snprintf(cs.tune_store_why, sizeof cs.tune_store_why, "kcache: cannot create directory /x");
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; 2 candidate engines failed to run and were skipped (cudnnBackendExecute failed); the engine choices could not be cached (kcache: cannot create directory /x)"),
              "%s", line);
    memset(&cs, 0, sizeof cs);
    cs.conv.candidates = 1;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; cuDNN engines as its heuristics rank them first (YOLOCC_CUDNN_TUNE=heuristic)"), "%s", line);
    cs.conv.candidates = CONV_TUNE_MAX, cs.cudnn_ops = 4;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect(strstr(line, "; cuDNN engines: one acceptable per convolution shape, nothing to time"), "%s", line);
    cs.conv.candidates = 0;
    cuda_step_describe(&cs, line, sizeof line);
    cr_expect_null(strstr(line, "cuDNN engines"), "no clause for a step that prepared nothing: %s", line);
}

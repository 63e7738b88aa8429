/* tests/test_loss_scale.c — the fp16 dynamic loss-scale state machine
 * (runtime/cuda/loss_scale.c): every transition against an independent
 * model of PyTorch's GradScaler rule, the floor and ceiling, the disabled
 * (bf16/fp32) machine, the finiteness check, and resume-state validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../runtime/cuda/loss_scale.h"

Test(loss_scale, initial_state) {
    LossScale ls;
    loss_scale_init(&ls, true);
    cr_expect(ls.enabled);
    cr_expect_eq(ls.scale, 65536.0f);
    cr_expect_eq(ls.growth_tracker, 0);
    cr_expect_eq(ls.steps, 0);
    cr_expect_eq(ls.skipped, 0);
    cr_expect_eq(loss_scale_inverse(&ls), 1.0f / 65536.0f);
    loss_scale_init(&ls, false);
    cr_expect(!ls.enabled);
    cr_expect_eq(ls.scale, 1.0f);
}

Test(loss_scale, grows_after_exactly_2000_finite_steps) {
    LossScale ls;
    loss_scale_init(&ls, true);
    for (int i = 1; i < 2000; i++) {
        cr_assert(loss_scale_update(&ls, true), "finite step %d skipped", i);
        cr_assert_eq(ls.scale, 65536.0f, "scale changed after %d finite steps", i);
        cr_assert_eq(ls.growth_tracker, i);
    }
    cr_expect(loss_scale_update(&ls, true));
    cr_expect_eq(ls.scale, 131072.0f, "x2 at the 2000th finite step");
    cr_expect_eq(ls.growth_tracker, 0);
    /* and again 2000 later, not earlier */
    for (int i = 1; i < 2000; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, 131072.0f);
    loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, 262144.0f);
    cr_expect_eq(ls.steps, 4000);
    cr_expect_eq(ls.skipped, 0);
}

Test(loss_scale, overflow_halves_skips_and_resets_the_count) {
    LossScale ls;
    loss_scale_init(&ls, true);
    for (int i = 0; i < 1999; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.growth_tracker, 1999);
    cr_expect(!loss_scale_update(&ls, false), "an inf/NaN step must be skipped");
    cr_expect_eq(ls.scale, 32768.0f);
    cr_expect_eq(ls.growth_tracker, 0, "the run of finite steps restarts");
    cr_expect_eq(ls.skipped, 1);
    /* 1999 more finite steps are not enough: the count restarted */
    for (int i = 0; i < 1999; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, 32768.0f);
    loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, 65536.0f);
    /* consecutive overflows keep halving */
    for (int i = 0; i < 3; i++) cr_expect(!loss_scale_update(&ls, false));
    cr_expect_eq(ls.scale, 8192.0f);
    cr_expect_eq(ls.skipped, 4);
    cr_expect_eq(ls.steps, 1999 + 1 + 1999 + 1 + 3);
}

Test(loss_scale, floor_at_one) {
    LossScale ls;
    loss_scale_init(&ls, true);
    for (int i = 0; i < 16; i++) loss_scale_update(&ls, false);
    cr_expect_eq(ls.scale, 1.0f, "65536 / 2^16 = 1");
    for (int i = 0; i < 5; i++) cr_expect(!loss_scale_update(&ls, false), "still skipped at the floor");
    cr_expect_eq(ls.scale, 1.0f, "never below 1");
    for (int i = 0; i < 2000; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, 2.0f, "grows again from the floor");
}

Test(loss_scale, ceiling_at_2_pow_127) {
    LossScale ls;
    loss_scale_init(&ls, true);
    ls.scale = ldexpf(1.0f, 126);
    for (int i = 0; i < 2000; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, ldexpf(1.0f, 127));
    for (int i = 0; i < 2000; i++) loss_scale_update(&ls, true);
    cr_expect_eq(ls.scale, ldexpf(1.0f, 127), "stays finite at 2^127");
    cr_expect(isfinite(ls.scale));
    cr_expect_eq(ls.growth_tracker, 0);
}

/* A random walk of finite and non-finite steps against a direct model of
 * the rule: every transition, every scale, every decision. */
Test(loss_scale, random_walk_matches_the_rule) {
    LossScale ls;
    loss_scale_init(&ls, true);
    double scale = 65536;
    int tracker = 0;
    long skipped = 0, grew = 0, at_floor = 0;
    uint64_t s = 12345;
    for (long step = 1; step <= 200000; step++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        /* calm phases (overflow 1 in 10,000) and stormy ones (1 in 100), so
         * growth, backoff and the floor all happen */
        uint64_t odds = (step / 10000) % 2 ? 100 : 10000;
        bool finite = (s >> 33) % odds != 0;
        bool apply = loss_scale_update(&ls, finite);
        bool want_apply = finite;
        if (!finite) {
            scale = scale * 0.5 < 1 ? 1 : scale * 0.5;
            tracker = 0;
            skipped++;
        } else if (++tracker == 2000) {
            scale = scale * 2 > ldexp(1, 127) ? scale : scale * 2;
            tracker = 0;
            grew++;
        }
        at_floor += scale == 1;
        cr_assert_eq(apply, want_apply, "step %ld", step);
        cr_assert_eq((double)ls.scale, scale, "step %ld: scale %g, expected %g", step, (double)ls.scale, scale);
        cr_assert_eq(ls.growth_tracker, tracker, "step %ld", step);
        cr_assert_eq(ls.skipped, skipped);
        cr_assert_eq(ls.steps, step);
        int e;
        cr_assert_eq(frexpf(ls.scale, &e), 0.5f, "step %ld: %g is not a power of two", step, (double)ls.scale);
    }
    cr_log_info("random walk: %ld growths, %ld skips, %ld steps at the floor", grew, skipped, at_floor);
    cr_expect(grew > 10 && skipped > 100 && at_floor > 0, "the walk must exercise growth (%ld), backoff (%ld) and the floor (%ld)", grew, skipped, at_floor);
}

Test(loss_scale, disabled_never_skips_or_scales) {
    LossScale ls;
    loss_scale_init(&ls, false);
    for (int i = 0; i < 5000; i++) cr_assert(loss_scale_update(&ls, i % 7 != 0), "disabled scaling skipped step %d", i);
    cr_expect_eq(ls.scale, 1.0f);
    cr_expect_eq(ls.growth_tracker, 0);
    cr_expect_eq(ls.skipped, 0);
    cr_expect_eq(ls.steps, 5000);
}

Test(loss_scale, finiteness_check) {
    float x[5] = {0, -1e30f, 1e-40f, 3, -0.0f};
    cr_expect(loss_scale_all_finite(x, 5));
    cr_expect(loss_scale_all_finite(x, 0));
    x[3] = INFINITY;
    cr_expect(!loss_scale_all_finite(x, 5));
    x[3] = -INFINITY;
    cr_expect(!loss_scale_all_finite(x, 5));
    x[3] = NAN;
    cr_expect(!loss_scale_all_finite(x, 5));
    cr_expect(loss_scale_all_finite(x, 3), "only the first n values count");
}

Test(loss_scale, resume_state_round_trip_and_validation) {
    LossScale ls, back;
    loss_scale_init(&ls, true);
    for (int i = 0; i < 2500; i++) loss_scale_update(&ls, i != 100);
    /* the resume state is the plain fields */
    memcpy(&back, &ls, sizeof ls);
    char err[256];
    cr_expect(loss_scale_validate(&back, err, sizeof err), "%s", err);
    bool a = loss_scale_update(&ls, true), b = loss_scale_update(&back, true);
    cr_expect_eq(a, b);
    cr_expect_eq(ls.scale, back.scale);
    cr_expect_eq(ls.growth_tracker, back.growth_tracker);

    struct {
        LossScale s;
        const char *needle;
    } bad[] = {
        {{true, 3.0f, 0, 0, 0}, "power of two"},
        {{true, 0.5f, 0, 0, 0}, "power of two"},
        {{true, INFINITY, 0, 0, 0}, "power of two"},
        {{true, NAN, 0, 0, 0}, "power of two"},
        {{false, 2.0f, 0, 0, 0}, "disabled"},
        {{true, 1024.0f, 2000, 0, 0}, "growth tracker"},
        {{true, 1024.0f, -1, 0, 0}, "growth tracker"},
        {{true, 1024.0f, 0, 3, 4}, "counters"},
        {{true, 1024.0f, 0, -1, 0}, "counters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_expect(!loss_scale_validate(&bad[i].s, err, sizeof err), "case %zu accepted", i);
        cr_expect(strstr(err, bad[i].needle), "case %zu: '%s' lacks '%s'", i, err, bad[i].needle);
    }
}

/* tests/test_report.c — the training report: progress bar text and its
 * drawing rules under a fake clock, results.csv bytes/atomicity/reader, the
 * SVG plot's structure, args.yaml through libyaml. Owns these tests only;
 * must not touch the trainer or shared fixtures. */
#define _XOPEN_SOURCE 700   /* nftw */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "../runtime/train/confusion.h"
#include "../runtime/train/metrics.h"
#include "../runtime/data/image_io.h"
#include "../runtime/train/report.h"
#include "../runtime/train/report_batches.h"

/* ---- helpers --------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static char *make_tmpdir(void) {
    char *d = strdup("/tmp/yolocc_report_XXXXXX");
    cr_assert(d && mkdtemp(d), "mkdtemp: %s", strerror(errno));
    return d;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    cr_assert(p);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf) buf = calloc(1, 1);
    else buf[len] = 0;
    return buf;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    cr_assert_eq(fclose(f), 0);
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* ---- progress bar ---------------------------------------------------------- */

#define HEADER_RAM "      Epoch        RAM   box_loss   cls_loss   dfl_loss  Instances       Size"

Test(report_progress, header_and_desc_columns) {
    char buf[256];
    report_progress_header(buf, sizeof buf, "RAM");
    cr_assert_str_eq(buf, HEADER_RAM);
    report_progress_header(buf, sizeof buf, "GPU_mem");
    cr_assert_str_eq(buf, "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size");
    double l[3] = {1.23456, 0.5, NAN};
    report_progress_desc(buf, sizeof buf, 0, 100, 2.6149, l, 42, 640);
    cr_assert_str_eq(buf, "      1/100      2.61G      1.235        0.5        nan         42        640");
    double big[3] = {12345.6, 1e-5, -0.0};
    report_progress_desc(buf, sizeof buf, 9, 10, 0, big, 123456, 1280);
    cr_assert_str_eq(buf, "      10/10         0G  1.235e+04      1e-05         -0  1.235e+05       1280");
}

Test(report_progress, interval_format) {
    char b[32];
    report_format_interval(0, b, sizeof b);
    cr_assert_str_eq(b, "00:00");
    report_format_interval(59.99, b, sizeof b);
    cr_assert_str_eq(b, "00:59");
    report_format_interval(600, b, sizeof b);
    cr_assert_str_eq(b, "10:00");
    report_format_interval(3599.9, b, sizeof b);
    cr_assert_str_eq(b, "59:59");
    report_format_interval(3723, b, sizeof b);
    cr_assert_str_eq(b, "1:02:03");
    report_format_interval(36000, b, sizeof b);
    cr_assert_str_eq(b, "10:00:00");
    report_format_interval(-5, b, sizeof b);
    cr_assert_str_eq(b, "00:00");
}

Test(report_progress, meter_format) {
    char b[512];
    /* the brief's example: 45 of 100 after 12.46 s */
    report_format_meter(b, sizeof b, 45, 100, 12.46);
    cr_assert_str_eq(b, " 45%|████▌     | 45/100 [00:12<00:15,  3.61it/s]");
    /* exactly 1 it/s stays it/s (tqdm switches only when s/it > 1) */
    report_format_meter(b, sizeof b, 7, 7, 7.0);
    cr_assert_str_eq(b, "100%|██████████| 7/7 [00:07<00:00,  1.00it/s]");
    /* slow: 10 s per batch */
    report_format_meter(b, sizeof b, 3, 10, 30.0);
    cr_assert_str_eq(b, " 30%|███       | 3/10 [00:30<01:10, 10.00s/it]");
    report_format_meter(b, sizeof b, 99, 100, 100.0);
    cr_assert_str_eq(b, " 99%|█████████▉| 99/100 [01:40<00:01,  1.01s/it]");
    /* hours in the remaining time */
    report_format_meter(b, sizeof b, 1, 1000, 10.0);
    cr_assert_str_eq(b, "  0%|          | 1/1000 [00:10<2:46:30, 10.00s/it]");
    /* fast */
    report_format_meter(b, sizeof b, 500, 1000, 0.5);
    cr_assert_str_eq(b, " 50%|█████     | 500/1000 [00:00<00:00, 1000.00it/s]");
    /* nothing done yet: no rate, no ETA */
    report_format_meter(b, sizeof b, 0, 7, 3.0);
    cr_assert_str_eq(b, "  0%|          | 0/7 [00:03<?, ?it/s]");
    /* eighth-block partial cells: 1/8 of a cell .. 7/8 */
    report_format_meter(b, sizeof b, 1, 80, 1.0);
    cr_assert(strncmp(b, "  1%|▏         |", strlen("  1%|▏         |")) == 0, "%s", b);
    report_format_meter(b, sizeof b, 7, 80, 1.0);
    cr_assert(strncmp(b, "  9%|▉         |", strlen("  9%|▉         |")) == 0, "%s", b);
}

/* A 3-epoch x 7-batch run, 1 s per batch, non-tty: one header and one line per epoch. */
Test(report_progress, non_tty_three_epochs) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    for (int e = 0; e < 3; e++) {
        double t0 = 100.0 * e;
        Progress p = progress_begin(f, false, "RAM", e, 3, 7, t0);
        for (int i = 1; i <= 7; i++) {
            double l[3] = {1.5 - 0.25 * e, 2.25, 0.987654};
            cr_assert(progress_update(&p, i, 0.5, l, 40 + i, 640, t0 + i));
        }
        cr_assert(progress_end(&p));
    }
    cr_assert_eq(fclose(f), 0);
    const char *want =
        "\n" HEADER_RAM "\n"
        "        1/3       0.5G        1.5       2.25     0.9877         47        640: 100%|██████████| 7/7 "
        "[00:07<00:00,  1.00it/s]\n"
        "\n" HEADER_RAM "\n"
        "        2/3       0.5G       1.25       2.25     0.9877         47        640: 100%|██████████| 7/7 "
        "[00:07<00:00,  1.00it/s]\n"
        "\n" HEADER_RAM "\n"
        "        3/3       0.5G          1       2.25     0.9877         47        640: 100%|██████████| 7/7 "
        "[00:07<00:00,  1.00it/s]\n";
    cr_assert_str_eq(text, want);
    free(text);
}

/* Long epochs in a log: a line every 30 s, then the final one. */
Test(report_progress, non_tty_heartbeat) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    Progress p = progress_begin(f, false, "GPU_mem", 4, 10, 100, 50.0);
    double l[3] = {1, 2, 3};
    for (int i = 1; i <= 100; i++) progress_update(&p, i, 1.25, l, 8, 320, 50.0 + i);
    progress_end(&p);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(count(text, "\n"), 2 + 4, "%s", text);
    cr_assert(strstr(text, " 30/100 [00:30<01:10,  1.00it/s]\n"), "%s", text);
    cr_assert(strstr(text, " 60/100 [01:00<00:40,  1.00it/s]\n"), "%s", text);
    cr_assert(strstr(text, " 90/100 [01:30<00:10,  1.00it/s]\n"), "%s", text);
    cr_assert(strstr(text, "       5/10      1.25G"), "%s", text);
    cr_assert(strstr(text, "100%|██████████| 100/100 [01:40<00:00,  1.00it/s]\n"), "%s", text);
    cr_assert_eq(count(text, "\r"), 0);
    free(text);
}

/* An epoch cut short (early stop, interrupt): progress_end shows where it stopped. */
Test(report_progress, non_tty_cut_short) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    Progress p = progress_begin(f, false, "RAM", 0, 1, 7, 0);
    double l[3] = {1, 2, 3};
    for (int i = 1; i <= 3; i++) progress_update(&p, i, 0, l, 1, 64, i * 2.0);
    progress_end(&p);
    progress_end(&p);
    cr_assert_eq(fclose(f), 0);
    cr_assert(strstr(text, ":  43%|████▎     | 3/7 [00:06<00:08,  2.00s/it]\n"), "%s", text);
    cr_assert_eq(count(text, "\n"), 3);
    free(text);
}

/* A terminal: in-place redraws, at most one per 0.1 s, the last always drawn. */
Test(report_progress, tty_redraw_and_throttle) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    Progress p = progress_begin(f, true, "GPU_mem", 0, 2, 7, 0);
    double l[3] = {1, 2, 3};
    /* batches every 1/16 s: drawn at 1, 3, 5 (>= 0.1 s apart) and 7 (last) */
    for (int i = 1; i <= 7; i++) progress_update(&p, i, 3, l, 5, 640, i / 16.0);
    progress_end(&p);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(count(text, "\r"), 4, "%s", text);
    cr_assert(strstr(text, "\r        1/2         3G          1          2          3          5        640:  14%|█▍"));
    cr_assert(!strstr(text, "| 2/7 ["));
    cr_assert(strstr(text, "| 3/7 ["));
    cr_assert(!strstr(text, "| 4/7 ["));
    cr_assert(strstr(text, "| 5/7 ["));
    cr_assert(!strstr(text, "| 6/7 ["));
    size_t n = strlen(text);
    const char *tail = "100%|██████████| 7/7 [00:00<00:00, 16.00it/s]\n";
    cr_assert(n > strlen(tail) && strcmp(text + n - strlen(tail), tail) == 0, "%s", text);
    cr_assert_eq(count(text, "\n"), 3);   /* blank line, header, end of the bar */
    free(text);
}

/* A shorter redraw is padded with spaces over the previous line's tail. */
Test(report_progress, tty_pads_shorter_line) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    Progress p = progress_begin(f, true, "RAM", 0, 1, 4, 0);
    double l[3] = {1, 1, 1};
    progress_update(&p, 1, 0, l, 1, 32, 0.01);   /* 100.00it/s */
    progress_update(&p, 2, 0, l, 1, 32, 2.0);    /* " 1.00it/s": one column shorter */
    cr_assert_eq(fflush(f), 0);
    cr_assert(strstr(text, "[00:00<00:00, 100.00it/s]\r"), "%s", text);
    size_t n = strlen(text);
    cr_assert(n >= 2 && strcmp(text + n - strlen("[00:02<00:02,  1.00it/s] "), "[00:02<00:02,  1.00it/s] ") == 0,
              "%s", text);
    progress_end(&p);
    cr_assert_eq(fclose(f), 0);
    free(text);
}

/* ---- results.csv ------------------------------------------------------------ */

#define CSV_HEADER                                                                                              \
    "epoch,time,train/box_loss,train/cls_loss,train/dfl_loss,metrics/precision(B),metrics/recall(B),"           \
    "metrics/mAP50(B),metrics/mAP50-95(B),val/box_loss,val/cls_loss,val/dfl_loss,lr/pg0,lr/pg1,lr/pg2\n"

static ResultsRow row_a(void) {
    ResultsRow r = {{1, 12.3456789, 1.23456789, 2.5, 0.000001234, 0.123456789, 1e-7, 0, 1234567.0, NAN, -0.5, 100,
                     0.0001, 0.00001, 0.0703}};
    return r;
}

static ResultsRow row_b(double epoch) {
    /* 0.123455 and 1.000005 are where rounding the exact binary value (as
     * Python's round does) differs from round(x * 1e5) / 1e5 */
    ResultsRow r = {{epoch, 20, 0.123455, 1.000005, 0.5, 0.25, 0.75, 0.5, 0.125, 1.5, 2.5, 3.5, 0.01, 0.02, 0.03}};
    return r;
}

Test(report_csv, header_and_rows_byte_exact) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    ResultsRow a = row_a(), b = row_b(2);
    cr_assert(results_csv_append(path, &a, err, sizeof err), "%s", err);
    char *text = slurp(path);
    cr_assert_str_eq(text, CSV_HEADER "1,12.3457,1.23457,2.5,0,0.123457,1e-07,0,1.23457e+06,nan,-0.5,100,0.0001,1e-05,"
                                      "0.0703\n");
    free(text);
    cr_assert(results_csv_append(path, &b, err, sizeof err), "%s", err);
    text = slurp(path);
    cr_assert_str_eq(text, CSV_HEADER "1,12.3457,1.23457,2.5,0,0.123457,1e-07,0,1.23457e+06,nan,-0.5,100,0.0001,1e-05,"
                                      "0.0703\n"
                                      "2,20,0.12345,1.00001,0.5,0.25,0.75,0.5,0.125,1.5,2.5,3.5,0.01,0.02,0.03\n");
    free(text);
    /* no temp file left behind */
    char *tmp = join(d, "results.csv.tmp");
    cr_assert_eq(access(tmp, F_OK), -1);
    free(tmp);
    rm_rf(d);
    free(path);
    free(d);
}

Test(report_csv, format_value_like_python) {
    char b[48];
    results_format_value(-NAN, b, sizeof b);
    cr_assert_str_eq(b, "nan");
    results_format_value(INFINITY, b, sizeof b);
    cr_assert_str_eq(b, "inf");
    results_format_value(-INFINITY, b, sizeof b);
    cr_assert_str_eq(b, "-inf");
    results_format_value(100000, b, sizeof b);
    cr_assert_str_eq(b, "100000");
    results_format_value(1000000, b, sizeof b);
    cr_assert_str_eq(b, "1e+06");
    results_format_value(0.00012345678, b, sizeof b);
    cr_assert_str_eq(b, "0.000123457");
}

Test(report_csv, rejects_bad_rows_and_epochs) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    ResultsRow a = row_a();
    a.v[RESULTS_EPOCH] = 0;
    cr_assert(!results_csv_append(path, &a, err, sizeof err));
    cr_assert(strstr(err, "epoch"), "%s", err);
    a.v[RESULTS_EPOCH] = 1.5;
    cr_assert(!results_csv_append(path, &a, err, sizeof err));
    cr_assert_eq(access(path, F_OK), -1);
    rm_rf(d);
    free(path);
    free(d);
}

/* A redone epoch replaces its row and drops the ones after it. */
Test(report_csv, redone_epoch_replaces) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    for (int e = 1; e <= 3; e++) {
        ResultsRow r = row_b(e);
        cr_assert(results_csv_append(path, &r, err, sizeof err), "%s", err);
    }
    ResultsRow r = row_b(2);
    r.v[RESULTS_TIME] = 99;
    cr_assert(results_csv_append(path, &r, err, sizeof err), "%s", err);
    ResultsTable t;
    cr_assert(results_csv_read(path, &t, err, sizeof err), "%s", err);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.rows[0].v[RESULTS_EPOCH], 1);
    cr_assert_eq(t.rows[0].v[RESULTS_TIME], 20);
    cr_assert_eq(t.rows[1].v[RESULTS_EPOCH], 2);
    cr_assert_eq(t.rows[1].v[RESULTS_TIME], 99);
    results_table_free(&t);
    rm_rf(d);
    free(path);
    free(d);
}

/* When the new file cannot be written, the old one stays byte for byte. The
 * temp name atomic_write uses is occupied by a directory, which stops even
 * root (permissions would not). */
Test(report_csv, failed_rewrite_keeps_old_file) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    ResultsRow a = row_a(), b = row_b(2);
    cr_assert(results_csv_append(path, &a, err, sizeof err), "%s", err);
    char *before = slurp(path);
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "results.csv.tmp.%ld", (long)getpid());
    char *blocker = join(d, tmpname);
    cr_assert_eq(mkdir(blocker, 0755), 0);
    err[0] = 0;
    cr_assert(!results_csv_append(path, &b, err, sizeof err));
    cr_assert(strstr(err, "cannot create"), "%s", err);
    char *after = slurp(path);
    cr_assert_str_eq(after, before);
    free(after);
    cr_assert_eq(rmdir(blocker), 0);
    /* a path whose parent is a file fails cleanly */
    char *bad = join(path, "results.csv");
    cr_assert(!results_csv_append(bad, &b, err, sizeof err));
    cr_assert(err[0]);
    after = slurp(path);
    cr_assert_str_eq(after, before);
    free(after);
    free(bad);
    free(before);
    free(blocker);
    rm_rf(d);
    free(path);
    free(d);
}

/* Appending to a file that is not a results.csv fails and leaves it alone. */
Test(report_csv, append_refuses_garbage) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    spit(path, "this is not,a results file\n");
    ResultsRow a = row_a();
    cr_assert(!results_csv_append(path, &a, err, sizeof err));
    cr_assert(strstr(err, ":1: header column 1"), "%s", err);
    char *text = slurp(path);
    cr_assert_str_eq(text, "this is not,a results file\n");
    free(text);
    rm_rf(d);
    free(path);
    free(d);
}

Test(report_csv, reader_round_trip) {
    char *d = make_tmpdir(), *path = join(d, "results.csv"), err[256] = "";
    ResultsRow a = row_a(), b = row_b(2);
    cr_assert(results_csv_append(path, &a, err, sizeof err), "%s", err);
    cr_assert(results_csv_append(path, &b, err, sizeof err), "%s", err);
    ResultsTable t;
    cr_assert(results_csv_read(path, &t, err, sizeof err), "%s", err);
    cr_assert_eq(t.n, 2);
    /* what was written, at 6 significant digits */
    const double want0[RESULTS_NCOLS] = {1,   12.3457, 1.23457, 2.5,    0,      0.123457, 1e-07, 0,
                                         1.23457e+06, NAN, -0.5, 100, 0.0001, 1e-05, 0.0703};
    for (int c = 0; c < RESULTS_NCOLS; c++) {
        if (isnan(want0[c])) cr_assert(isnan(t.rows[0].v[c]));
        else cr_assert_eq(t.rows[0].v[c], want0[c], "column %d: %.17g", c, t.rows[0].v[c]);
    }
    cr_assert_eq(t.rows[1].v[RESULTS_TRAIN_BOX], 0.12345);
    cr_assert_eq(t.rows[1].v[RESULTS_TRAIN_CLS], 1.00001);
    cr_assert_eq(t.rows[1].v[RESULTS_LR_PG2], 0.03);
    results_table_free(&t);
    /* rewriting what was read gives the same bytes */
    char *first = slurp(path);
    cr_assert(results_csv_append(path, &b, err, sizeof err), "%s", err);
    char *second = slurp(path);
    cr_assert_str_eq(first, second);
    free(first);
    free(second);
    rm_rf(d);
    free(path);
    free(d);
}

static void expect_parse_error(const char *text, const char *where, const char *what) {
    ResultsTable t = {0};
    char err[256] = "";
    bool ok = results_csv_parse(text, strlen(text), "r.csv", &t, err, sizeof err);
    cr_assert(!ok, "accepted: %s", text);
    cr_assert_eq(t.n, 0);
    cr_assert_null(t.rows);
    cr_assert(strstr(err, where), "want '%s' in: %s", where, err);
    cr_assert(strstr(err, what), "want '%s' in: %s", what, err);
}

#define ROW1 "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n"
#define ROW2 "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2\n"

Test(report_csv, reader_rejects_garbage_with_line_numbers) {
    expect_parse_error("", "r.csv:1:", "empty file");
    expect_parse_error("\n" CSV_HEADER, "r.csv:1:", "header");
    expect_parse_error("epoch,time,train/box,x\n", "r.csv:1:", "header column 3 is 'train/box'");
    expect_parse_error("epoch,time\n", "r.csv:1:", "2 columns");
    expect_parse_error(CSV_HEADER ROW1 "2,2,2\n", "r.csv:3:", "3 values");
    expect_parse_error(CSV_HEADER ROW1 "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2\n", "r.csv:3:", "more than 15");
    expect_parse_error(CSV_HEADER "1,abc,1,1,1,1,1,1,1,1,1,1,1,1,1\n", "r.csv:2:", "time: 'abc' is not a number");
    expect_parse_error(CSV_HEADER "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1x\n", "r.csv:2:", "lr/pg2: '1x'");
    expect_parse_error(CSV_HEADER "1,1,,1,1,1,1,1,1,1,1,1,1,1,1\n", "r.csv:2:", "train/box_loss is empty");
    expect_parse_error(CSV_HEADER ROW2 ROW1, "r.csv:3:", "epochs must increase");
    expect_parse_error(CSV_HEADER "0.5,1,1,1,1,1,1,1,1,1,1,1,1,1,1\n", "r.csv:2:", "not an integer");
    expect_parse_error(CSV_HEADER ROW1 "2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,", "r.csv:3:", "");
    char bin[sizeof CSV_HEADER ROW1 ROW2];
    memcpy(bin, CSV_HEADER ROW1 ROW2, sizeof bin);
    bin[strlen(CSV_HEADER ROW1) + 3] = 0;
    ResultsTable t;
    char err[256];
    cr_assert(!results_csv_parse(bin, sizeof bin - 1, "r.csv", &t, err, sizeof err));
    cr_assert(strstr(err, "r.csv:3: NUL byte"), "%s", err);
}

Test(report_csv, reader_accepts_crlf_padding_blank_lines) {
    const char *text = "  epoch, time, train/box_loss, train/cls_loss, train/dfl_loss, metrics/precision(B), "
                       "metrics/recall(B), metrics/mAP50(B), metrics/mAP50-95(B), val/box_loss, val/cls_loss, "
                       "val/dfl_loss, lr/pg0, lr/pg1, lr/pg2\r\n"
                       "    1, 2.5, 1,1,1,1,1,1,1,1,1,1,1,1, nan\r\n"
                       "\r\n"
                       "2,2,2,2,2,2,2,2,2,2,2,2,2,2,inf";
    ResultsTable t;
    char err[256] = "";
    cr_assert(results_csv_parse(text, strlen(text), "r.csv", &t, err, sizeof err), "%s", err);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.rows[0].v[RESULTS_TIME], 2.5);
    cr_assert(isnan(t.rows[0].v[RESULTS_LR_PG2]));
    cr_assert(isinf(t.rows[1].v[RESULTS_LR_PG2]));
    results_table_free(&t);
    cr_assert(results_csv_parse(CSV_HEADER, strlen(CSV_HEADER), "r.csv", &t, err, sizeof err), "%s", err);
    cr_assert_eq(t.n, 0);
    results_table_free(&t);
}

Test(report_csv, read_missing_file) {
    ResultsTable t;
    char err[256] = "";
    cr_assert(!results_csv_read("/nonexistent/yolocc/results.csv", &t, err, sizeof err));
    cr_assert(strstr(err, "/nonexistent/yolocc/results.csv"), "%s", err);
}

/* ---- SVG plot ---------------------------------------------------------------- */

/* xmllint, where installed, must accept the file; the suite does not depend on it. */
static void xmllint_if_present(const char *svg) {
    if (access("/usr/bin/xmllint", X_OK) != 0) return;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/xmllint --noout '%s' 2>&1", svg);
    cr_assert_eq(system(cmd), 0, "xmllint rejected %s", svg);
}

static char *plot_rows(const char *d, int n, bool with_nan) {
    char *csv = join(d, "results.csv"), *svg = join(d, "results.svg"), err[256] = "";
    for (int e = 1; e <= n; e++) {
        ResultsRow r = row_b(e);
        r.v[RESULTS_TRAIN_BOX] = 2.0 / e;                       /* falling */
        r.v[RESULTS_MAP50_95] = 0.1 * e;                        /* rising */
        r.v[RESULTS_PRECISION] = 0.5;                           /* constant */
        r.v[RESULTS_VAL_BOX] = with_nan && e == 3 ? NAN : 1.0 + e;
        r.v[RESULTS_VAL_CLS] = with_nan ? NAN : 0;              /* all missing */
        cr_assert(results_csv_append(csv, &r, err, sizeof err), "%s", err);
    }
    cr_assert(report_plot_svg(csv, svg, err, sizeof err), "%s", err);
    xmllint_if_present(svg);
    char *text = slurp(svg);
    cr_assert(text);
    free(csv);
    free(svg);
    return text;
}

static void check_svg_frame(const char *s) {
    const char *head = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"";
    cr_assert(strncmp(s, head, strlen(head)) == 0);
    size_t n = strlen(s);
    cr_assert(n > 7 && strcmp(s + n - 7, "</svg>\n") == 0);
    cr_assert_eq(count(s, "<g id=\"panel"), 10);
    cr_assert_eq(count(s, "<g "), count(s, "</g>"));
    cr_assert_eq(count(s, "<text"), count(s, "</text>"));
    const char *titles[] = {"train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision(B)",
                            "metrics/recall(B)", "val/box_loss", "val/cls_loss", "val/dfl_loss",
                            "metrics/mAP50(B)", "metrics/mAP50-95(B)"};
    const char *prev = s;
    for (int i = 0; i < 10; i++) {
        char want[64];
        snprintf(want, sizeof want, ">%s</text>", titles[i]);
        const char *at = strstr(s, want);
        cr_assert(at, "no title %s", titles[i]);
        cr_assert(at > prev, "%s out of order", titles[i]);
        prev = at;
    }
    /* no coordinate came from a NaN or an infinity */
    cr_assert(!strstr(s, "nan") && !strstr(s, "inf"), "%s", s);
}

Test(report_plot, five_epochs) {
    char *d = make_tmpdir();
    char *s = plot_rows(d, 5, true);
    check_svg_frame(s);
    /* markers: 10 panels x 5 points, minus val/box_loss' NaN and val/cls_loss'
     * five, plus one in the legend */
    cr_assert_eq(count(s, "<circle"), 50 - 1 - 5 + 1);
    /* a solid and a dotted line in each panel that has 2+ points */
    cr_assert_eq(count(s, "<polyline"), 2 * 9);
    cr_assert_eq(count(s, "stroke-dasharray=\"2,3\" points="), 9);
    cr_assert_eq(count(s, ">no data</text>"), 1);
    cr_assert(strstr(s, ">results</text>") && strstr(s, ">smooth</text>"));
    /* epoch ticks are integers */
    cr_assert(strstr(s, ">1</text>") && strstr(s, ">5</text>"));
    free(s);
    rm_rf(d);
    free(d);
}

/* A constant series: the smoothed line lies on the data (gaussian weights sum to 1). */
Test(report_plot, constant_series_smooth_equals_data) {
    char *d = make_tmpdir();
    char *s = plot_rows(d, 5, false);
    check_svg_frame(s);
    const char *g = strstr(s, "<g id=\"panel3\">");
    cr_assert(g);
    const char *solid = strstr(g, "<polyline"), *dotted = strstr(solid + 1, "<polyline");
    cr_assert(solid && dotted);
    const char *p1 = strstr(solid, "points=\""), *p2 = strstr(dotted, "points=\"");
    size_t n1 = strcspn(p1 + 8, "\""), n2 = strcspn(p2 + 8, "\"");
    cr_assert_eq(n1, n2);
    cr_assert(strncmp(p1 + 8, p2 + 8, n1) == 0);
    free(s);
    rm_rf(d);
    free(d);
}

Test(report_plot, one_epoch_and_empty) {
    char *d = make_tmpdir();
    char *s = plot_rows(d, 1, false);
    check_svg_frame(s);
    cr_assert_eq(count(s, "<polyline"), 0);
    cr_assert_eq(count(s, "<circle"), 10 + 1);
    free(s);
    char *csv = join(d, "empty.csv"), *svg = join(d, "empty.svg"), err[256] = "";
    spit(csv, CSV_HEADER);
    cr_assert(report_plot_svg(csv, svg, err, sizeof err), "%s", err);
    xmllint_if_present(svg);
    s = slurp(svg);
    check_svg_frame(s);
    cr_assert_eq(count(s, ">no data</text>"), 10);
    free(s);
    /* a broken csv is reported, no svg written */
    char *svg2 = join(d, "bad.svg");
    spit(csv, CSV_HEADER "1,2\n");
    cr_assert(!report_plot_svg(csv, svg2, err, sizeof err));
    cr_assert(strstr(err, "empty.csv:2:"), "%s", err);
    cr_assert_eq(access(svg2, F_OK), -1);
    free(svg2);
    free(csv);
    free(svg);
    rm_rf(d);
    free(d);
}

/* ---- args.yaml ---------------------------------------------------------------- */

typedef struct Pair {
    char key[64], value[128];
    yaml_scalar_style_t style;
} Pair;

/* Parses a one-level block mapping of scalars with libyaml. */
static int parse_pairs(const char *path, Pair *pairs, int cap) {
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    yaml_parser_t parser;
    cr_assert(yaml_parser_initialize(&parser));
    yaml_parser_set_input_file(&parser, f);
    int n = 0, depth = 0;
    bool want_key = true, done = false;
    while (!done) {
        yaml_event_t ev;
        cr_assert(yaml_parser_parse(&parser, &ev), "parse error: %s line %zu", parser.problem,
                  parser.problem_mark.line + 1);
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT: depth++; break;
        case YAML_MAPPING_END_EVENT: depth--; break;
        case YAML_SEQUENCE_START_EVENT: cr_assert_fail("unexpected sequence"); break;
        case YAML_SCALAR_EVENT:
            cr_assert_eq(depth, 1);
            cr_assert_lt(n, cap);
            if (want_key) {
                snprintf(pairs[n].key, sizeof pairs[n].key, "%s", (const char *)ev.data.scalar.value);
            } else {
                snprintf(pairs[n].value, sizeof pairs[n].value, "%s", (const char *)ev.data.scalar.value);
                pairs[n].style = ev.data.scalar.style;
                n++;
            }
            want_key = !want_key;
            break;
        case YAML_STREAM_END_EVENT: done = true; break;
        default: break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    fclose(f);
    return n;
}

Test(report_args, round_trip_tricky_values) {
    char *d = make_tmpdir(), *path = join(d, "args.yaml"), err[256] = "";
    /* key, value given, value read back, must it be quoted (a string YAML would misread)? */
    static const struct {
        const char *key, *in, *out;
        int quoted;   /* 1: quoted, 0: plain, -1: plain or quoted, libyaml's choice */
    } cases[] = {
        {"task", "detect", "detect", 0},
        {"epochs", "100", "100", 0},
        {"lr0", "0.01", "0.01", 0},
        {"lrf", "1e-05", "1.0e-05", 0},
        {"big", "1e+20", "1.0e+20", 0},
        {"warmup", "3.0", "3.0", 0},
        {"limit", "inf", ".inf", 0},
        {"neg", "-inf", "-.inf", 0},
        {"resume", "false", "false", 0},
        {"amp", "true", "true", 0},
        {"project", NULL, "null", 0},
        {"name", "", "", 1},
        {"s_null", "null", "null", 1},
        {"s_tilde", "~", "~", 1},
        {"s_yes", "yes", "yes", 1},
        {"s_on", "On", "On", 1},
        {"s_True", "True", "True", 1},
        {"s_octal", "007", "007", 1},
        {"s_ver", "1.5x", "1.5x", 1},
        {"s_date", "2024-01-02", "2024-01-02", 1},
        {"half", ".5", ".5", 0},
        {"s_colon", "a: b", "a: b", 1},
        {"s_dash", "- x", "- x", 1},
        {"s_hash", "#c", "#c", 1},
        {"s_comment", "a #c", "a #c", 1},
        {"s_star", "*x", "*x", 1},
        {"s_amp", "&x", "&x", 1},
        {"s_bang", "!x", "!x", 1},
        {"s_bracket", "[1, 2]", "[1, 2]", 1},
        {"s_brace", "{a: 1}", "{a: 1}", 1},
        {"s_pipe", "|x", "|x", 1},
        {"s_quote", "it's", "it's", 0},
        {"s_dq", "\"x\"", "\"x\"", 1},
        {"s_lead", " lead", " lead", 1},
        {"s_trail", "trail ", "trail ", 1},
        {"s_newline", "a\nb", "a\nb", 1},
        {"s_tab", "a\tb", "a\tb", -1},
        {"s_unicode", "h\xc3\xa9llo \xe2\x9c\x93", "h\xc3\xa9llo \xe2\x9c\x93", 0},
        {"s_path", "runs/detect/train3", "runs/detect/train3", 0},
        {"null", "key named null", "key named null", 0},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    const char *kv[2 * N + 1];
    for (int i = 0; i < N; i++) {
        kv[2 * i] = cases[i].key;
        kv[2 * i + 1] = cases[i].in;
    }
    kv[2 * N] = NULL;
    cr_assert(report_write_args_yaml(path, kv, err, sizeof err), "%s", err);
    Pair pairs[N];
    cr_assert_eq(parse_pairs(path, pairs, N), N);
    for (int i = 0; i < N; i++) {
        cr_assert_str_eq(pairs[i].key, cases[i].key);
        cr_assert_str_eq(pairs[i].value, cases[i].out, "%s: got '%s'", cases[i].key, pairs[i].value);
        bool plain = pairs[i].style == YAML_PLAIN_SCALAR_STYLE;
        if (cases[i].quoted == 1) cr_assert(!plain, "%s should be quoted", cases[i].key);
        if (cases[i].quoted == 0) cr_assert(plain, "%s should be plain", cases[i].key);
    }
    char *text = slurp(path);
    cr_assert(strncmp(text, "task: detect\nepochs: 100\nlr0: 0.01\nlrf: 1.0e-05\n", 47) == 0, "%s", text);
    cr_assert(strstr(text, "\nproject: null\nname: ''\ns_null: 'null'\n"), "%s", text);
    cr_assert(strstr(text, "\n'null': key named null\n"), "%s", text);
    cr_assert(!strstr(text, "---") && !strstr(text, "..."), "%s", text);
    free(text);
    rm_rf(d);
    free(path);
    free(d);
}

Test(report_args, errors) {
    char *d = make_tmpdir(), *path = join(d, "args.yaml"), err[256] = "";
    const char *empty_key[] = {"a", "1", "", "2", NULL};
    cr_assert(!report_write_args_yaml(path, empty_key, err, sizeof err));
    cr_assert(strstr(err, "empty key"), "%s", err);
    const char *bad_utf8[] = {"a", "\xff\xfe", NULL};
    cr_assert(!report_write_args_yaml(path, bad_utf8, err, sizeof err));
    cr_assert(strstr(err, "UTF-8"), "%s", err);
    cr_assert_eq(access(path, F_OK), -1);
    const char *ok[] = {"a", "1", NULL};
    char *under_file = join(path, "x.yaml");
    cr_assert(report_write_args_yaml(path, ok, err, sizeof err), "%s", err);
    cr_assert(!report_write_args_yaml(under_file, ok, err, sizeof err));
    cr_assert(err[0]);
    const char *none[] = {NULL};
    cr_assert(report_write_args_yaml(path, none, err, sizeof err), "%s", err);
    char *text = slurp(path);
    cr_assert_str_eq(text, "{}\n");
    free(text);
    free(under_file);
    rm_rf(d);
    free(path);
    free(d);
}

/* A stream that cannot be written (closed pipe, full disk) is reported, not fatal. */
Test(report_progress, write_errors_reported) {
    FILE *f = fopen("/dev/null", "r");
    cr_assert(f);
    Progress p = progress_begin(f, false, "RAM", 0, 1, 2, 0);
    double l[3] = {1, 2, 3};
    cr_assert(progress_update(&p, 1, 0, l, 1, 64, 1));   /* nothing drawn yet */
    cr_assert(!progress_update(&p, 2, 0, l, 1, 64, 2));
    cr_assert(!progress_end(&p));
    fclose(f);
}

/* ---- validation plots ------------------------------------------------------ */

static Detection vdet(float x1, float y1, float x2, float y2, float score, int cls) {
    return (Detection){x1, y1, x2, y2, score, cls};
}

/* Two images by hand (nc 2): a label found (class 0 as 0), a label of class
 * 1 found as class 0, a detection on nothing (1 as background), one under
 * the 0.25 threshold, and a label with no detection at all. */
static void val_case(MetricsAccumulator *acc, ConfusionMatrix *cm, bool with_tp) {
    const float gt1[] = {0, 0, 10, 10, 20, 20, 30, 30}, gt2[] = {0, 0, 10, 10};
    const int c1[] = {0, 1}, c2[] = {1};
    Detection d1[] = {vdet(0, 0, 10, 10, 0.9f, 0), vdet(20, 20, 30, 30, 0.8f, 0), vdet(50, 50, 60, 60, 0.7f, 1),
                      vdet(0, 0, 10, 10, 0.2f, 1)};
    if (!with_tp) d1[0].x1 = d1[0].y1 = 40, d1[0].x2 = d1[0].y2 = 45;
    cr_assert_eq(metrics_add_image(acc, d1, 4, gt1, c1, 2), 0);
    cr_assert(confusion_add_image(cm, d1, 4, gt1, c1, 2));
    cr_assert_eq(metrics_add_image(acc, NULL, 0, gt2, c2, 1), 0);
    cr_assert(confusion_add_image(cm, NULL, 0, gt2, c2, 1));
}

/* cells annotated with value v, in either text colour */
static int annotations(const char *svg, const char *v) {
    char dark[64], light[64];
    snprintf(dark, sizeof dark, "fill=\"#262626\">%s</text>", v);
    snprintf(light, sizeof light, "fill=\"white\">%s</text>", v);
    return count(svg, dark) + count(svg, light);
}

/* The hand-made case counted and its metrics computed. */
typedef struct ValCase {
    MetricsAccumulator *acc;
    ConfusionMatrix cm;
    Metrics m;
} ValCase;

static void val_case_open(ValCase *c, bool with_tp) {
    c->acc = metrics_init(2);
    cr_assert(c->acc && confusion_init(&c->cm, 2, 0.001));
    val_case(c->acc, &c->cm, with_tp);
    cr_assert_eq(metrics_compute(c->acc, &c->m), 0);
}

static void val_case_close(ValCase *c) {
    metrics_result_free(&c->m);
    metrics_free(c->acc);
    confusion_free(&c->cm);
}

Test(report_val_plots, files_matrix_and_legends) {
    char *d = make_tmpdir(), err[512] = "";
    ValCase c;
    val_case_open(&c, true);
    const Metrics m = c.m;
    cr_assert_eq(m.n_classes, 2);
    /* names that need escaping in SVG and that clash once made identifiers */
    const char *names[] = {"car <1>", "Car__1_"};
    cr_assert(report_val_plots(d, &m, &c.cm, names, err, sizeof err), "%s", err);
    char *csv_path = join(d, "confusion_matrix.csv"), *csv = slurp(csv_path);
    cr_assert(csv);
    cr_expect_str_eq(csv, "Predicted,car__1_,Car__1__1,background\n"
                          "car__1_,1,1,0\n"
                          "Car__1__1,0,0,1\n"
                          "background,0,1,0\n");
    const char *svgs[] = {"confusion_matrix.svg", "confusion_matrix_normalized.svg", "BoxPR_curve.svg", "BoxF1_curve.svg",
                          "BoxP_curve.svg", "BoxR_curve.svg"};
    char *text[6];
    for (int i = 0; i < 6; i++) {
        char *p = join(d, svgs[i]);
        xmllint_if_present(p);
        text[i] = slurp(p);
        cr_assert(text[i], "no %s", svgs[i]);
        cr_expect(strstr(text[i], "car &lt;1&gt;") && !strstr(text[i], "car <1>"), "%s: class name not escaped", svgs[i]);
        cr_assert(!strstr(text[i], "nan") && !strstr(text[i], "inf"), "%s", svgs[i]);
        free(p);
    }
    /* four non-zero cells, each annotated; the normalised ones by column (1, 0.5 + 0.5, 1) */
    cr_expect_eq(count(text[0], "<rect x=") - 3, 4, "%s", text[0]); /* minus page, frame and colour bar */
    cr_expect_eq(annotations(text[0], "1"), 4);
    cr_expect_eq(annotations(text[1], "1.00"), 2);
    cr_expect_eq(annotations(text[1], "0.50"), 2);
    cr_expect(strstr(text[1], ">Confusion Matrix Normalized</text>") && strstr(text[0], ">Confusion Matrix</text>"));
    /* legends: the PR curve names each class with its AP50, the mean with mAP50 */
    char want[160];
    snprintf(want, sizeof want, ">car &lt;1&gt; %.3f</text>", m.classes[0].ap50);
    cr_expect(strstr(text[2], want), "no '%s'", want);
    snprintf(want, sizeof want, ">all classes %.3f mAP@0.5</text>", m.map50);
    cr_expect(strstr(text[2], want), "no '%s'", want);
    /* one line per class plus the mean in every curve */
    for (int i = 2; i < 6; i++) cr_expect_eq(count(text[i], "<polyline"), 3, "%s", svgs[i]);
    cr_expect(strstr(text[3], ">all classes ") && strstr(text[3], " at "), "F1 legend");
    for (int i = 0; i < 6; i++) free(text[i]);
    free(csv);
    free(csv_path);
    val_case_close(&c);
    rm_rf(d);
    free(d);
}

/* No true positive: Ultralytics skips ap_per_class, so only the matrices. */
Test(report_val_plots, no_true_positive_no_curves) {
    char *d = make_tmpdir(), err[512] = "";
    ValCase c;
    val_case_open(&c, false);
    cr_assert_eq(c.m.n_classes, 0);
    cr_assert(report_val_plots(d, &c.m, &c.cm, NULL, err, sizeof err), "%s", err);
    const char *present[] = {"confusion_matrix.svg", "confusion_matrix_normalized.svg", "confusion_matrix.csv"};
    const char *absent[] = {"BoxPR_curve.svg", "BoxF1_curve.svg", "BoxP_curve.svg", "BoxR_curve.svg"};
    for (int i = 0; i < 3; i++) {
        char *p = join(d, present[i]);
        cr_expect_eq(access(p, F_OK), 0, "no %s", present[i]);
        free(p);
    }
    for (int i = 0; i < 4; i++) {
        char *p = join(d, absent[i]);
        cr_expect_eq(access(p, F_OK), -1, "%s written", absent[i]);
        free(p);
    }
    char *p = join(d, "confusion_matrix.csv"), *csv = slurp(p);
    /* the moved detection matched nothing: label 0 missed, detection 0 on background */
    cr_expect_str_eq(csv, "Predicted,class0,class1,background\n"
                          "class0,0,1,1\n"
                          "class1,0,0,1\n"
                          "background,1,1,0\n");
    free(csv);
    free(p);
    val_case_close(&c);
    rm_rf(d);
    free(d);
}

/* A directory that cannot take the files is one error naming the file. */
Test(report_val_plots, unwritable_directory_is_an_error) {
    char err[512] = "";
    ValCase c;
    val_case_open(&c, true);
    cr_assert(!report_val_plots("/nonexistent/yolocc-val", &c.m, &c.cm, NULL, err, sizeof err));
    cr_expect(strstr(err, "/nonexistent/yolocc-val/confusion_matrix"), "%s", err);
    val_case_close(&c);
}

/* ---- batch mosaics ---------------------------------------------------------- */

enum { MOSAIC_S = 64, MOSAIC_MB = 4 };

/* n images of a uniform grey each (value 40 + 10 i), one label each: a box of
 * class i % 3 centred in the tile, half its side */
static Batch mosaic_batch(int n, DataSplit *split) {
    Batch b = {0};
    const size_t plane = (size_t)MOSAIC_S * MOSAIC_S;
    b.bytes = malloc((size_t)n * 3 * plane);
    b.boxes = calloc((size_t)n * MOSAIC_MB * 5, sizeof *b.boxes);
    b.counts = calloc((size_t)n, sizeof *b.counts);
    b.info = calloc((size_t)n, sizeof *b.info);
    split->n = n;
    split->samples = calloc((size_t)n, sizeof *split->samples);
    cr_assert(b.bytes && b.boxes && b.counts && b.info && split->samples);
    for (int i = 0; i < n; i++) {
        memset(b.bytes + (size_t)i * 3 * plane, 40 + 10 * i, 3 * plane);
        float *l = b.boxes + (size_t)i * MOSAIC_MB * 5;
        l[0] = (float)(i % 3), l[1] = 0.5f, l[2] = 0.5f, l[3] = 0.5f, l[4] = 0.5f;
        b.counts[i] = 1;
        b.info[i].index = i;
        char name[64];
        snprintf(name, sizeof name, "/data/images/img%02d.jpg", i);
        split->samples[i].image = strdup(name);
    }
    b.n_valid = n;
    return b;
}

static void mosaic_free(Batch *b, DataSplit *split) {
    for (int i = 0; i < split->n; i++) free(split->samples[i].image);
    free(split->samples);
    free(b->bytes), free(b->boxes), free(b->counts), free(b->info);
}

static const uint8_t *at(const Image *im, int x, int y) { return im->px + ((size_t)y * (size_t)im->w + (size_t)x) * 3; }

static int diff3(const uint8_t *p, int r, int g, int b) { return abs(p[0] - r) + abs(p[1] - g) + abs(p[2] - b); }

/* Tiles column by column on white, borders white, each image's own grey
 * inside, the label's box in the class colour of `yolort predict`'s palette
 * (class 0 0x042AFF, 1 0x0BDBEB): checked on the decoded JPEG with a margin
 * for its loss. */
Test(report_batches, labels_mosaic_layout) {
    char *d = make_tmpdir(), err[512] = "";
    DataSplit split = {0};
    Batch b = mosaic_batch(3, &split);
    char *path = join(d, "train_batch0.jpg");
    const BatchPlot p = {.b = &b, .n = 3, .imgsz = MOSAIC_S, .max_boxes = MOSAIC_MB, .split = &split};
    cr_assert(report_batch_jpeg(path, &p, err, sizeof err), "%s", err);
    Image im;
    cr_assert(image_load(path, &im, err, sizeof err), "%s", err);
    /* 3 images: a 2 x 2 grid at full size (1920 / 2 / 64 > 1) */
    cr_assert(im.w == 2 * MOSAIC_S && im.h == 2 * MOSAIC_S, "%dx%d", im.w, im.h);
    /* image 0 top left, 1 below it, 2 top right; the fourth cell stays white */
    const int org[3][2] = {{0, 0}, {0, MOSAIC_S}, {MOSAIC_S, 0}};
    for (int i = 0; i < 3; i++) {
        const int g = 40 + 10 * i, x0 = org[i][0], y0 = org[i][1];
        cr_expect_leq(diff3(at(&im, x0 + 10, y0 + 40), g, g, g), 12, "image %d not in its tile", i);
        cr_expect_leq(diff3(at(&im, x0 + 1, y0 + 40), 255, 255, 255), 30, "image %d: no white border", i);
    }
    cr_expect_leq(diff3(at(&im, MOSAIC_S + 40, MOSAIC_S + 40), 255, 255, 255), 12, "the empty cell is not white");
    /* the label box: left edge at x0 + 16 (0.25 of the tile), mid-height */
    cr_expect_leq(diff3(at(&im, 16, 32), 0x04, 0x2A, 0xFF), 90, "class 0's box missing");
    cr_expect_leq(diff3(at(&im, 16, MOSAIC_S + 32), 0x0B, 0xDB, 0xEB), 90, "class 1's box missing");
    image_free(&im);
    free(path);
    mosaic_free(&b, &split);
    rm_rf(d);
    free(d);
}

/* 17 images of 640: 16 shown, 4 x 4 tiles scaled to 480 (1920 / 4 / 640);
 * predictions at or under 0.25 are not drawn. */
Test(report_batches, predictions_scaled_and_thresholded) {
    char *d = make_tmpdir(), err[512] = "";
    enum { S = 640, N = 17 };
    Batch b = {0};
    DataSplit split = {0};
    b.bytes = malloc((size_t)N * 3 * S * S);
    cr_assert(b.bytes);
    memset(b.bytes, 128, (size_t)N * 3 * S * S);
    b.info = calloc(N, sizeof *b.info);
    b.counts = calloc(N, sizeof *b.counts);
    for (int i = 0; i < N; i++) b.info[i].index = -1;
    Detection kept[1] = {{100, 100, 300, 300, 0.9f, 0}}, dropped[1] = {{100, 100, 300, 300, 0.25f, 0}};
    const Detection *dets[N] = {0};
    int n_dets[N] = {0};
    dets[0] = kept, n_dets[0] = 1;
    dets[1] = dropped, n_dets[1] = 1;
    char *path = join(d, "val_batch0_pred.jpg");
    const char *names[] = {"thing"};
    const BatchPlot p = {.b = &b, .n = N, .imgsz = S, .max_boxes = 1, .split = &split, .dets = dets, .n_dets = n_dets, .names = names};
    cr_assert(report_batch_jpeg(path, &p, err, sizeof err), "%s", err);
    Image im;
    cr_assert(image_load(path, &im, err, sizeof err), "%s", err);
    cr_assert(im.w == 1920 && im.h == 1920, "%dx%d", im.w, im.h);
    /* image 0's box: x1 = 100 * 0.75 = 75 in tile (0, 0); image 1's (tile at y 480) absent */
    cr_expect_leq(diff3(at(&im, 75, 150), 0x04, 0x2A, 0xFF), 90, "the 0.9 box is missing");
    cr_expect_leq(diff3(at(&im, 75, 480 + 150), 128, 128, 128), 12, "the 0.25 box was drawn");
    image_free(&im);
    /* nothing to show, nothing written */
    char *none = join(d, "none.jpg");
    const BatchPlot empty = {.b = &b, .n = 0, .imgsz = S};
    cr_assert(report_batch_jpeg(none, &empty, err, sizeof err));
    cr_expect_eq(access(none, F_OK), -1);
    free(none);
    free(path);
    free(b.bytes), free(b.info), free(b.counts);
    rm_rf(d);
    free(d);
}

/* ---- labels.svg ------------------------------------------------------------- */

/* 600 labels over 3 classes (300, 200, 100): the bars carry the counts, the
 * box panel stops at 500 outlines, names are escaped. */
Test(report_labels, counts_boxes_and_names) {
    char *d = make_tmpdir(), err[512] = "";
    DataSplit split = {0};
    split.n = 60;
    split.samples = calloc(60, sizeof *split.samples);
    cr_assert(split.samples);
    for (int i = 0; i < 60; i++) {
        split.samples[i].n_labels = 10;
        split.samples[i].labels = calloc(10, sizeof(Label));
        for (int j = 0; j < 10; j++) {
            const int k = i * 10 + j;
            split.samples[i].labels[j] = (Label){k < 300 ? 0 : k < 500 ? 1 : 2, 0.1f + 0.0013f * (float)(k % 600), 0.5f, 0.2f, 0.1f};
        }
    }
    const char *names[] = {"a<b", "c", "d"};
    char *path = join(d, "labels.svg");
    cr_assert(report_labels_svg(path, &split, 3, names, err, sizeof err), "%s", err);
    xmllint_if_present(path);
    char *s = slurp(path);
    cr_assert(s);
    cr_expect(strstr(s, "<title>300</title>") && strstr(s, "<title>200</title>") && strstr(s, "<title>100</title>"), "bar counts");
    cr_expect(strstr(s, ">a&lt;b</text>") && !strstr(s, "a<b"), "class name not escaped");
    cr_expect_eq(count(s, "fill=\"none\" stroke=\"#"), 500, "box outlines");
    cr_expect(strstr(s, ">600 training labels of 3 classes</title>"), "title");
    cr_assert(!strstr(s, "nan") && !strstr(s, "inf"));
    free(s);
    free(path);
    for (int i = 0; i < 60; i++) free(split.samples[i].labels);
    free(split.samples);
    rm_rf(d);
    free(d);
}

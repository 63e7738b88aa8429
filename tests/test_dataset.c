/* tests/test_dataset.c — suite `dataset`: the data YAML and label rules of
 * training-semantics §2.1-2.2, one test per class of bad input, each on a
 * fixture built in a fresh temp dir (tiny PNGs via image_write_png),
 * asserting the warning text, the counts and the samples. Owns these tests
 * only. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/data/dataset.h"
#include "../runtime/data/image_io.h"

/* ------------------------------------------------------------ helpers */

static char dir[64];

static void setup(void) {
    strcpy(dir, "/tmp/yolocc-ds-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert(system(cmd) == 0);
}

static const char *at(const char *rel) {
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

/* mkdir -p of rel's parent folders. */
static void parents(const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = 0;
        cr_assert(mkdir(p, 0777) == 0 || errno == EEXIST, "mkdir %s: %s", p, strerror(errno));
        *s = '/';
    }
}

static void text(const char *rel, const char *content) {
    parents(rel);
    FILE *f = fopen(at(rel), "wb");
    cr_assert(f && fputs(content, f) >= 0 && fclose(f) == 0, "cannot write %s", rel);
}

static void png(const char *rel, int w, int h) {
    parents(rel);
    Image im = {w, h, calloc((size_t)w * (size_t)h * 3, 1)};
    cr_assert(im.px);
    char err[512];
    cr_assert(image_write_png(at(rel), &im, err, sizeof err), "%s", err);
    image_free(&im);
}

/* One training image a.png with label text (NULL: no label file) and one
 * valid val image, under the standard data.yaml for 3 classes. */
static void one_image(const char *labels) {
    text("data.yaml", "train: images/train\nval: images/val\nnames: [cat, dog, bird]\n");
    png("images/train/a.png", 16, 16);
    if (labels) text("labels/train/a.txt", labels);
    png("images/val/v.png", 16, 16);
}

typedef struct Loaded {
    Dataset ds;
    bool ok;
    char err[1024];
    char *warn;   /* everything written to warn */
} Loaded;

static Loaded load_with(const char *yaml_rel, const DatasetOptions *o) {
    Loaded l = {0};
    size_t n = 0;
    FILE *w = open_memstream(&l.warn, &n);
    cr_assert(w);
    l.ok = dataset_load(at(yaml_rel), o, &l.ds, w, l.err, sizeof l.err);
    cr_assert(fclose(w) == 0);
    cr_expect(!strchr(l.err, '\n'), "error is not one line: %s", l.err);
    return l;
}

static Loaded load(const char *yaml_rel) { return load_with(yaml_rel, NULL); }

static Loaded load_ok(void) {
    Loaded l = load("data.yaml");
    cr_assert(l.ok, "dataset_load failed: %s", l.err);
    return l;
}

static void done(Loaded *l) {
    if (l->ok) dataset_free(&l->ds);
    free(l->warn);
}

static int lines_of(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

#define expect_warn(l, substr) cr_expect(strstr((l)->warn, substr), "warnings lack \"%s\":\n%s", substr, (l)->warn)
#define expect_err(l, substr) \
    cr_expect(!(l)->ok && strstr((l)->err, substr), "expected an error containing \"%s\", got %s: %s", substr, (l)->ok ? "success" : "error", (l)->err)

static bool near(float a, float b) { return fabsf(a - b) < 1e-6f; }

TestSuite(dataset, .init = setup, .fini = teardown);

/* ------------------------------------------------------------- images */

Test(dataset, missing_image_is_skipped_with_a_warning) {
    text("data.yaml", "train: train.txt\nval: images/val\nnames: [a]\n");
    text("train.txt", "./images/train/a.png\n./images/train/gone.png\n");
    png("images/train/a.png", 16, 16);
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_expect(l.ds.train.n == 1 && l.ds.train.issues.missing_images == 1);
    expect_warn(&l, "/images/train/gone.png: warning: image not found; skipped");
    cr_expect(lines_of(l.warn) == 1, "%s", l.warn);
    done(&l);
}

Test(dataset, unreadable_image_file_is_skipped) {
    one_image("0 0.5 0.5 0.2 0.2\n");
    text("images/train/b.jpg", "these bytes are not an image");
    Loaded l = load_ok();
    cr_expect(l.ds.train.n == 1 && l.ds.train.issues.unreadable_images == 1);
    expect_warn(&l, "/images/train/b.jpg: warning: unreadable image (not a JPEG or PNG file (unknown magic bytes)); skipped");
    done(&l);
}

Test(dataset, image_under_10_pixels_is_skipped) {
    one_image(NULL);
    png("images/train/small.png", 9, 12);
    Loaded l = load_ok();
    cr_expect(l.ds.train.n == 1 && l.ds.train.issues.unreadable_images == 1);
    expect_warn(&l, "small.png: warning: image is 9x12, under 10 pixels a side; skipped");
    done(&l);
}

Test(dataset, background_image_has_no_label_file_or_an_empty_one) {
    one_image(NULL);
    png("images/train/b.png", 20, 10);
    text("labels/train/b.txt", "\n  \n");
    Loaded l = load_ok();
    cr_assert(l.ds.train.n == 2);
    cr_expect(l.ds.train.backgrounds == 2 && l.ds.train.n_labels == 0);
    cr_expect(l.ds.train.samples[1].w == 20 && l.ds.train.samples[1].h == 10 && !l.ds.train.samples[1].labels);
    cr_expect(l.warn[0] == 0, "unexpected warnings: %s", l.warn);
    done(&l);
}

Test(dataset, unreadable_label_file_skips_its_image) {
    one_image(NULL);
    png("images/train/b.png", 16, 16);
    parents("labels/train/b.txt");
    cr_assert(mkdir(at("labels/train/b.txt"), 0777) == 0);
    Loaded l = load_ok();
    cr_expect(l.ds.train.n == 1 && l.ds.train.issues.unreadable_labels == 1);
    expect_warn(&l, "/labels/train/b.txt: warning: cannot read label file (not a regular file); image skipped");
    done(&l);
}

Test(dataset, oversized_label_file_skips_its_image) {
    one_image("0 0.5 0.5 0.2 0.2\n");
    png("images/train/b.png", 16, 16);
    text("labels/train/b.txt", "0 0.5 0.5 0.2 0.2\n");
    cr_assert(truncate(at("labels/train/b.txt"), (off_t)DATASET_MAX_LABEL_BYTES + 1) == 0);   /* sparse: no real 16 MiB written */
    Loaded l = load_ok();
    cr_expect(l.ds.train.n == 1 && l.ds.train.issues.unreadable_labels == 1);
    expect_warn(&l, "/labels/train/b.txt: warning: cannot read label file (over the 16 MiB limit); image skipped");
    done(&l);
}

/* ------------------------------------------------------------- labels */

Test(dataset, wrong_field_count_skips_the_line) {
    one_image("0 0.5 0.5 0.2\n0 0.5 0.5 0.2 0.2 0.9\n1 0.5 0.5 0.2 0.2\n");
    Loaded l = load_ok();
    cr_assert(l.ds.train.n == 1);
    cr_expect(l.ds.train.issues.bad_lines == 2 && l.ds.train.samples[0].n_labels == 1 && l.ds.train.samples[0].labels[0].cls == 1);
    expect_warn(&l, "/labels/train/a.txt:1: warning: 4 values; expected 5");
    expect_warn(&l, "/labels/train/a.txt:2: warning: 6 values; expected 5");
    done(&l);
}

Test(dataset, non_number_field_skips_the_line) {
    one_image("0 0.5 abc 0.2 0.2\n0 nan 0.5 0.2 0.2\n0 0x1p-1 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_lines == 3 && l.ds.train.samples[0].n_labels == 1);
    expect_warn(&l, "a.txt:1: warning: 'abc' is not a number; line skipped");
    expect_warn(&l, "a.txt:2: warning: 'nan' is not a number");
    expect_warn(&l, "a.txt:3: warning: '0x1p-1' is not a number");
    done(&l);
}

Test(dataset, out_of_range_class_skips_the_line) {
    one_image("3 0.5 0.5 0.2 0.2\n-1 0.5 0.5 0.2 0.2\n2 0.5 0.5 0.2 0.2\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_classes == 2 && l.ds.train.samples[0].n_labels == 1 && l.ds.train.samples[0].labels[0].cls == 2);
    expect_warn(&l, "a.txt:1: warning: class 3 outside [0, 3); line skipped");
    expect_warn(&l, "a.txt:2: warning: class -1 outside [0, 3)");
    done(&l);
}

Test(dataset, non_integer_class_skips_the_line) {
    one_image("1.5 0.5 0.5 0.2 0.2\n1.0 0.5 0.5 0.2 0.2\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_classes == 1 && l.ds.train.samples[0].n_labels == 1 && l.ds.train.samples[0].labels[0].cls == 1);
    expect_warn(&l, "a.txt:1: warning: class 1.5 is not an integer; line skipped");
    done(&l);
}

Test(dataset, coordinate_outside_0_1_skips_the_line) {
    one_image("0 1.2 0.5 0.2 0.2\n0 0.5 -0.1 0.2 0.2\n0 0.5 0.5 0.2 1.0001\n0 1 0 1 1\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_coords == 3 && l.ds.train.samples[0].n_labels == 1);
    expect_warn(&l, "a.txt:1: warning: x_center 1.2 outside [0, 1]; line skipped");
    expect_warn(&l, "a.txt:2: warning: y_center -0.1 outside [0, 1]");
    expect_warn(&l, "a.txt:3: warning: height 1.0001 outside [0, 1]");
    done(&l);
}

Test(dataset, zero_size_skips_the_line) {
    one_image("0 0.5 0.5 0 0.2\n0 0.5 0.5 0.3 -0\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_coords == 2 && l.ds.train.samples[0].n_labels == 0 && l.ds.train.backgrounds == 1);
    expect_warn(&l, "a.txt:1: warning: width is 0; line skipped");
    expect_warn(&l, "a.txt:2: warning: height is 0; line skipped");
    done(&l);
}

Test(dataset, duplicate_line_is_removed) {
    one_image("0 0.5 0.5 0.2 0.2\n1 0.5 0.5 0.2 0.2\n0 0.50 0.5 0.2 0.200\n");
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.duplicate_lines == 1 && l.ds.train.samples[0].n_labels == 2);
    expect_warn(&l, "a.txt:3: warning: duplicate of line 1; removed");
    done(&l);
}

Test(dataset, polygon_row_becomes_its_bounding_box) {
    one_image("1 0.1 0.2 0.5 0.2 0.3 0.6\n2 0.1 0.2 0.5 0.2 0.3 0.6 0.7\n");
    Loaded l = load_ok();
    cr_assert(l.ds.train.samples[0].n_labels == 1);
    const Label *b = &l.ds.train.samples[0].labels[0];
    cr_expect(b->cls == 1 && near(b->cx, 0.3f) && near(b->cy, 0.4f) && near(b->w, 0.4f) && near(b->h, 0.4f), "box %d %g %g %g %g", b->cls, b->cx, b->cy,
              b->w, b->h);
    cr_expect(l.ds.train.issues.bad_lines == 1);
    expect_warn(&l, "a.txt:2: warning: polygon with an odd number of coordinates (7)");
    done(&l);
}

Test(dataset, crlf_tabs_bom_and_blank_lines_are_accepted) {
    one_image("\xEF\xBB\xBF" "0\t0.5 0.5 0.2 0.2\r\n\r\n  2 0.25 0.75 0.5 0.1  \r\n");
    Loaded l = load_ok();
    cr_assert(l.ds.train.samples[0].n_labels == 2, "%s", l.warn);
    const Label *b = &l.ds.train.samples[0].labels[1];
    cr_expect(b->cls == 2 && near(b->cx, 0.25f) && near(b->cy, 0.75f) && near(b->w, 0.5f) && near(b->h, 0.1f));
    cr_expect(l.warn[0] == 0, "unexpected warnings: %s", l.warn);
    done(&l);
}

Test(dataset, long_lines_and_many_problems_are_bounded) {
    char *t = malloc(DATASET_MAX_LINE_BYTES + 4096);
    cr_assert(t);
    memset(t, ' ', DATASET_MAX_LINE_BYTES + 1);
    t[0] = '0';
    size_t n = DATASET_MAX_LINE_BYTES + 1;
    t[n++] = '\n';
    for (int i = 0; i < 30; i++) n += (size_t)sprintf(t + n, "x\n");
    t[n] = 0;
    one_image(t);
    free(t);
    Loaded l = load_ok();
    cr_expect(l.ds.train.issues.bad_lines == 31);
    expect_warn(&l, "a.txt:1: warning: line longer than 65536 bytes; skipped");
    expect_warn(&l, "a.txt: warning: 11 more problems in this file not shown");
    cr_expect(lines_of(l.warn) == 21, "%d warning lines", lines_of(l.warn));
    done(&l);
}

/* --------------------------------------------------------- image lists */

Test(dataset, directory_is_recursive_sorted_and_skips_hidden_and_non_images) {
    text("data.yaml", "train: images/train\nval: images/val\nnc: 1\n");
    png("images/train/b.png", 16, 16);
    png("images/train/sub/a.PNG", 16, 16);
    png("images/train/a.png", 16, 16);
    png("images/train/.hidden/c.png", 16, 16);
    png("images/train/.d.png", 16, 16);
    text("images/train/notes.md", "x");
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_assert(l.ds.train.n == 3);
    cr_expect(strstr(l.ds.train.samples[0].image, "/images/train/a.png"));
    cr_expect(strstr(l.ds.train.samples[1].image, "/images/train/b.png"));
    cr_expect(strstr(l.ds.train.samples[2].image, "/images/train/sub/a.PNG"));
    done(&l);
}

Test(dataset, txt_list_resolves_dot_slash_against_its_folder) {
    text("data.yaml", "train: lists/train.txt\nval: images/val\nnames: [a]\n");
    png("lists/img/x.png", 16, 16);
    png("elsewhere/y.png", 16, 16);
    char list[600];
    snprintf(list, sizeof list, "./img/x.png\n  %s  \nreadme.md\n\n", at("elsewhere/y.png"));
    text("lists/train.txt", list);
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_assert(l.ds.train.n == 2, "%d images; %s", l.ds.train.n, l.warn);
    cr_expect(strcmp(l.ds.train.samples[0].image, at("elsewhere/y.png")) == 0, "%s", l.ds.train.samples[0].image);
    cr_expect(strcmp(l.ds.train.samples[1].image, at("lists/img/x.png")) == 0, "%s", l.ds.train.samples[1].image);
    done(&l);
}

Test(dataset, list_of_directories_is_merged_and_sorted) {
    text("data.yaml", "train: [images/t2, images/t1]\nval: images/val\nnames: [a]\n");
    png("images/t1/b.png", 16, 16);
    png("images/t2/a.png", 16, 16);
    png("images/val/v.png", 16, 16);
    text("labels/t2/a.txt", "0 0.5 0.5 0.1 0.1\n");
    Loaded l = load_ok();
    cr_assert(l.ds.train.n == 2);
    cr_expect(strstr(l.ds.train.samples[0].image, "images/t1/b.png") && strstr(l.ds.train.samples[1].image, "images/t2/a.png"));
    cr_expect(l.ds.train.samples[1].n_labels == 1 && l.ds.train.n_labels == 1 && l.ds.train.backgrounds == 1);
    done(&l);
}

Test(dataset, path_key_is_relative_to_the_yaml_and_dotdot_entries_are_retried) {
    text("cfg/data.yaml", "path: ../ds\ntrain: ../images/train\nval: images/val\nnames: [a]\n");
    png("ds/images/train/a.png", 16, 16);
    png("ds/images/val/v.png", 16, 16);
    Loaded l = load("cfg/data.yaml");
    cr_assert(l.ok, "%s", l.err);
    cr_expect(strcmp(l.ds.root, at("cfg/../ds")) == 0, "root %s", l.ds.root);
    cr_expect(l.ds.train.n == 1 && strstr(l.ds.train.samples[0].image, "/ds/images/train/a.png"));
    done(&l);
}

/* ------------------------------------------------ splits and options */

/* 7 training images t0..t6 (t3 unreadable), val v and test w, 3 classes */
static void three_splits(const char *test_line) {
    char yaml[256];
    snprintf(yaml, sizeof yaml, "train: images/train\nval: images/val\n%snames: [cat, dog, bird]\n", test_line);
    text("data.yaml", yaml);
    for (int i = 0; i < 7; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "images/train/t%d.png", i);
        if (i == 3) text(rel, "not a png");
        else png(rel, 16, 16);
    }
    png("images/val/v.png", 16, 16);
    png("images/test/w.png", 16, 16);
    png("images/test/x.png", 16, 16);
}

Test(dataset, only_the_splits_asked_for_are_loaded) {
    three_splits("test: images/test\n");
    Loaded l = load_with("data.yaml", &(DatasetOptions){.splits = DATASET_TEST});
    cr_assert(l.ok, "%s", l.err);
    cr_expect(l.ds.train.n == 0 && l.ds.val.n == 0 && !l.ds.train.samples, "train %d val %d", l.ds.train.n, l.ds.val.n);
    cr_assert(l.ds.test.n == 2);
    cr_expect(strstr(l.ds.test.samples[0].image, "images/test/w.png") && strstr(l.ds.test.source, "images/test"));
    /* the unreadable training image is never looked at */
    cr_expect(!strstr(l.warn, "t3.png"), "%s", l.warn);
    done(&l);
    l = load_ok();
    cr_expect(l.ds.train.n == 6 && l.ds.val.n == 1 && l.ds.test.n == 0);
    done(&l);
}

Test(dataset, test_split_asked_for_but_absent_or_null_is_an_error) {
    const char *lines[] = {"", "test:\n", "test: null\n", "test: ~\n", "test: NULL\n"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        three_splits(lines[i]);
        Loaded l = load_with("data.yaml", &(DatasetOptions){.splits = DATASET_VAL | DATASET_TEST});
        expect_err(&l, "no 'test:' split");
        cr_expect(strstr(l.err, "data.yaml:1:1"), "%s", l.err);
        done(&l);
        /* without asking for it, an empty test key is fine */
        l = load_ok();
        done(&l);
    }
}

Test(dataset, fraction_cuts_the_sorted_training_list_before_checking) {
    three_splits("");
    /* Ultralytics: im_files[:round(7 * f)], Python's round (halves to even) */
    const struct {
        double f;
        int listed, usable;
    } cases[] = {{0.5, 4, 3}, {0.3, 2, 2}, {0.43, 3, 3}, {1.0, 7, 6}, {0.9, 6, 5}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Loaded l = load_with("data.yaml", &(DatasetOptions){.fraction = cases[i].f});
        cr_assert(l.ok, "%s", l.err);
        cr_expect(l.ds.train.n == cases[i].usable, "fraction %g: %d images, expected %d", cases[i].f, l.ds.train.n, cases[i].usable);
        cr_expect((strstr(l.warn, "t3.png") != NULL) == (cases[i].listed > 3), "fraction %g: %s", cases[i].f, l.warn);
        cr_expect(strstr(l.ds.train.samples[0].image, "t0.png"));
        cr_expect(l.ds.val.n == 1, "the val split is whole");
        done(&l);
    }
    /* 7 x 0.5 = 3.5 rounds to 4 (even); 5 images x 0.5 = 2.5 would round to 2 */
    Loaded l = load_with("data.yaml", &(DatasetOptions){.fraction = 0.05});
    expect_err(&l, "a fraction of 0.05 keeps none of its 7 images");
    done(&l);
}

Test(dataset, single_cls_makes_every_class_0_named_item) {
    one_image("2 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.2 0.2\n7 0.1 0.1 0.1 0.1\n-1 0.3 0.3 0.1 0.1\n");
    Loaded l = load_with("data.yaml", &(DatasetOptions){.single_cls = true});
    cr_assert(l.ok, "%s", l.err);
    cr_expect(l.ds.nc == 1 && strcmp(l.ds.names[0], "item") == 0, "nc %d", l.ds.nc);
    const Sample *s = &l.ds.train.samples[0];
    /* two classes of one box stay two boxes (duplicates are removed before the classes merge);
     * class 7 is read, a negative class is not */
    cr_assert(s->n_labels == 3, "%d labels; %s", s->n_labels, l.warn);
    for (int i = 0; i < 3; i++) cr_expect(s->labels[i].cls == 0);
    cr_expect(l.ds.train.issues.bad_classes == 1, "%s", l.warn);
    done(&l);
    l = load_ok();
    cr_expect(l.ds.nc == 3 && l.ds.train.samples[0].n_labels == 2 && l.ds.train.issues.bad_classes == 2);
    done(&l);
}

/* ------------------------------------------------------- names and nc */

Test(dataset, names_as_a_mapping) {
    text("data.yaml", "train: images/val\nval: images/val\nnames:\n  1: dog\n  0: cat\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_assert(l.ds.nc == 2);
    cr_expect(strcmp(l.ds.names[0], "cat") == 0 && strcmp(l.ds.names[1], "dog") == 0);
    done(&l);
}

Test(dataset, names_as_a_list) {
    text("data.yaml", "train: images/val\nval: images/val\nnames: [cat, 'dog two', bird]\nnc: 3\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_assert(l.ds.nc == 3);
    cr_expect(strcmp(l.ds.names[1], "dog two") == 0 && strcmp(l.ds.names[2], "bird") == 0);
    done(&l);
}

Test(dataset, nc_alone_names_classes_by_number) {
    text("data.yaml", "train: images/val\nval: images/val\nnc: 3\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_assert(l.ds.nc == 3);
    cr_expect(strcmp(l.ds.names[0], "class_0") == 0 && strcmp(l.ds.names[2], "class_2") == 0);
    done(&l);
}

Test(dataset, names_and_nc_disagreeing_is_an_error) {
    text("data.yaml", "train: images/val\nval: images/val\nnc: 4\nnames: [a, b, c]\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "/data.yaml:4:8: error: 'names' has 3 entries but 'nc' is 4; they must match");
    done(&l);
}

Test(dataset, names_mapping_with_a_gap_is_an_error) {
    text("data.yaml", "train: images/val\nval: images/val\nnames: {0: a, 2: c}\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:3:15: error: class index must be an integer in 0..1 for 2 names");
    done(&l);
}

Test(dataset, neither_names_nor_nc_is_an_error) {
    text("data.yaml", "train: images/val\nval: images/val\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:1:1: error: needs 'names' (or 'nc')");
    done(&l);
}

/* ------------------------------------------------------- fatal errors */

Test(dataset, missing_val_key_is_an_error) {
    text("data.yaml", "train: images/val\nnames: [a]\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:1:1: error: 'val:' key missing");
    done(&l);
}

Test(dataset, validation_key_stands_for_val) {
    text("data.yaml", "train: images/val\nvalidation: images/val\nnames: [a]\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load_ok();
    cr_expect(l.ds.val.n == 1);
    done(&l);
}

Test(dataset, nonexistent_yaml_is_an_error) {
    Loaded l = load("nope.yaml");
    expect_err(&l, "nope.yaml: error: cannot open: No such file or directory");
    done(&l);
}

Test(dataset, yaml_syntax_error_names_line_and_column) {
    text("data.yaml", "train: images/train\nval: [images/val\nnames: [a]\n");
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:3:");
    expect_err(&l, "error: invalid YAML");
    done(&l);
}

Test(dataset, nonexistent_train_directory_is_an_error_at_its_value) {
    text("data.yaml", "train: images/nope\nval: images/val\nnames: [a]\n");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:1:8: error: 'images/nope' does not exist");
    done(&l);
}

Test(dataset, split_without_usable_images_is_an_error) {
    text("data.yaml", "train: images/train\nval: images/val\nnames: [a]\n");
    text("images/train/a.png", "junk");
    png("images/val/v.png", 16, 16);
    Loaded l = load("data.yaml");
    expect_err(&l, "data.yaml:1:8: error: 'train' has no usable images (1 listed, all skipped)");
    expect_warn(&l, "a.png: warning: unreadable image");
    done(&l);
}

/* -------------------------------------------------------- small API */

Test(dataset, label_path_replaces_the_last_images_folder_and_suffix) {
    char *p = dataset_label_path("/d/images/x/images/a.b.jpg");
    cr_expect(strcmp(p, "/d/images/x/labels/a.b.txt") == 0, "%s", p);
    free(p);
    p = dataset_label_path("rel.d/pic");
    cr_expect(strcmp(p, "rel.d/pic.txt") == 0, "%s", p);
    free(p);
}

Test(dataset, issues_line_lists_what_was_skipped) {
    DataSplit s = {.n = 1000, .n_labels = 3120, .backgrounds = 4, .issues = {.missing_images = 2, .bad_lines = 1}};
    char out[256];
    dataset_issues_format("train", &s, out, sizeof out);
    cr_expect(strcmp(out, "train: 1000 images (4 backgrounds), 3120 boxes; skipped 2 missing images, 1 bad label line") == 0, "%s", out);
    s.issues = (DataIssues){0};
    dataset_issues_format("val", &s, out, sizeof out);
    cr_expect(strcmp(out, "val: 1000 images (4 backgrounds), 3120 boxes") == 0, "%s", out);
}

Test(dataset, parse_labels_directly) {
    DataIssues iss = {0};
    Label *out;
    int n;
    const char t[] = "0 0.5 0.5 0.5 0.5\n0 0.5 0.5 0.5 0.5\n1 0 0 1 1";
    cr_assert(dataset_parse_labels(t, sizeof t - 1, "mem.txt", 2, &out, &n, &iss, NULL));
    cr_expect(n == 2 && iss.duplicate_lines == 1 && out[1].cls == 1 && out[1].w == 1.0f);
    free(out);
    cr_assert(dataset_parse_labels("\0\0", 2, "nul.txt", 2, &out, &n, &iss, NULL));
    cr_expect(n == 0 && !out && iss.bad_lines == 1);
}

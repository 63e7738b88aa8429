/* tests/test_npy_image.c — Ultralytics' disk cache of decoded images
 * (runtime/data/npy_image.c, the loader's use of it, `yolort train --cache
 * disk`): file names as pathlib's with_suffix, files NumPy itself reads and
 * writes (through the ORT venv's numpy; `SKIP` without it), damaged files
 * refused without a crash, and the loader taking a .npy's pixels over its
 * image's. Owns no runtime code. */
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/data/image_io.h"
#include "../runtime/data/loader.h"
#include "../runtime/data/npy_image.h"
#include "test_util.h"

static Image pattern(int w, int h, int seed) {
    Image im = {w, h, malloc((size_t)w * (size_t)h * 3)};
    for (int i = 0; i < w * h * 3; i++) im.px[i] = (uint8_t)(i * 7 + seed * 31 + i / 5);
    return im;
}

static void tmp_dir(char dir[64]) {
    strcpy(dir, "/tmp/yolocc-npy-XXXXXX");
    cr_assert(mkdtemp(dir));
}

/* A new directory with DIR/a.npy of a w x h pattern image (*im); the file's bytes (*len). */
static char *written(char dir[64], char path[128], int w, int h, int seed, Image *im, size_t *len) {
    char err[512];
    tmp_dir(dir);
    snprintf(path, 128, "%s/a.npy", dir);
    *im = pattern(w, h, seed);
    cr_assert(npy_image_write(path, im, err, sizeof err), "%s", err);
    return tu_slurp(path, len);
}

static void rm_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

Test(npy_image, names_follow_pathlib_with_suffix) {
    static const char *const cases[][2] = {{"a/b.jpg", "a/b.npy"}, {"a/b.c.png", "a/b.c.npy"}, {"a/b", "a/b.npy"}, {"a.d/b", "a.d/b.npy"},
                                           {"x/.hidden", "x/.hidden.npy"}, {"x/name.", "x/name..npy"}, {"img.JPG", "img.npy"}};
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert(npy_image_path(cases[i][0], out, sizeof out));
        cr_expect_str_eq(out, cases[i][1], "%s", cases[i][0]);
    }
    cr_expect_not(npy_image_path("abcdef.jpg", out, 10), "a name that does not fit is refused");
}

Test(npy_image, round_trip_is_exact_and_the_header_numpys) {
    char dir[64], path[128], err[512];
    Image im, back;
    size_t len;
    char *bytes = written(dir, path, 37, 23, 1, &im, &len);
    cr_assert_eq(len, npy_image_bytes(37, 23));
    cr_expect_eq(memcmp(bytes, "\x93NUMPY\x01\x00", 8), 0, "format 1.0");
    const size_t hl = (size_t)(unsigned char)bytes[8] | (size_t)(unsigned char)bytes[9] << 8;
    cr_expect_eq((10 + hl) % 64, 0, "the header ends on a 64-byte boundary, as NumPy pads it");
    cr_expect_eq(bytes[10 + hl - 1], '\n');
    cr_expect(strstr(bytes + 10, "{'descr': '|u1', 'fortran_order': False, 'shape': (23, 37, 3), }"), "%.*s", (int)hl, bytes + 10);
    cr_expect_eq(bytes[10 + hl], (char)im.px[2], "the file holds B, G, R");
    free(bytes);
    cr_assert_eq(npy_image_read(path, &back, err, sizeof err), NPY_READ, "%s", err);
    cr_assert(back.w == 37 && back.h == 23);
    cr_expect_eq(memcmp(back.px, im.px, 37 * 23 * 3), 0);
    image_free(&back);
    snprintf(path, sizeof path, "%s/absent.npy", dir);
    cr_expect_eq(npy_image_read(path, &back, err, sizeof err), NPY_ABSENT);
    image_free(&im);
    rm_dir(dir);
}

/* Damaged files: one line each, never an image, never a crash. */
Test(npy_image, damaged_files_are_corrupt_or_skipped) {
    char dir[64], path[128], err[512];
    Image im, back;
    size_t len;
    char *good = written(dir, path, 8, 6, 2, &im, &len);
    const size_t hl = (size_t)(unsigned char)good[8];
    struct {
        const char *what;
        size_t keep;            /* bytes of the good file kept */
        const char *header;     /* replaces the header dictionary (same length, padded), or NULL */
        NpyRead want;
    } cases[] = {
        {"cut in the pixels", len - 1, NULL, NPY_CORRUPT},
        {"cut in the header", 30, NULL, NPY_CORRUPT},
        {"only the magic", 6, NULL, NPY_CORRUPT},
        {"empty", 0, NULL, NPY_CORRUPT},
        {"not a dictionary", len, "hello", NPY_CORRUPT},
        {"a shape that does not parse", len, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, x, 3), }", NPY_CORRUPT},
        {"floats", len, "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 8, 3), }", NPY_SKIPPED},
        {"Fortran order", len, "{'descr': '|u1', 'fortran_order': True, 'shape': (6, 8, 3), }", NPY_SKIPPED},
        {"grey", len, "{'descr': '|u1', 'fortran_order': False, 'shape': (6, 8), }", NPY_SKIPPED},
        {"a side too large", len, "{'descr': '|u1', 'fortran_order': False, 'shape': (60000, 8, 3), }", NPY_SKIPPED},
        {"more pixels than the file holds", len, "{'descr': '|u1', 'fortran_order': False, 'shape': (60, 80, 3), }", NPY_CORRUPT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char *b = malloc(len);
        memcpy(b, good, len);
        if (cases[c].header) {
            memset(b + 10, ' ', hl - 1);
            memcpy(b + 10, cases[c].header, strlen(cases[c].header));
        }
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        cr_assert_eq(fwrite(b, 1, cases[c].keep, f), cases[c].keep);
        fclose(f);
        free(b);
        err[0] = 0;
        cr_expect_eq(npy_image_read(path, &back, err, sizeof err), cases[c].want, "%s: %s", cases[c].what, err);
        cr_expect(!back.px && err[0] && !strchr(err, '\n'), "%s: one line, no image: %s", cases[c].what, err);
    }
    free(good);
    image_free(&im);
    rm_dir(dir);
}

/* NumPy reads what we write as cv2.imread's array would be, and we read what
 * np.save writes (formats 1.0 and 2.0) as the same pixels. */
Test(npy_image, numpy_reads_and_writes_the_same_files) {
    if (!tu_python_has("numpy")) {
        printf("SKIP: numpy not installed (%s; make ort-venv)\n", tu_ort_python());
        cr_skip_test("numpy not installed");
    }
    char dir[64], path[128], cmd[1024], err[512];
    tmp_dir(dir);
    snprintf(path, sizeof path, "%s/ours.npy", dir);
    Image im = pattern(5, 4, 3), back;
    cr_assert(npy_image_write(path, &im, err, sizeof err), "%s", err);
    /* numpy: the array as BGR, and two files of its own from the same pixels */
    snprintf(cmd, sizeof cmd,
             "%s -c \"import numpy as np; a = np.load('%s'); assert a.dtype == np.uint8 and a.shape == (4, 5, 3) and a.flags.c_contiguous; "
             "rgb = np.arange(60, dtype=np.int64).reshape(4, 5, 3); rgb = ((rgb * 7 + 3 * 31 + rgb // 5) %% 256).astype(np.uint8); "
             "assert (a == rgb[:, :, ::-1]).all(), 'channels'; np.save('%s/v1.npy', a); "
             "np.lib.format.write_array(open('%s/v2.npy', 'wb'), a, version=(2, 0))\"",
             tu_ort_python(), path, dir, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char *names[] = {"v1", "v2"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[k]);
        cr_assert_eq(npy_image_read(path, &back, err, sizeof err), NPY_READ, "%s: %s", names[k], err);
        cr_expect(back.w == 5 && back.h == 4 && memcmp(back.px, im.px, 60) == 0, "%s: numpy's file holds our pixels", names[k]);
        image_free(&back);
    }
    image_free(&im);
    rm_dir(dir);
}

/* The loader decodes IMAGE.npy instead of IMAGE when there is one (here
 * other pixels than the JPEG's, so it shows which was read), and removes a
 * corrupt one, decoding the JPEG. */
Test(npy_image, the_loader_reads_the_npy_beside_an_image) {
    char dir[64], img[128], npy[128], cmd[256], err[512];
    tmp_dir(dir);
    snprintf(cmd, sizeof cmd, "datagen %s --images 4 --size 64 --classes 2 --seed 9 --val-fraction 0.5", dir);
    CliResult r = tu_run_bin(tu_env_bin("YOLORT_BIN", "build/yolort"), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    Dataset ds;
    snprintf(img, sizeof img, "%s/data.yaml", dir);
    cr_assert(dataset_load(img, NULL, &ds, NULL, err, sizeof err), "%s", err);
    cr_assert_geq(ds.val.n, 1);
    const Sample *s = &ds.val.samples[0];
    Image jpg;
    cr_assert(image_load(s->image, &jpg, err, sizeof err), "%s", err);
    LoaderOptions o = {.batch = 1, .imgsz = 64, .max_boxes = 8, .train = false, .workers = 0, .bytes = true};
    uint8_t *from_jpg = NULL, *from_npy = NULL;
    for (int pass = 0; pass < 3; pass++) {
        cr_assert(npy_image_path(s->image, npy, sizeof npy));
        if (pass == 1) {
            Image inv = {jpg.w, jpg.h, malloc((size_t)jpg.w * (size_t)jpg.h * 3)};
            for (int i = 0; i < jpg.w * jpg.h * 3; i++) inv.px[i] = (uint8_t)(255 - jpg.px[i]);
            cr_assert(npy_image_write(npy, &inv, err, sizeof err), "%s", err);
            image_free(&inv);
        } else if (pass == 2) {
            FILE *f = fopen(npy, "wb");
            cr_assert(f);
            fputs("\x93NUMPY garbage", f);
            fclose(f);
        }
        Loader *l = loader_open(&ds.val, &o, err, sizeof err);
        cr_assert_not_null(l, "%s", err);
        Batch b;
        cr_assert(loader_start_epoch(l, 0, false, 0, err, sizeof err), "%s", err);
        cr_assert(loader_next(l, &b, err, sizeof err), "%s", err);
        const size_t n = (size_t)3 * (size_t)b.h * (size_t)b.w;
        uint8_t *copy = malloc(n);
        memcpy(copy, b.bytes, n);
        loader_close(l);
        if (pass == 0) from_jpg = copy;
        else if (pass == 1) from_npy = copy;
        else {
            cr_expect_eq(memcmp(copy, from_jpg, n), 0, "a corrupt .npy: the JPEG's pixels");
            struct stat st;
            cr_expect_neq(stat(npy, &st), 0, "the corrupt .npy was removed");
            free(copy);
        }
        if (pass == 1) cr_expect_neq(memcmp(from_npy, from_jpg, n), 0, "the .npy's pixels, not the JPEG's");
    }
    free(from_jpg), free(from_npy);
    image_free(&jpg);
    dataset_free(&ds);
    rm_dir(dir);
}

/* `yolort train --cache disk`: every image of both splits gets its .npy (the
 * JPEG's decoded pixels) before training, with the bar, and args.yaml says
 * cache: disk; a resumed run keeps the setting (as Ultralytics' resume keeps
 * its args); a run without --cache finds the files and trains the same. */
Test(npy_image, train_cache_disk_writes_every_split, .timeout = 300) {
    char dir[64], cmd[1024], path[256], err[512];
    tmp_dir(dir);
    tu_tiny_data_and_plan(dir, "--images 10 --size 64 --classes 3 --seed 4", "--imgsz 64 --batch 2", "t.plan");
    snprintf(cmd, sizeof cmd, "train %s/t.plan --data %s/data/data.yaml --epochs 2 --stop-after 1 --cache disk --no-plots --workers 0 --project %s/runs --name a", dir, dir,
             dir);
    CliResult r = tu_run_bin(tu_env_bin("YOLORT_FAST_BIN", "build/yolort"), cmd);
    cr_assert_eq(r.status, 0, "%s\n%s", r.out, r.err);
    cr_expect(strstr(r.out, "train: Caching images (") && strstr(r.out, "val: Caching images ("), "the bars:\n%s", r.out);
    char *first = strstr(r.out, "      1/2"), *first_copy = first ? strdup(first) : NULL;
    tu_free(&r);
    Dataset ds;
    snprintf(path, sizeof path, "%s/data/data.yaml", dir);
    cr_assert(dataset_load(path, NULL, &ds, NULL, err, sizeof err), "%s", err);
    const DataSplit *splits[] = {&ds.train, &ds.val};
    int files = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < splits[k]->n; i++) {
            const Sample *s = &splits[k]->samples[i];
            char npy[512];
            Image a, b;
            cr_assert(npy_image_path(s->image, npy, sizeof npy));
            cr_assert_eq(npy_image_read(npy, &a, err, sizeof err), NPY_READ, "%s: %s", npy, err);
            cr_assert(image_load(s->image, &b, err, sizeof err), "%s", err);
            cr_expect(a.w == b.w && a.h == b.h && memcmp(a.px, b.px, (size_t)a.w * (size_t)a.h * 3) == 0, "%s holds the decoded image", npy);
            image_free(&a), image_free(&b);
            files++;
        }
    cr_expect_eq(files, ds.train.n + ds.val.n);
    snprintf(path, sizeof path, "%s/runs/a/args.yaml", dir);
    char *args = tu_slurp(path, NULL);
    cr_expect(args && strstr(args, "\ncache: disk\n"), "%s", args ? args : "no args.yaml");
    free(args);
    snprintf(cmd, sizeof cmd, "train %s/t.plan --resume %s/runs/a", dir, dir);
    r = tu_run_bin(tu_env_bin("YOLORT_FAST_BIN", "build/yolort"), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "train: Caching images ("), "the resumed run caches to disk as the run did:\n%s", r.out);
    tu_free(&r);
    /* from the .npy files: the same batches, the same losses */
    snprintf(cmd, sizeof cmd, "train %s/t.plan --data %s/data/data.yaml --epochs 2 --stop-after 1 --no-plots --workers 0 --project %s/runs --name b", dir, dir, dir);
    r = tu_run_bin(tu_env_bin("YOLORT_FAST_BIN", "build/yolort"), cmd);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect_null(strstr(r.out, "Caching images"), "no --cache: nothing written");
    char *again = strstr(r.out, "      1/2");
    cr_assert(first_copy && again, "epoch lines: %s / %s\n%s", first_copy ? "yes" : "no", again ? "yes" : "no", r.out);
    /* the match starts 2 columns into the 11-wide epoch field; the losses follow the memory field */
    cr_expect_eq(strncmp(first_copy + 20, again + 20, 33), 0, "the first epoch's losses:\n%.60s\n%.60s", first_copy, again);
    free(first_copy);
    tu_free(&r);
    /* another --cache value: one usage error, exit 2, no run directory */
    snprintf(cmd, sizeof cmd, "train %s/t.plan --data %s/data/data.yaml --cache tmpfs --project %s/runs --name c", dir, dir, dir);
    r = tu_run_bin(tu_env_bin("YOLORT_FAST_BIN", "build/yolort"), cmd);
    cr_expect_eq(r.status, 2, "%s", r.err);
    cr_expect(strstr(r.err, "--cache must be ram, disk or none, got 'tmpfs'") && tu_lines(r.err) == 1, "%s", r.err);
    snprintf(path, sizeof path, "%s/runs/c", dir);
    struct stat st;
    cr_expect_neq(stat(path, &st), 0, "no run directory");
    tu_free(&r);
    dataset_free(&ds);
    rm_dir(dir);
}

/* tests/test_image_io.c — suite `image_io`: PNG/JPEG round trips, every PNG
 * colour type converted to RGB as OpenCV would, EXIF orientation, CMYK, and
 * one test per class of bad file (truncated, corrupt, wrong magic, huge
 * declared size). Owns these tests only; builds its inputs with libpng and
 * libjpeg directly, in a fresh temp dir per test. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "../runtime/data/image_io.h"

/* ------------------------------------------------------------ helpers */

static char dir[64];

static void setup(void) {
    strcpy(dir, "/tmp/yolocc-img-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert(system(cmd) == 0);
}

static const char *at(const char *name) {
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    cr_assert(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    cr_assert(n >= 0 && fseek(f, 0, SEEK_SET) == 0);
    unsigned char *b = malloc((size_t)n + 1);
    cr_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

static Image pattern(int w, int h, unsigned seed) {
    Image im = {w, h, malloc((size_t)w * (size_t)h * 3)};
    cr_assert(im.px);
    for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) {
        seed = seed * 1103515245u + 12345u;
        im.px[i] = (uint8_t)(seed >> 16);
    }
    return im;
}

/* Smooth content, so JPEG error stays small. */
static Image gradient(int w, int h) {
    Image im = {w, h, malloc((size_t)w * (size_t)h * 3)};
    cr_assert(im.px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = im.px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (uint8_t)(x * 255 / (w - 1)), p[1] = (uint8_t)(y * 255 / (h - 1)), p[2] = 128;
        }
    return im;
}

static void expect_error(bool ok, const char *err, const char *substr, const char *what) {
    cr_expect(!ok, "%s: succeeded, expected an error containing \"%s\"", what, substr);
    cr_expect(strstr(err, substr), "%s: error \"%s\" lacks \"%s\"", what, err, substr);
    cr_expect(!strchr(err, '\n'), "%s: error is not one line: \"%s\"", what, err);
}

static void expect_decode_error(const unsigned char *b, size_t n, const char *substr, const char *what) {
    Image im;
    char err[512] = "";
    bool ok = image_decode(b, n, &im, err, sizeof err);
    expect_error(ok, err, substr, what);
    cr_expect(!im.px && !im.w && !im.h, "%s: a failed decode left an image", what);
    if (ok) image_free(&im);
}

/* Writes a PNG with libpng's classic API exactly as described. */
static void write_png_raw(const char *path, int w, int h, int color_type, int depth, const uint8_t *data, size_t rowbytes, const png_color *pal,
                          int npal, const uint8_t *trns, int ntrns, int interlace) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info);
    if (setjmp(png_jmpbuf(png))) cr_assert_fail("libpng could not write the test file");
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color_type, interlace, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (pal) png_set_PLTE(png, info, pal, npal);
    if (trns) png_set_tRNS(png, info, trns, ntrns, NULL);
    png_write_info(png, info);
    if (depth == 16) png_set_swap(png);   /* the test data is little-endian */
    png_bytep *rows = malloc((size_t)h * sizeof *rows);
    cr_assert(rows);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)(data + (size_t)y * rowbytes);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    cr_assert(fclose(f) == 0);
}

static Image load_ok(const char *path) {
    Image im;
    char err[512] = "";
    cr_assert(image_load(path, &im, err, sizeof err), "%s", err);
    return im;
}

static const uint8_t *px_at(const Image *im, int x, int y) { return im->px + ((size_t)y * (size_t)im->w + (size_t)x) * 3; }

/* A JPEG made with libjpeg: w x h, components 3 (RGB) or 4 (CMYK), with an
 * optional APP1 payload and n_app2 64 KB APP2 segments before the frame. */
static unsigned char *make_jpeg(int w, int h, int comps, const uint8_t *px, const unsigned char *app1, unsigned app1_len, int n_app2,
                                unsigned long *len) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned char *mem = NULL;
    *len = 0;
    jpeg_mem_dest(&ci, &mem, len);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = comps == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    if (app1) jpeg_write_marker(&ci, JPEG_APP0 + 1, app1, app1_len);
    static unsigned char big[65000];
    for (int i = 0; i < n_app2; i++) jpeg_write_marker(&ci, JPEG_APP0 + 2, big, sizeof big);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)ci.next_scanline * (size_t)w * (size_t)comps);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return mem;
}

static void png_crc_fix(unsigned char *chunk_len_at, size_t data_len) {
    uLong c = crc32(0, chunk_len_at + 4, (uInt)(data_len + 4));
    unsigned char *p = chunk_len_at + 8 + data_len;
    p[0] = (unsigned char)(c >> 24), p[1] = (unsigned char)(c >> 16), p[2] = (unsigned char)(c >> 8), p[3] = (unsigned char)c;
}

TestSuite(image_io, .init = setup, .fini = teardown);

/* ------------------------------------------------------------ round trips */

Test(image_io, png_round_trip_is_exact_and_probe_reads_the_size) {
    Image im = pattern(37, 23, 1);
    char err[512] = "";
    cr_assert(image_write_png(at("a.png"), &im, err, sizeof err), "%s", err);
    Image back = load_ok(at("a.png"));
    cr_assert(back.w == 37 && back.h == 23);
    cr_assert(memcmp(back.px, im.px, 37 * 23 * 3) == 0, "PNG round trip changed pixels");
    int w, h;
    cr_assert(image_probe(at("a.png"), &w, &h, err, sizeof err), "%s", err);
    cr_assert(w == 37 && h == 23);
    size_t n;
    unsigned char *b = slurp(at("a.png"), &n);
    Image mem;
    cr_assert(image_decode(b, n, &mem, err, sizeof err), "%s", err);
    cr_assert(memcmp(mem.px, im.px, 37 * 23 * 3) == 0);
    free(b);
    image_free(&mem);
    image_free(&back);
    image_free(&im);
}

Test(image_io, jpeg_round_trip_is_close) {
    Image im = gradient(64, 48);
    char err[512] = "";
    cr_assert(image_write_jpeg(at("a.jpg"), &im, 95, err, sizeof err), "%s", err);
    Image back = load_ok(at("a.jpg"));
    cr_assert(back.w == 64 && back.h == 48);
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < 64 * 48 * 3; i++) {
        int d = abs(back.px[i] - im.px[i]);
        sum += d;
        worst = d > worst ? d : worst;
    }
    cr_expect(sum / (64 * 48 * 3) < 2.0 && worst < 24, "mean error %.2f, worst %d", sum / (64 * 48 * 3), worst);
    int w, h;
    cr_assert(image_probe(at("a.jpg"), &w, &h, err, sizeof err), "%s", err);
    cr_assert(w == 64 && h == 48);
    image_free(&back);
    image_free(&im);
}

/* ------------------------------------------------------- PNG conversions */

Test(image_io, png_grey_and_low_bit_depths_become_rgb) {
    uint8_t g[4 * 3];
    for (int i = 0; i < 12; i++) g[i] = (uint8_t)(i * 20);
    write_png_raw(at("g8.png"), 4, 3, PNG_COLOR_TYPE_GRAY, 8, g, 4, NULL, 0, NULL, 0, PNG_INTERLACE_NONE);
    Image im = load_ok(at("g8.png"));
    for (int i = 0; i < 12; i++) cr_expect(im.px[3 * i] == g[i] && im.px[3 * i + 1] == g[i] && im.px[3 * i + 2] == g[i], "grey pixel %d", i);
    image_free(&im);
    uint8_t bits[2] = {0xA0, 0x40};   /* 1-bit rows: 1010, 0100 */
    write_png_raw(at("g1.png"), 4, 2, PNG_COLOR_TYPE_GRAY, 1, bits, 1, NULL, 0, NULL, 0, PNG_INTERLACE_NONE);
    im = load_ok(at("g1.png"));
    static const uint8_t want[8] = {255, 0, 255, 0, 0, 255, 0, 0};
    for (int i = 0; i < 8; i++) cr_expect(im.px[3 * i] == want[i] && im.px[3 * i + 2] == want[i], "1-bit pixel %d is %d", i, im.px[3 * i]);
    image_free(&im);
}

Test(image_io, png_alpha_is_dropped_not_composited) {
    uint8_t rgba[2 * 4] = {10, 20, 30, 0, 200, 100, 50, 128};
    write_png_raw(at("rgba.png"), 2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, rgba, 8, NULL, 0, NULL, 0, PNG_INTERLACE_NONE);
    Image im = load_ok(at("rgba.png"));
    static const uint8_t want[6] = {10, 20, 30, 200, 100, 50};
    cr_expect(memcmp(im.px, want, 6) == 0, "RGBA -> %d %d %d %d %d %d", im.px[0], im.px[1], im.px[2], im.px[3], im.px[4], im.px[5]);
    image_free(&im);
    uint8_t ga[2 * 2] = {77, 0, 200, 255};
    write_png_raw(at("ga.png"), 2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, ga, 4, NULL, 0, NULL, 0, PNG_INTERLACE_NONE);
    im = load_ok(at("ga.png"));
    cr_expect(im.px[0] == 77 && im.px[1] == 77 && im.px[2] == 77 && im.px[3] == 200 && im.px[5] == 200);
    image_free(&im);
}

Test(image_io, png_palette_with_transparency_becomes_rgb) {
    png_color pal[3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
    uint8_t trns[3] = {0, 128, 255};
    uint8_t idx[3] = {2, 0, 1};
    write_png_raw(at("pal.png"), 3, 1, PNG_COLOR_TYPE_PALETTE, 8, idx, 3, pal, 3, trns, 3, PNG_INTERLACE_NONE);
    Image im = load_ok(at("pal.png"));
    static const uint8_t want[9] = {0, 0, 255, 255, 0, 0, 0, 255, 0};
    cr_expect(memcmp(im.px, want, 9) == 0, "palette pixels differ");
    image_free(&im);
}

Test(image_io, png_16_bit_keeps_the_high_byte_and_interlace_works) {
    uint16_t rgb16[3 * 3 * 2];
    for (int i = 0; i < 18; i++) rgb16[i] = (uint16_t)(i * 3000 + 255);
    write_png_raw(at("c16.png"), 3, 2, PNG_COLOR_TYPE_RGB, 16, (const uint8_t *)rgb16, 3 * 3 * 2, NULL, 0, NULL, 0, PNG_INTERLACE_ADAM7);
    Image im = load_ok(at("c16.png"));
    cr_assert(im.w == 3 && im.h == 2);
    for (int i = 0; i < 18; i++) cr_expect(im.px[i] == rgb16[i] >> 8, "sample %d: %d, want %d", i, im.px[i], rgb16[i] >> 8);
    image_free(&im);
    uint16_t g16[2] = {0x1234, 0xFEDC};
    write_png_raw(at("g16.png"), 2, 1, PNG_COLOR_TYPE_GRAY, 16, (const uint8_t *)g16, 4, NULL, 0, NULL, 0, PNG_INTERLACE_NONE);
    im = load_ok(at("g16.png"));
    cr_expect(im.px[0] == 0x12 && im.px[2] == 0x12 && im.px[3] == 0xFE && im.px[5] == 0xFE);
    image_free(&im);
}

/* ------------------------------------------------------ JPEG variants */

Test(image_io, jpeg_exif_orientation_rotates_pixels_and_probe_size) {
    /* 40x20: left half red, right half blue; orientation 6 = rotate 90 CW */
    uint8_t px[40 * 20 * 3];
    for (int i = 0; i < 40 * 20; i++) {
        bool left = i % 40 < 20;
        px[3 * i] = left ? 255 : 0, px[3 * i + 1] = 0, px[3 * i + 2] = left ? 0 : 255;
    }
    static const unsigned char exif[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,
                                         0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
    unsigned long n;
    unsigned char *j = make_jpeg(40, 20, 3, px, exif, sizeof exif, 0, &n);
    spit(at("rot.jpg"), j, n);
    Image im = load_ok(at("rot.jpg"));
    cr_assert(im.w == 20 && im.h == 40, "got %dx%d", im.w, im.h);
    cr_expect(px_at(&im, 10, 5)[0] > 200 && px_at(&im, 10, 5)[2] < 60, "top should be red (the old left side)");
    cr_expect(px_at(&im, 10, 34)[2] > 200 && px_at(&im, 10, 34)[0] < 60, "bottom should be blue");
    int w, h;
    char err[512] = "";
    cr_assert(image_probe(at("rot.jpg"), &w, &h, err, sizeof err), "%s", err);
    cr_expect(w == 20 && h == 40, "probe %dx%d", w, h);
    image_free(&im);
    free(j);
}

Test(image_io, jpeg_cmyk_is_converted) {
    uint8_t px[8 * 8 * 4];
    for (int i = 0; i < 64; i++) px[4 * i] = 255, px[4 * i + 1] = 0, px[4 * i + 2] = 255, px[4 * i + 3] = 200;
    unsigned long n;
    unsigned char *j = make_jpeg(8, 8, 4, px, NULL, 0, 0, &n);
    Image im;
    char err[512] = "";
    cr_assert(image_decode(j, n, &im, err, sizeof err), "%s", err);
    cr_expect(abs(im.px[0] - 200) < 8 && im.px[1] < 8 && abs(im.px[2] - 200) < 8, "CMYK -> %d %d %d", im.px[0], im.px[1], im.px[2]);
    image_free(&im);
    free(j);
}

Test(image_io, probe_reads_past_a_long_header) {
    Image g = gradient(16, 12);
    unsigned long n;
    unsigned char *j = make_jpeg(16, 12, 3, g.px, NULL, 0, 5, &n);   /* 325 KB of APP2 first */
    cr_assert(n > 300000);
    spit(at("long.jpg"), j, n);
    int w, h;
    char err[512] = "";
    cr_assert(image_probe(at("long.jpg"), &w, &h, err, sizeof err), "%s", err);
    cr_expect(w == 16 && h == 12);
    /* bytes after the end marker: still a usable image */
    unsigned char *t = malloc(n + 7);
    cr_assert(t);
    memcpy(t, j, n);
    memcpy(t + n, "garbage", 7);
    spit(at("tail.jpg"), t, n + 7);
    cr_assert(image_probe(at("tail.jpg"), &w, &h, err, sizeof err), "%s", err);
    free(t);
    free(j);
    image_free(&g);
}

/* ---------------------------------------------------------- bad files */

Test(image_io, truncated_png_is_an_error_at_every_length) {
    Image im = pattern(9, 7, 3);
    char err[512] = "";
    cr_assert(image_write_png(at("t.png"), &im, err, sizeof err), "%s", err);
    size_t n;
    unsigned char *b = slurp(at("t.png"), &n);
    for (size_t k = 0; k < n; k++) {
        unsigned char *c = malloc(k ? k : 1);   /* exact size, so ASan sees overreads */
        cr_assert(c);
        memcpy(c, b, k);
        char what[48];
        snprintf(what, sizeof what, "first %zu bytes", k);
        expect_decode_error(c, k, k == 0 ? "empty" : k < 8 ? "not a JPEG or PNG" : "PNG", what);
        free(c);
    }
    spit(at("half.png"), b, n / 2);
    int w, h;
    expect_error(image_probe(at("half.png"), &w, &h, err, sizeof err), err, "half.png: bad PNG", "probe of a truncated PNG");
    free(b);
    image_free(&im);
}

Test(image_io, corrupt_png_crc_is_an_error) {
    Image im = pattern(8, 8, 5);
    char err[512] = "";
    cr_assert(image_write_png(at("c.png"), &im, err, sizeof err), "%s", err);
    size_t n;
    unsigned char *b = slurp(at("c.png"), &n);
    unsigned char *idat = NULL;
    for (size_t i = 0; !idat && i + 4 <= n; i++)
        if (memcmp(b + i, "IDAT", 4) == 0) idat = b + i;
    cr_assert(idat);
    idat[6] ^= 0x55;
    expect_decode_error(b, n, "bad PNG", "IDAT byte flipped");
    free(b);
    image_free(&im);
}

Test(image_io, truncated_and_corrupt_jpeg_are_errors) {
    Image g = gradient(32, 32);
    unsigned long n;
    unsigned char *j = make_jpeg(32, 32, 3, g.px, NULL, 0, 0, &n);
    for (size_t k = 3; k < n - 2; k += 7) {
        unsigned char *c = malloc(k);
        cr_assert(c);
        memcpy(c, j, k);
        char what[48];
        snprintf(what, sizeof what, "first %zu bytes", k);
        expect_decode_error(c, k, "JPEG", what);
        free(c);
    }
    spit(at("half.jpg"), j, n / 2);
    int w, h;
    char err[512] = "";
    expect_error(image_probe(at("half.jpg"), &w, &h, err, sizeof err), err, "truncated JPEG", "probe of a truncated JPEG");
    unsigned char *sof = NULL;
    for (unsigned long i = 0; i + 1 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) sof = j + i;
    cr_assert(sof);
    sof[4] ^= 0xFF;   /* the frame length */
    expect_decode_error(j, n, "bad JPEG", "frame header length broken");
    free(j);
    image_free(&g);
}

Test(image_io, wrong_magic_and_missing_files_are_errors) {
    expect_decode_error((const unsigned char *)"GIF89a\1\0\1\0", 10, "not a JPEG or PNG file", "GIF bytes");
    expect_decode_error((const unsigned char *)"", 0, "empty file", "no bytes");
    spit(at("x.png"), "hello, world", 12);
    Image im;
    char err[512] = "";
    expect_error(image_load(at("x.png"), &im, err, sizeof err), err, "x.png: not a JPEG or PNG file", "text named .png");
    int w, h;
    expect_error(image_probe(at("none.jpg"), &w, &h, err, sizeof err), err, "none.jpg: cannot open", "missing file");
    expect_error(image_load(dir, &im, err, sizeof err), err, "not a regular file", "a directory");
}

Test(image_io, huge_declared_sizes_are_refused) {
    Image im = pattern(4, 4, 9);
    char err[512] = "";
    cr_assert(image_write_png(at("s.png"), &im, err, sizeof err), "%s", err);
    size_t n;
    unsigned char *b = slurp(at("s.png"), &n);
    /* IHDR width = 100000, with a valid CRC so only the size is wrong */
    b[16] = 0, b[17] = 0x01, b[18] = 0x86, b[19] = 0xA0;
    png_crc_fix(b + 8, 13);
    expect_decode_error(b, n, "bad PNG", "PNG 100000 wide");
    spit(at("wide.png"), b, n);
    int w, h;
    expect_error(image_probe(at("wide.png"), &w, &h, err, sizeof err), err, "wide.png: bad PNG", "probe of a PNG 100000 wide");
    free(b);
    Image g = gradient(16, 16);
    unsigned long jn;
    unsigned char *j = make_jpeg(16, 16, 3, g.px, NULL, 0, 0, &jn);
    for (unsigned long i = 0; i + 8 < jn; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            j[i + 5] = 0xFD, j[i + 6] = 0xE8, j[i + 7] = 0xFD, j[i + 8] = 0xE8;   /* 65000 x 65000 */
            break;
        }
    expect_decode_error(j, jn, "the limit is 16384", "JPEG 65000 a side");
    free(j);
    image_free(&g);
    image_free(&im);
}

Test(image_io, write_errors_are_one_line) {
    Image im = pattern(4, 4, 2);
    char err[512] = "";
    expect_error(image_write_png(at("no/such/dir.png"), &im, err, sizeof err), err, "dir.png", "PNG into a missing directory");
    expect_error(image_write_jpeg(at("no/such/dir.jpg"), &im, 90, err, sizeof err), err, "dir.jpg", "JPEG into a missing directory");
    expect_error(image_write_jpeg(at("q.jpg"), &im, 0, err, sizeof err), err, "quality 0", "quality 0");
    Image empty = {0};
    expect_error(image_write_png(at("e.png"), &empty, err, sizeof err), err, "0x0", "empty image");
    struct stat st;
    cr_expect(stat(at("q.jpg"), &st) != 0, "a failed write left a file");
    image_free(&im);
}

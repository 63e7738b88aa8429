/* tests/test_augment.c — suite `augment`: runtime/rng.c and the transforms of
 * runtime/data/augment*.c against answers worked out by hand from
 * training-semantics §2.3-2.4 and §3.1 (letterbox geometry, bilinear resize,
 * mosaic placement, warp, box filter, HSV tables, flips, mixup). Owns these
 * tests only; touches no files. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../runtime/data/augment.h"
#include "../runtime/rng.h"

/* ---- helpers ---- */

static Image solid(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
    Image im = {w, h, malloc((size_t)w * h * 3)};
    cr_assert(im.px);
    for (int i = 0; i < w * h; i++) im.px[3 * i] = r, im.px[3 * i + 1] = g, im.px[3 * i + 2] = b;
    return im;
}

/* Deterministic texture so geometric tests see distinct pixels. */
static Image texture(int w, int h, uint32_t seed) {
    Image im = {w, h, malloc((size_t)w * h * 3)};
    cr_assert(im.px);
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < w * h * 3; i++) {
        x = x * 1664525u + 1013904223u;
        im.px[i] = (uint8_t)(x >> 24);
    }
    return im;
}

static const uint8_t *px_at(const Image *im, int x, int y) { return im->px + ((size_t)y * im->w + x) * 3; }

static void assert_px(const Image *im, int x, int y, int r, int g, int b) {
    const uint8_t *p = px_at(im, x, y);
    cr_assert(p[0] == r && p[1] == g && p[2] == b, "pixel (%d, %d) is (%d, %d, %d), expected (%d, %d, %d)", x, y, p[0], p[1], p[2], r, g, b);
}

static void assert_box(const Box *b, int cls, float x1, float y1, float x2, float y2) {
    cr_assert(b->cls == cls && fabsf(b->x1 - x1) < 1e-4f && fabsf(b->y1 - y1) < 1e-4f && fabsf(b->x2 - x2) < 1e-4f && fabsf(b->y2 - y2) < 1e-4f,
              "box %d (%g %g %g %g), expected %d (%g %g %g %g)", b->cls, b->x1, b->y1, b->x2, b->y2, cls, x1, y1, x2, y2);
}

static Boxes boxes_of(int n, const Box *b) {
    Boxes bx = {0};
    for (int i = 0; i < n; i++) cr_assert(boxes_push(&bx, b[i]));
    return bx;
}

static Hyp hyp_zero(void) { return (Hyp){0}; }

/* ---- rng ---- */

Test(augment, rng_is_deterministic_and_in_range) {
    Rng a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++) cr_assert_eq(rng_u64(&a), rng_u64(&b));
    double lo = 1, hi = 0;
    for (int i = 0; i < 10000; i++) {
        double u = rng_uniform(&a, 0.25, 0.75);
        cr_assert(u >= 0.25 && u < 0.75);
        lo = fmin(lo, u), hi = fmax(hi, u);
        cr_assert(rng_below(&a, 7) < 7);
    }
    cr_assert(lo < 0.26 && hi > 0.74, "uniform draws cover the range");
    cr_assert_eq(rng_below(&a, 0), 0);
    cr_assert_neq(rng_mix(1, 2), rng_mix(2, 1));
}

Test(augment, rng_beta_32_32_moments) {
    Rng r;
    rng_seed(&r, 7);
    double sum = 0, sq = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double x = rng_beta(&r, 32, 32);
        cr_assert(x > 0 && x < 1);
        sum += x, sq += x * x;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    /* Beta(32, 32): mean 1/2, variance 1/(4 * 65) */
    cr_assert(fabs(mean - 0.5) < 0.003, "mean %g", mean);
    cr_assert(fabs(var - 1.0 / 260) < 0.0003, "variance %g", var);
    double g = 0;
    for (int i = 0; i < n; i++) g += rng_gamma(&r, 0.5);
    cr_assert(fabs(g / n - 0.5) < 0.02, "Gamma(0.5) mean %g", g / n);
}

/* ---- resize ---- */

Test(augment, load_size_long_side) {
    int w, h;
    load_size(640, 480, 640, &w, &h);
    cr_assert(w == 640 && h == 480);
    load_size(1280, 960, 640, &w, &h);
    cr_assert(w == 640 && h == 480);
    load_size(100, 50, 64, &w, &h);
    cr_assert(w == 64 && h == 32);
    load_size(1000, 333, 640, &w, &h);   /* 333 * 0.64 = 213.12 -> ceil 214 */
    cr_assert(w == 640 && h == 214, "%dx%d", w, h);
    load_size(641, 480, 640, &w, &h);    /* ceil(641 * 640/641) may exceed 640: min() caps it */
    cr_assert(w == 640 && h == 480, "%dx%d", w, h);
    load_size(30, 20, 64, &w, &h);       /* upscale: 20 * 64/30 = 42.67 -> 43 */
    cr_assert(w == 64 && h == 43, "%dx%d", w, h);
}

Test(augment, resize_constant_stays_constant) {
    Image c = solid(37, 23, 200, 17, 255);
    int sizes[][2] = {{64, 40}, {13, 7}, {37, 23}, {18, 11}, {100, 3}, {1, 1}};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        Image o;
        cr_assert(image_resize_linear(&c, sizes[k][0], sizes[k][1], &o));
        cr_assert(o.w == sizes[k][0] && o.h == sizes[k][1]);
        for (int i = 0; i < o.w * o.h; i++) cr_assert(o.px[3 * i] == 200 && o.px[3 * i + 1] == 17 && o.px[3 * i + 2] == 255, "size %dx%d pixel %d", o.w, o.h, i);
        image_free(&o);
    }
    image_free(&c);
}

Test(augment, resize_2x2_gradient_by_hand) {
    /* 2x2 -> 4x4 with half-pixel centres: source positions -0.25, 0.25,
     * 0.75, 1.25 per axis, edges clamped; the fixed-point result equals the
     * exact bilinear values here. */
    Image g = solid(2, 2, 0, 0, 0);
    uint8_t v[4] = {0, 100, 200, 60};
    for (int i = 0; i < 4; i++) g.px[3 * i] = v[i], g.px[3 * i + 1] = v[i], g.px[3 * i + 2] = (uint8_t)(255 - v[i]);
    Image o;
    cr_assert(image_resize_linear(&g, 4, 4, &o));
    int want[4][4] = {{0, 25, 75, 100}, {50, 60, 80, 90}, {150, 130, 90, 70}, {200, 165, 95, 60}};
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++) assert_px(&o, x, y, want[y][x], want[y][x], 255 - want[y][x]);
    image_free(&o);
    /* an exact 2x downscale averages 2x2 blocks (rounded half up) */
    Image big = solid(4, 2, 0, 0, 0);
    uint8_t b[8] = {10, 20, 0, 1, 30, 41, 2, 2};
    for (int i = 0; i < 8; i++) big.px[3 * i] = big.px[3 * i + 1] = big.px[3 * i + 2] = b[i];
    cr_assert(image_resize_linear(&big, 2, 1, &o));
    assert_px(&o, 0, 0, 25, 25, 25);   /* (10 + 20 + 30 + 41 + 2) >> 2 */
    assert_px(&o, 1, 0, 1, 1, 1);      /* (0 + 1 + 2 + 2 + 2) >> 2 */
    image_free(&o);
    image_free(&big);
    image_free(&g);
}

/* ---- letterbox ---- */

static void check_geom(int w, int h, int ow, int oh, bool up, double r, int nw, int nh, int top, int bottom, int left, int right) {
    LetterboxGeom g = letterbox_geom(w, h, ow, oh, up);
    cr_assert(fabs(g.r - r) < 1e-12 && g.new_w == nw && g.new_h == nh && g.top == top && g.bottom == bottom && g.left == left && g.right == right,
              "%dx%d -> %dx%d: r %g, %dx%d, pads t%d b%d l%d r%d", w, h, ow, oh, g.r, g.new_w, g.new_h, g.top, g.bottom, g.left, g.right);
}

Test(augment, letterbox_geometry) {
    check_geom(640, 480, 640, 640, true, 1.0, 640, 480, 80, 80, 0, 0);
    check_geom(100, 50, 64, 64, true, 0.64, 64, 32, 16, 16, 0, 0);
    check_geom(640, 481, 640, 640, true, 1.0, 640, 481, 79, 80, 0, 0);   /* dh 79.5: round(79.4), round(79.6) */
    check_geom(8, 5, 4, 4, true, 0.5, 4, 2, 1, 1, 0, 0);                 /* 2.5 rounds half to even: 2 */
    check_geom(8, 7, 4, 4, true, 0.5, 4, 4, 0, 0, 0, 0);                 /* 3.5 -> 4 */
    check_geom(320, 240, 640, 640, false, 1.0, 320, 240, 200, 200, 160, 160);
    check_geom(320, 240, 640, 640, true, 2.0, 640, 480, 80, 80, 0, 0);
    check_geom(480, 640, 640, 640, true, 1.0, 480, 640, 0, 0, 80, 80);
    check_geom(639, 640, 640, 640, true, 1.0, 639, 640, 0, 0, 0, 1);     /* dw 0.5: round(0.4) = 0, round(0.6) = 1 */
}

Test(augment, letterbox_pixels_and_boxes) {
    Image src = solid(100, 50, 10, 20, 30), dst;
    Boxes bx = boxes_of(1, (Box[]){{3, 10, 20, 30, 40}});
    LetterboxGeom g;
    cr_assert(letterbox(&src, &bx, 64, 64, true, &dst, &g));
    cr_assert(dst.w == 64 && dst.h == 64);
    assert_px(&dst, 0, 0, 114, 114, 114);
    assert_px(&dst, 63, 15, 114, 114, 114);
    assert_px(&dst, 0, 16, 10, 20, 30);
    assert_px(&dst, 63, 47, 10, 20, 30);
    assert_px(&dst, 30, 48, 114, 114, 114);
    /* scaled by 0.64, shifted down by 16 */
    assert_box(&bx.b[0], 3, 6.4f, 28.8f, 19.2f, 41.6f);
    image_free(&dst);
    image_free(&src);
    boxes_free(&bx);
}

/* ---- mosaic ---- */

Test(augment, mosaic_placement_by_hand) {
    /* s = 64 (canvas 128), centre (50, 40):
     * tile 0 64x64 red  : canvas (0,0)-(50,40), tile offset (14,24), shift (-14,-24)
     * tile 1 40x30 green: canvas (50,10)-(90,40), shift (50,10)
     * tile 2 30x100 blue: canvas (20,40)-(50,128), bottom cropped, shift (20,40)
     * tile 3 100x20 white: canvas (50,40)-(128,60), right cropped, shift (50,40) */
    Image t0 = solid(64, 64, 255, 0, 0), t1 = solid(40, 30, 0, 255, 0), t2 = solid(30, 100, 0, 0, 255), t3 = solid(100, 20, 255, 255, 255);
    Boxes b0 = boxes_of(2, (Box[]){{0, 0, 0, 20, 30}, {5, 0, 0, 10, 20}});
    Boxes b1 = boxes_of(1, (Box[]){{1, 5, 5, 15, 25}});
    Boxes b2 = boxes_of(1, (Box[]){{2, 0, 90, 30, 100}});
    Boxes b3 = boxes_of(2, (Box[]){{6, 90, 0, 100, 20}, {3, 70, 5, 95, 15}});
    const Image *tiles[4] = {&t0, &t1, &t2, &t3};
    const Boxes *bxs[4] = {&b0, &b1, &b2, &b3};
    Image m;
    Boxes out = {0};
    cr_assert(mosaic4_at(tiles, bxs, 64, 50, 40, &m, &out));
    cr_assert(m.w == 128 && m.h == 128);
    assert_px(&m, 0, 0, 255, 0, 0);
    assert_px(&m, 49, 39, 255, 0, 0);
    assert_px(&m, 50, 10, 0, 255, 0);
    assert_px(&m, 89, 39, 0, 255, 0);
    assert_px(&m, 90, 20, 114, 114, 114);
    assert_px(&m, 60, 5, 114, 114, 114);
    assert_px(&m, 20, 40, 0, 0, 255);
    assert_px(&m, 49, 127, 0, 0, 255);
    assert_px(&m, 19, 100, 114, 114, 114);
    assert_px(&m, 50, 40, 255, 255, 255);
    assert_px(&m, 127, 59, 255, 255, 255);
    assert_px(&m, 127, 60, 114, 114, 114);
    /* shifted, clipped to the canvas, zero-area ones dropped, tile order kept */
    cr_assert_eq(out.n, 3);
    assert_box(&out.b[0], 0, 0, 0, 6, 6);
    assert_box(&out.b[1], 1, 55, 15, 65, 35);
    assert_box(&out.b[2], 3, 120, 45, 128, 55);
    image_free(&m);
    boxes_free(&out);
    Image *all[4] = {&t0, &t1, &t2, &t3};
    Boxes *ball[4] = {&b0, &b1, &b2, &b3};
    for (int i = 0; i < 4; i++) image_free(all[i]), boxes_free(ball[i]);
}

Test(augment, mosaic_centre_range) {
    Image t = solid(32, 32, 1, 2, 3);
    Boxes none = {0};
    const Image *tiles[4] = {&t, &t, &t, &t};
    const Boxes *bxs[4] = {&none, &none, &none, &none};
    Rng r;
    rng_seed(&r, 3);
    for (int k = 0; k < 200; k++) {
        Rng probe = r;
        int yc = (int)rng_uniform(&probe, 32, 96), xc = (int)rng_uniform(&probe, 32, 96);
        cr_assert(xc >= 32 && xc < 96 && yc >= 32 && yc < 96);
        Image m;
        Boxes out = {0};
        cr_assert(mosaic4(&r, tiles, bxs, 64, &m, &out));
        /* the four 32x32 tiles meet at (xc, yc): the pixel there is tile 3's */
        assert_px(&m, xc, yc, 1, 2, 3);
        assert_px(&m, xc - 33 < 0 ? 0 : xc - 33, yc, xc - 33 < 0 ? 1 : 114, xc - 33 < 0 ? 2 : 114, xc - 33 < 0 ? 3 : 114);
        image_free(&m);
        boxes_free(&out);
    }
    cr_assert(!mosaic4_at(tiles, bxs, 64, 129, 10, &(Image){0}, &none), "centre outside the canvas is refused");
    image_free(&t);
}

/* ---- perspective ---- */

Test(augment, perspective_identity_equals_letterbox) {
    Image src = texture(50, 30, 1), lb;
    Boxes bx = boxes_of(1, (Box[]){{2, 5, 5, 25, 20}});
    cr_assert(letterbox(&src, &bx, 64, 64, true, &lb, NULL));
    Boxes want = boxes_of(1, bx.b);
    Hyp h = hyp_zero();
    Rng r;
    rng_seed(&r, 9);
    Image out;
    cr_assert(random_perspective(&r, &h, &lb, &bx, 64, 64, &out));
    cr_assert(out.w == 64 && out.h == 64);
    cr_assert(memcmp(out.px, lb.px, 64 * 64 * 3) == 0);
    cr_assert_eq(bx.n, 1);
    assert_box(&bx.b[0], 2, want.b[0].x1, want.b[0].y1, want.b[0].x2, want.b[0].y2);
    /* the same through the warp itself: whole-pixel positions copy exactly */
    double I[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    Image w;
    cr_assert(warp_image(&lb, I, false, 64, 64, &w));
    cr_assert(memcmp(w.px, lb.px, 64 * 64 * 3) == 0);
    image_free(&w);
    cr_assert(warp_image(&lb, I, true, 64, 64, &w));
    cr_assert(memcmp(w.px, lb.px, 64 * 64 * 3) == 0);
    image_free(&w);
    image_free(&out);
    image_free(&lb);
    image_free(&src);
    boxes_free(&bx);
    boxes_free(&want);
}

Test(augment, warp_translation_and_border) {
    Image src = texture(20, 10, 2), dst;
    double M[9] = {1, 0, 5, 0, 1, 3, 0, 0, 1};   /* dst(x, y) = src(x - 5, y - 3) */
    cr_assert(warp_image(&src, M, false, 30, 16, &dst));
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 30; x++) {
            int sx = x - 5, sy = y - 3;
            if (sx >= 0 && sx < 20 && sy >= 0 && sy < 10) {
                const uint8_t *p = px_at(&src, sx, sy);
                assert_px(&dst, x, y, p[0], p[1], p[2]);
            } else {
                assert_px(&dst, x, y, 114, 114, 114);
            }
        }
    image_free(&dst);
    /* a half-pixel shift of a two-valued row averages neighbours */
    Image two = solid(2, 1, 0, 100, 200);
    two.px[3] = 100, two.px[4] = 200, two.px[5] = 0;
    double H[9] = {1, 0, -0.5, 0, 1, 0, 0, 0, 1};
    cr_assert(warp_image(&two, H, false, 1, 1, &dst));
    assert_px(&dst, 0, 0, 50, 150, 100);
    image_free(&dst);
    image_free(&two);
    image_free(&src);
}

Test(augment, perspective_matrix_scale_about_centre) {
    /* no rotation, shear or perspective: M = T R(sc) C maps the input centre
     * to the drawn translation point and scales lengths by the drawn scale */
    Hyp h = hyp_zero();
    h.scale = 0.5f;
    h.translate = 0.1f;
    Rng r;
    rng_seed(&r, 5);
    double M[9], sc;
    perspective_matrix(&r, &h, 128, 128, 64, 64, M, &sc);
    cr_assert(sc >= 0.5 && sc < 1.5);
    cr_assert(fabs(M[0] - sc) < 1e-6 && fabs(M[4] - sc) < 1e-6 && fabs(M[1]) < 1e-9 && fabs(M[3]) < 1e-9);
    double cx = M[0] * 64 + M[2], cy = M[4] * 64 + M[5];
    cr_assert(cx >= 0.4 * 64 - 1e-3 && cx <= 0.6 * 64 + 1e-3 && cy >= 0.4 * 64 - 1e-3 && cy <= 0.6 * 64 + 1e-3, "centre to (%g, %g)", cx, cy);
    cr_assert(M[6] == 0 && M[7] == 0 && M[8] == 1);
}

Test(augment, box_candidate_rules) {
    Box before = {0, 0, 0, 100, 100};
    cr_assert(!box_candidate(&before, &(Box){0, 0, 0, 2, 50}), "w must exceed 2");
    cr_assert(!box_candidate(&(Box){0, 0, 0, 3, 3}, &(Box){0, 0, 0, 3, 2}), "h must exceed 2");
    cr_assert(box_candidate(&(Box){0, 0, 0, 3, 3}, &(Box){0, 0, 0, 3, 3}));
    cr_assert(!box_candidate(&before, &(Box){0, 0, 0, 31, 31}), "961/10000 < 0.1");
    cr_assert(box_candidate(&before, &(Box){0, 0, 0, 32, 32}), "1024/10000 > 0.1");
    cr_assert(!box_candidate(&(Box){0, 0, 0, 300, 3}, &(Box){0, 0, 0, 300, 3}), "aspect 100 is too much");
    cr_assert(box_candidate(&(Box){0, 0, 0, 299, 3}, &(Box){0, 0, 0, 299, 3}));
}

Test(augment, boxes_warp_transform_clip_filter) {
    Boxes bx = boxes_of(3, (Box[]){{0, 10, 10, 20, 20}, {1, 28, 0, 40, 10}, {2, 0, 0, 1, 1}});
    /* scale 2 about the origin, then shift (-10, 5) */
    double M[9] = {2, 0, -10, 0, 2, 5, 0, 0, 1};
    cr_assert(boxes_warp(&bx, M, false, 64, 64, 2.0));
    /* box 0 -> (10,25)-(30,45); box 1 -> (46,5)-(70,25) clipped to 64: kept
     * (area 18*20 / (24*20) = 0.75); box 2 -> 2x2: dropped */
    cr_assert_eq(bx.n, 2);
    assert_box(&bx.b[0], 0, 10, 25, 30, 45);
    assert_box(&bx.b[1], 1, 46, 5, 64, 25);
    boxes_free(&bx);
    /* a 90-degree rotation maps corners to corners */
    Boxes r = boxes_of(1, (Box[]){{4, 10, 20, 30, 25}});
    double R[9] = {0, 1, 0, -1, 0, 64, 0, 0, 1};   /* (x, y) -> (y, 64 - x) */
    cr_assert(boxes_warp(&r, R, false, 64, 64, 1.0));
    cr_assert_eq(r.n, 1);
    assert_box(&r.b[0], 4, 20, 34, 25, 54);
    boxes_free(&r);
}

Test(augment, random_perspective_defaults_keep_boxes_inside) {
    Hyp h = hyp_defaults();
    h.degrees = 10, h.shear = 5, h.perspective = 0.0005f;
    Rng r;
    rng_seed(&r, 11);
    for (int k = 0; k < 20; k++) {
        Image src = texture(128, 128, (uint32_t)k), out;
        Boxes bx = boxes_of(2, (Box[]){{0, 10, 10, 60, 70}, {1, 64, 64, 120, 100}});
        cr_assert(random_perspective(&r, &h, &src, &bx, 64, 64, &out));
        cr_assert(out.w == 64 && out.h == 64);
        for (int i = 0; i < bx.n; i++) {
            const Box *b = &bx.b[i];
            cr_assert(b->x1 >= 0 && b->y1 >= 0 && b->x2 <= 64 && b->y2 <= 64 && b->x2 - b->x1 > 2 && b->y2 - b->y1 > 2);
        }
        image_free(&out);
        image_free(&src);
        boxes_free(&bx);
    }
}

/* ---- colour ---- */

Test(augment, hsv_luts_by_hand) {
    uint8_t lut[3][256];
    hsv_luts((double[]){1, 1, 1}, lut);
    for (int x = 0; x < 256; x++) {
        cr_assert_eq(lut[0][x], x % 180, "hue %d", x);
        cr_assert_eq(lut[1][x], x);
        cr_assert_eq(lut[2][x], x);
    }
    hsv_luts((double[]){1.01, 1.5, 0.5}, lut);
    cr_assert_eq(lut[0][100], 101);   /* 101.0 */
    cr_assert_eq(lut[0][179], 0);     /* 180.79 mod 180 = 0.79 -> 0 */
    cr_assert_eq(lut[1][100], 150);
    cr_assert_eq(lut[1][200], 255);   /* clipped */
    cr_assert_eq(lut[2][201], 100);   /* 100.5 truncated */
}

Test(augment, hsv_apply_known_colours) {
    /* red, green, blue, black, white survive the identity tables unchanged */
    uint8_t lut[3][256];
    hsv_luts((double[]){1, 1, 1}, lut);
    int c[5][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {0, 0, 0}, {255, 255, 255}};
    Image im = solid(5, 1, 0, 0, 0);
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 3; k++) im.px[3 * i + k] = (uint8_t)c[i][k];
    hsv_apply(&im, lut);
    for (int i = 0; i < 5; i++) assert_px(&im, i, 0, c[i][0], c[i][1], c[i][2]);
    /* saturation 0 turns pure red into V grey; halving V gives 127 */
    hsv_luts((double[]){1, 0, 1}, lut);
    Image red = solid(1, 1, 255, 0, 0);
    hsv_apply(&red, lut);
    assert_px(&red, 0, 0, 255, 255, 255);
    image_free(&red);
    red = solid(1, 1, 255, 0, 0);
    hsv_luts((double[]){1, 1, 0.5}, lut);
    hsv_apply(&red, lut);
    assert_px(&red, 0, 0, 127, 0, 0);
    image_free(&red);
    /* zero gains: nothing drawn, nothing changed */
    Image t = texture(8, 8, 4);
    Image copy = texture(8, 8, 4);
    Rng r, r0;
    rng_seed(&r, 1);
    r0 = r;
    random_hsv(&r, 0, 0, 0, &t);
    cr_assert(memcmp(t.px, copy.px, 8 * 8 * 3) == 0);
    cr_assert(memcmp(&r, &r0, sizeof r) == 0);
    image_free(&t);
    image_free(&copy);
    image_free(&im);
}

/* ---- flips, mixup ---- */

Test(augment, flips_mirror_image_and_boxes) {
    Image im = texture(4, 3, 5), orig = texture(4, 3, 5);
    Boxes bx = boxes_of(1, (Box[]){{7, 1, 0.5f, 2, 2}});
    flip_lr(&im, &bx);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) cr_assert(memcmp(px_at(&im, x, y), px_at(&orig, 3 - x, y), 3) == 0);
    assert_box(&bx.b[0], 7, 2, 0.5f, 3, 2);
    flip_ud(&im, &bx);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) cr_assert(memcmp(px_at(&im, x, y), px_at(&orig, 3 - x, 2 - y), 3) == 0);
    assert_box(&bx.b[0], 7, 2, 1, 3, 2.5f);
    flip_ud(&im, &bx);
    flip_lr(&im, &bx);
    cr_assert(memcmp(im.px, orig.px, 4 * 3 * 3) == 0);
    assert_box(&bx.b[0], 7, 1, 0.5f, 2, 2);
    image_free(&im);
    image_free(&orig);
    boxes_free(&bx);
}

Test(augment, mixup_blends_and_concatenates) {
    Image a = solid(3, 2, 200, 0, 255), b = solid(3, 2, 100, 255, 0);
    Boxes ba = boxes_of(1, (Box[]){{0, 0, 0, 1, 1}}), bb = boxes_of(2, (Box[]){{1, 1, 1, 2, 2}, {2, 0, 0, 3, 2}});
    cr_assert(mixup(&a, &ba, &b, &bb, 0.25));
    assert_px(&a, 2, 1, 125, 191, 63);   /* 50 + 75; 0 + 191.25; 63.75 + 0, truncated */
    cr_assert_eq(ba.n, 3);
    assert_box(&ba.b[1], 1, 1, 1, 2, 2);
    assert_box(&ba.b[2], 2, 0, 0, 3, 2);
    Image c = solid(2, 2, 0, 0, 0);
    cr_assert(!mixup(&a, &ba, &c, &bb, 0.5), "sizes must match");
    image_free(&a);
    image_free(&b);
    image_free(&c);
    boxes_free(&ba);
    boxes_free(&bb);
}

Test(augment, clip_and_drop_empty) {
    Boxes bx = boxes_of(3, (Box[]){{0, -5, -5, 5, 5}, {1, 20, 0, 30, 5}, {2, 3, 3, 3, 8}});
    boxes_clip(&bx, 10, 10);
    assert_box(&bx.b[0], 0, 0, 0, 5, 5);
    assert_box(&bx.b[1], 1, 10, 0, 10, 5);
    boxes_drop_empty(&bx);
    cr_assert_eq(bx.n, 1);
    assert_box(&bx.b[0], 0, 0, 0, 5, 5);
    boxes_free(&bx);
    Hyp d = hyp_defaults();
    cr_assert(d.hsv_h == 0.015f && d.hsv_s == 0.7f && d.hsv_v == 0.4f && d.translate == 0.1f && d.scale == 0.5f && d.fliplr == 0.5f && d.mosaic == 1 && d.mixup == 0);
}

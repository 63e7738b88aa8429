/* runtime/data/augment.h — Ultralytics' training transform chain on one
 * sample (training-semantics §2.3-2.4, §3.1): load-time resize, letterbox,
 * mosaic, random perspective, mixup, HSV, flips. Pure functions of their
 * inputs and an explicit random stream; no files, no threads.
 * Boxes here are pixel xyxy in the image they belong to. */
#ifndef YOLOCC_AUGMENT_H
#define YOLOCC_AUGMENT_H
#include <stdbool.h>
#include <stdint.h>

#include "../rng.h"
#include "image.h"

typedef struct Hyp {
    float hsv_h, hsv_s, hsv_v;
    float degrees, translate, scale, shear, perspective;
    float flipud, fliplr;
    float mosaic, mixup;
} Hyp;

/* Ultralytics' defaults (cfg/default.yaml): hsv 0.015/0.7/0.4, degrees 0,
 * translate 0.1, scale 0.5, shear 0, perspective 0, flipud 0, fliplr 0.5,
 * mosaic 1, mixup 0. */
Hyp hyp_defaults(void);

/* The random stream (Rng, rng_seed, rng_u64, rng_uniform, ...) is
 * runtime/rng.h: the same seed gives the same sequence on every machine. */

typedef struct Box {
    int cls;
    float x1, y1, x2, y2;
} Box;

typedef struct Boxes {
    Box *b;
    int n, cap;
} Boxes;

/* ------------------------------------------------------------ boxes */

/* Appends one box, growing the array; false when out of memory. */
bool boxes_push(Boxes *bs, Box b);
void boxes_free(Boxes *bs);
/* Clips every box to [0, w] x [0, h] (Instances.clip). */
void boxes_clip(Boxes *bs, float w, float h);
/* Drops boxes whose area is not positive, keeping the order. */
void boxes_drop_empty(Boxes *bs);

/* ------------------------------------------------------------ resize */

/* cv::resize(INTER_LINEAR) on 8-bit RGB: half-pixel centres, edge rows and
 * columns repeated, 11-bit fixed-point weights; an exact 2x downscale in both
 * directions averages 2x2 blocks, as OpenCV switches to INTER_AREA there.
 * dst receives a new image; false when out of memory or a size is < 1. */
bool image_resize_linear(const Image *src, int w, int h, Image *dst);
/* Load-time size (training-semantics 2.3): long side = imgsz,
 * w = min(ceil(w0 r), imgsz) with r = imgsz / max(w0, h0). */
void load_size(int w0, int h0, int imgsz, int *w, int *h);
/* Resizes *im in place to load_size(); unchanged when r = 1. */
bool load_resize(Image *im, int imgsz);

/* ------------------------------------------------------------ letterbox */

typedef struct LetterboxGeom {
    double r;                      /* scale applied to the input */
    int new_w, new_h;              /* size after scaling, before padding */
    int top, bottom, left, right;  /* padding, in output pixels */
} LetterboxGeom;

/* LetterBox geometry (3.1): centred, no stride rounding, half-even rounding
 * of the scaled size, padding round(d -/+ 0.1). */
LetterboxGeom letterbox_geom(int w, int h, int out_w, int out_h, bool scaleup);
/* Scales and pads src with 114 into dst; boxes (may be NULL) scaled by r
 * and shifted by (left, top). */
bool letterbox(const Image *src, Boxes *bx, int out_w, int out_h, bool scaleup, Image *dst, LetterboxGeom *g);

/* ------------------------------------------------------------ mosaic */

/* Mosaic of 4 tiles on a 2s x 2s canvas of 114 with the centre given: tile 0
 * ends at (xc, yc), 1 starts right of it, 2 below it, 3 diagonally; each is
 * cropped to the canvas. Boxes are shifted with their tile, concatenated in
 * tile order, clipped to the canvas; zero-area boxes are dropped. */
bool mosaic4_at(const Image *const tiles[4], const Boxes *const boxes[4], int s, int xc, int yc, Image *dst, Boxes *out);
/* Draws yc, then xc, each int(U(s/2, 3s/2)) as upstream, then mosaic4_at. */
bool mosaic4(Rng *r, const Image *const tiles[4], const Boxes *const boxes[4], int s, Image *dst, Boxes *out);

/* ------------------------------------------------------------ perspective */

/* Draws M = T S R P C (2.4 step 3) for an in_w x in_h input warped into
 * out_w x out_h, in upstream's draw order: perspective x, y; angle; scale;
 * shear x, y; translate x, y. *scale receives the isotropic scale. */
void perspective_matrix(Rng *r, const Hyp *h, int in_w, int in_h, int out_w, int out_h, double M[9], double *scale);
/* cv::warpAffine / warpPerspective (INTER_LINEAR, border 114) of src by the
 * forward map M into out_w x out_h: 1/32-pixel source positions and 15-bit
 * weights like OpenCV. perspective false uses the first two rows only. */
bool warp_image(const Image *src, const double M[9], bool perspective, int out_w, int out_h, Image *dst);
/* Ultralytics box_candidates: before is the original box scaled by the
 * draw's scale; w, h > 2 px, area ratio > 0.1, aspect < 100. */
bool box_candidate(const Box *before, const Box *after);
/* Maps every box's 4 corners by M, takes their bounds, clips to the output
 * and keeps the box_candidate ones (each original scaled by scale). */
bool boxes_warp(Boxes *bx, const double M[9], bool perspective, int out_w, int out_h, double scale);
/* RandomPerspective on an already prepared input (the mosaic canvas, or a
 * letterboxed image): draw, warp into out_w x out_h, transform the boxes.
 * No warp, only a copy, when M is the identity and the size is unchanged. */
bool random_perspective(Rng *r, const Hyp *h, const Image *src, Boxes *bx, int out_w, int out_h, Image *dst);

/* ------------------------------------------------------------ mixup, colour, flips */

/* img = uint8(a r + b (1 - r)) in place on a (same sizes); b's boxes are
 * appended to a's. */
bool mixup(Image *a, Boxes *abx, const Image *b, const Boxes *bbx, double r);
/* The lookup tables of RandomHSV for gains g (hue, saturation, value):
 * H' = (x g0) mod 180, S' = clip(x g1), V' = clip(x g2), truncated. */
void hsv_luts(const double g[3], uint8_t lut[3][256]);
/* OpenCV's 8-bit RGB -> HSV (H in 0..179), the tables, and back. */
void hsv_apply(Image *im, const uint8_t lut[3][256]);
/* RandomHSV: gains U(-1, 1) * (hgain, sgain, vgain) + 1, drawn h, s, v;
 * nothing drawn or changed when all three are 0. */
void random_hsv(Rng *r, float hgain, float sgain, float vgain, Image *im);
/* Mirror image and boxes: x -> w - x (lr), y -> h - y (ud). */
void flip_lr(Image *im, Boxes *bx);
void flip_ud(Image *im, Boxes *bx);

#endif

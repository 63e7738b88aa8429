/* tests/test_emul_operand.h — library-kernel operands as the device would hold them, for the
 * emulated-kernel suites (test_attention_emul.c, test_attention_gemm.c): images as views with
 * gaps, NCHW or channels last, poisoned red zones, random inputs and their packed NCHW
 * reference. Test helpers only. */
#ifndef YOLOCC_TEST_EMUL_OPERAND_H
#define YOLOCC_TEST_EMUL_OPERAND_H
#include <stdint.h>

#include "../runtime/cuda/cuda_convert.h"
#include "test_emul.h"

enum { RZ = 32, GAP = 7 };

static inline size_t esz(DType d) { return d == DT_F32 ? 4 : 2; }

static inline uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* poison of gaps, red zones and the scratch: a NaN no kernel writes */
static const uint16_t POISON16 = 0x7fd5;
static const uint32_t POISON32 = 0x7fc0dead;
static inline void poison_at(DType d, unsigned char *p) { d == DT_F32 ? memcpy(p, &POISON32, 4) : memcpy(p, &POISON16, 2); }
static inline bool poisoned_at(DType d, const unsigned char *p) { return d == DT_F32 ? !memcmp(p, &POISON32, 4) : !memcmp(p, &POISON16, 2); }

/* One operand as the device holds it: images `bs` apart (per + GAP for a
 * view, else per), poison between them and RZ elements either side; each
 * image NCHW or (cl) channels last, c channels over planes of `plane`. */
typedef struct Operand {
    DType dt;
    int64_t per, bs, span, nimg, c, plane;
    bool cl;
    unsigned char *base, *at;
} Operand;

/* index in the packed NCHW reference of stored element e */
static inline int64_t ref_index(const Operand *b, int64_t e) { return e / b->bs * b->per + emul_logical(b->cl, b->c, b->plane, e % b->bs); }

static inline bool in_view(const Operand *b, int64_t e) { return e >= 0 && e < b->span && e % b->bs < b->per; }

/* Allocates and poisons b (shape s); inputs get values uniform in [-1, 1), and ref (packed NCHW fp32) the stored values. */
static inline void operand_open(Operand *b, DType dt, const Shape *s, bool gap, bool cl, bool input, float *ref, uint64_t *seed) {
    int64_t nimg = s->d[0];
    *b = (Operand){.dt = dt, .per = shape_numel(s) / nimg, .nimg = nimg, .c = s->d[1], .plane = s->d[2] * s->d[3], .cl = cl};
    b->bs = b->per + (gap ? GAP : 0);
    b->span = (nimg - 1) * b->bs + b->per;
    b->base = malloc((size_t)(b->span + 2 * RZ) * esz(dt));
    cr_assert_not_null(b->base);
    b->at = b->base + RZ * esz(dt);
    for (int64_t e = -RZ; e < b->span + RZ; e++) {
        unsigned char *p = b->at + e * (int64_t)esz(dt);
        if (!input || !in_view(b, e)) {
            poison_at(dt, p);
            continue;
        }
        float x = (float)((double)(rnd(seed) >> 40) * (2.0 / 16777216.0) - 1.0);
        cuda_f32_to_storage(dt, &x, p, 1);
        cuda_storage_to_f32(dt, p, &ref[ref_index(b, e)], 1);
    }
}

#endif

/* ir/plan_codec.h — one codec for plan bytes: the same calls write (growing a
 * buffer) or read (bounds-checked, errors name the file offset), so the field
 * lists of the plan format exist once. Knows the format of shapes and op
 * attributes; the section layout is in plan_format.h. */
#ifndef YOLOCC_PLAN_CODEC_H
#define YOLOCC_PLAN_CODEC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir.h"

typedef struct PlanCodec {
    bool reading;
    /* writing */
    unsigned char *out;
    size_t len, cap;
    /* reading: in[0..in_len) lies at file offset base */
    const unsigned char *in;
    size_t in_len, pos;
    uint64_t base;
    bool failed;
    char err[256];
} PlanCodec;

void pc_writer(PlanCodec *c);
void pc_reader(PlanCodec *c, const unsigned char *in, size_t len, uint64_t file_offset);
void pc_free(PlanCodec *c);
/* Records the first error ("offset N: MSG"); returns false. */
bool pc_fail(PlanCodec *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* writer only: raw bytes (a nested payload) */
bool pc_append(PlanCodec *c, const unsigned char *bytes, size_t n);
bool pc_u8(PlanCodec *c, uint8_t *v, const char *what);
bool pc_u32(PlanCodec *c, uint32_t *v, const char *what);
bool pc_i32(PlanCodec *c, int32_t *v, const char *what);
bool pc_u64(PlanCodec *c, uint64_t *v, const char *what);
bool pc_i64(PlanCodec *c, int64_t *v, const char *what);
bool pc_f64(PlanCodec *c, double *v, const char *what);
/* an int field with a range checked on read */
bool pc_int(PlanCodec *c, int *v, int lo, int hi, const char *what);
bool pc_shape(PlanCodec *c, Shape *s, const char *what);
/* every OpAttrs field, ranges checked on read so later arithmetic cannot overflow */
bool pc_attrs(PlanCodec *c, OpAttrs *a);

#endif

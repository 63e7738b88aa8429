/* ir/plan_format.h — the plan file format (v5), shared by the writer
 * (compiler/plan_write.c) and the reader (runtime/plan_read.c).
 *
 * Little-endian throughout. Layout:
 *   header   magic "YOLOCCPL" (8), u32 version, u32 section count, u64 file size
 *   table    per section: u32 id, u32 zero, u64 offset, u64 length, u32 crc32, u32 zero
 *   payloads in table order, each starting where its table entry says
 * Sections:
 *   META     JSON object: model, shapes, and which tensors are the trainer's inputs/outputs
 *   STRINGS  NUL-terminated strings; other sections refer to them by byte offset
 *   TENSORS  u32 count, then per tensor: u8 kind, u8 dtype, u8 nd, u8 frozen,
 *            u8 init, u8[3] zero, u32 name (string offset or PLAN_NO_STRING),
 *            u32 zero, f64 init_arg, i64 dims[6]  (72 bytes)
 *   OPS      u32 count, then per op: u32 kind, u32 n_in, u32 n_out, i32 row,
 *            u32 scope, attributes (plan_attrs in plan_write.c / plan_read.c,
 *            a fixed field list), i32 inputs[n_in], i32 outputs[n_out]
 *   GRAPH    u32 n, i32[n] graph inputs; u32 n, i32[n] outputs; u32 n, i32[n] state order
 *   MEMPLAN  u32 precision (0 fp32, 1 bf16, 2 fp16), u32 zero, u64 arena bytes,
 *            u32 tensor count, u32 zero, i64 offset per tensor in the step
 *            arena (-1: its own persistent storage; -2: internal to its fusion
 *            group, no storage); u32 view count, u32 zero, then per view
 *            (passes/views.h): i32 tensor, i32 base, i64 first channel; a
 *            view's offset is its slice's within its base's bytes
 *   EVAL     empty, or (training plans) the validation graph as a complete
 *            plan of its own (kind "eval", whose EVAL section is empty)
 *   GROUPS   u32 count, then per fusion group: u32 kind, u32 pattern, u32 first
 *            op, u32 op count (passes/fuse.h); the groups partition the ops
 *   KERNELS  empty (the reference interpreter runs the plan), or the compiled
 *            kernels: u32 index length, a JSON index (target, kernel names,
 *            per-blob offset/bytes), then the blobs: the CPU target's shared
 *            object, or per CUDA kernel a cubin per architecture and PTX
 *            (compiler/codegen.h)
 * Op outputs are numbered as the graph numbers them: the ops, replayed in
 * order, recreate every activation tensor id, and its layout (ir.h,
 * Tensor.channels_last: from a reshape's flag, else its inputs'). */
#ifndef YOLOCC_PLAN_FORMAT_H
#define YOLOCC_PLAN_FORMAT_H
#include <stdint.h>

#define PLAN_MAGIC "YOLOCCPL"
enum {
    PLAN_VERSION = 5,
    PLAN_HEADER_BYTES = 24,
    PLAN_ENTRY_BYTES = 32,
    PLAN_MAX_SECTIONS = 16,
    PLAN_TENSOR_BYTES = 72,
};
enum { PLAN_SEC_META = 1, PLAN_SEC_STRINGS = 2, PLAN_SEC_TENSORS = 3, PLAN_SEC_OPS = 4, PLAN_SEC_GRAPH = 5, PLAN_SEC_MEMPLAN = 6, PLAN_SEC_EVAL = 7, PLAN_SEC_GROUPS = 8, PLAN_SEC_KERNELS = 9, PLAN_SECTIONS = 9 };
#define PLAN_NO_STRING 0xFFFFFFFFu
/* limits the reader enforces before allocating */
#define PLAN_MAX_BYTES ((uint64_t)1 << 32)
#define PLAN_MAX_META_BYTES (1u << 20)

#endif

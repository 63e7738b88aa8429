/* compiler/codegen.h — the code generation stage: lowers a step's fusion
 * groups (kernel_lower.c), renders them, compiles them (system C compiler for
 * the CPU target, NVRTC per architecture for CUDA) through the disk cache,
 * and packs the result as a plan's KERNELS section. Knows no runtime. */
#ifndef YOLOCC_CODEGEN_H
#define YOLOCC_CODEGEN_H
#include <cjson/cJSON.h>

#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "kernel_ir.h"

enum { CODEGEN_MAX_ARCHS = 8 };

typedef enum { TARGET_CPU, TARGET_CUDA } CodegenTarget;

typedef struct CodegenOptions {
    CodegenTarget target;
    int n_archs;
    char archs[CODEGEN_MAX_ARCHS][16];  /* CUDA: "sm_80", ... */
    const char *emit_src_dir;           /* NULL, or a directory for every generated source */
    const char *tag;                    /* "train" / "eval": names emitted files */
} CodegenOptions;

typedef struct CodegenResult {
    unsigned char *section;     /* the KERNELS payload (malloc'd) */
    size_t section_len;
    int n_kernels;              /* kernels the section holds: generated, plus n_library library kernels (CUDA) */
    int n_library;
    int compiled, cached;
    double seconds;
} CodegenResult;

/* Parses "sm_80,sm_90" (each sm_NN with NN in 50..199, no repeats). */
bool codegen_parse_archs(const char *s, CodegenOptions *o, char *err, int errcap);
bool codegen_build(const Graph *g, const Fusion *f, Precision p, const CodegenOptions *o, CodegenResult *r, char *err, int errcap);
void codegen_result_free(CodegenResult *r);
const char *codegen_target_name(CodegenTarget t);

/* KERNELS payload: u32 index length, the index (JSON), then the blobs the
 * index points at (offsets relative to the end of the index). The index:
 * target, compiler, "kernels" (generated, in the lowering's order) and, for
 * CUDA, "library" (compiler/lib_kernels.h, in its order), each entry a name
 * and its blobs. Parses and
 * checks every offset; *index is the caller's to free. */
bool codegen_parse_section(const unsigned char *buf, size_t len, cJSON **index, const unsigned char **blobs, size_t *blobs_len, char *err, int errcap);
/* SHA-256 (hex) of the C translation unit of a lowered program: the CPU
 * runtime re-lowers a plan and requires the same source it was built from. */
bool codegen_c_source_hash(const KProgram *kp, char hex[65], char *err, int errcap);

#endif

/* runtime/gen_cpu.h — the CPU target's generated code: opens the shared
 * object a plan carries, checks it was built from the kernels this yolocc
 * lowers the plan to, and runs one launch over the interpreter's buffers.
 * Knows nothing of scheduling (interp.c) or of library ops' kernels. */
#ifndef YOLOCC_GEN_CPU_H
#define YOLOCC_GEN_CPU_H
#include "../compiler/kernel_ir.h"
#include "../templates/kernel_abi.h"
#include "kernel_so.h"
#include "plan_read.h"

typedef void (*GenKernelFn)(const YkArgs *a);

typedef struct GenCpu {
    KProgram kp;
    const Fusion *fusion;
    KernelSo so;
    GenKernelFn *fn;            /* per kernel */
    void **list;                /* LIST_NORM scratch: pointers and lengths (KProgram.list_len) */
    long long *list_len;
} GenCpu;

/* False with err when the plan has no CPU kernels, or they do not match. */
bool gen_cpu_open(GenCpu *gc, const Plan *p, char *err, int errcap);
void gen_cpu_close(GenCpu *gc);
/* Runs generated launch ln (rows: those of a multi-tensor launch to run,
 * kernel_run_range's); buf holds every tensor it names. */
void gen_cpu_launch(const GenCpu *gc, const KLaunch *ln, KRows rows, void **buf);

#endif

/* runtime/interp.h — the reference interpreter: runs a graph's ops in order
 * with the reference kernels (or, with fast set, the fast CPU kernels of
 * cpu_conv.h where an op has one), one heap buffer per tensor. Callers provide
 * the inputs, parameters and buffers; the interpreter owns activations. */
#ifndef YOLOCC_INTERP_H
#define YOLOCC_INTERP_H
#include "../ir/ir.h"
#include "../passes/fuse.h"

typedef struct Interp {
    const Graph *g;
    void **buf;         /* per tensor id */
    bool *owned;        /* buffers the interpreter allocated */
    unsigned char *arena;   /* the step arena when a memory plan is used */
    int64_t arena_bytes;    /* its size, also while released */
    int *last;          /* arena mode: last op reading each tensor */
    bool *transient;    /* arena mode: internal to a fusion group (offset -2): own buffer, dropped early */
    int *free_at, *free_list;   /* per op: transient tensors dropped after it (CSR) */
    bool poison;        /* arena mode: fill a tensor's bytes with NaN once it is dead */
    bool fast;          /* run cpu_kernel() where it has an entry; false: the oracle only */
    const struct GenCpu *gen;   /* the CPU target's generated kernels, or NULL: op by op */
    const Views *views;         /* zero-copy views of the fusion (interp_use_groups), or NULL */
    /* per op: left out of runs (a generated launch when all its ops are),
     * the caller having made sure nothing that runs reads their outputs;
     * NULL: every op runs */
    const bool *skip;
    /* conv-BN(-activation) groups run as one folded convolution
     * (cpu_fold.h; predict and standalone validation), or NULL */
    const struct CpuFold *fold;
    /* when set, every launch of the generated code is timed into it
     * (interp_profile_start), else NULL */
    struct StepProfile *prof;
} Interp;

bool interp_init(Interp *it, const Graph *g);
/* Allocates (zeroed) storage for tensor t if it has none; returns it. */
void *interp_tensor(Interp *it, int t);
/* The most a run takes on top of what it holds (fast kernels): one op's
 * packed copies of strided or channels-last tensors, and threads x the most
 * scratch a thread takes in one op (attention, pooling; the convolutions'
 * is cpu_conv_layout_scratch_bytes). */
int64_t interp_transient_bytes(const Interp *it, int threads);
/* The bytes of x as the host stores it (fp32, or 8-byte integers). */
int64_t interp_tensor_bytes(const Tensor *x);
/* The host bytes it holds now: its own tensor buffers and its arena (none
 * while released). */
int64_t interp_host_bytes(const Interp *it);
/* Places activations at the memory plan's offsets in one arena (offset -1:
 * own buffer; -2: internal to a fusion group, allocated when made and freed
 * after its last reader). With poison, every arena tensor is overwritten with a NaN
 * pattern right after its last reader, so a plan that lets a tensor be read
 * after its bytes were reused changes results. Call before running. */
bool interp_use_arena(Interp *it, const int64_t *offset, int64_t arena_bytes, bool poison);
/* Frees the arena while the graph is idle (its tensors' buffers dangle) and
 * makes it again, every tensor at its offset, before the next run: graphs
 * that take turns then hold one arena at a time. */
void interp_arena_release(Interp *it);
bool interp_arena_restore(Interp *it, const int64_t *offset);
/* Drops each internal tensor when its fusion group ends instead of after its
 * last reader, so a group that lets one escape fails ("has no value").
 * Takes the fusion's views too: a view is poisoned with its base, once the
 * base and every view of it are dead, and library routines see views
 * through packed copies (they read and write whole tensors). */
bool interp_use_groups(Interp *it, const Fusion *f);
/* Runs the plan's generated code (runtime/gen_cpu.h) group by group: its
 * kernels, and the library routines of the ops that have no kernel. Ranges
 * passed to interp_run must then not cut a launch in two. */
void interp_use_generated(Interp *it, const struct GenCpu *gen);
/* Times every launch of the following runs (generated code only) into p,
 * emptied here (step_profile.h; routes: generated kernels, library
 * routines, folded convs), until it->prof is set back to NULL. */
void interp_profile_start(Interp *it, struct StepProfile *p);
/* Runs ops [first, last); false with err naming the op on failure. */
bool interp_run(Interp *it, int first, int last, char *err, int errcap);
void interp_free(Interp *it);
size_t dtype_size(DType dt);

#endif

/* runtime/cuda/attention_gemm.h — attention and its gradient as cuBLASLt products and three small
 * library kernels (DESIGN decision 7: GEMMs of attention go to cuBLASLt): the products, the
 * scratch they share and the order of the work, as a list that the device runner
 * (cuda_attention.c) and the host tests walk alike. Pure: no device, no library calls.
 *
 * Per (head, area) slice, batched over the images, with S, P and dS stored row index fastest
 * (element (i, j) of image n at n * L * L + j * L + i, so a thread per row reads coalesced):
 *   forward   S = scale Q^T K (fp32); P = softmax_j S (qkv's type); O = V P^T; v copied to its output
 *   backward  d_v copied into dV first; S, P again; dP = dO^T V (into S's place); dV += dO P;
 *             dS = P * (dP - rowsum(P * dP)) (into P's place); dQ = scale K dS^T; dK = scale Q dS
 * Each softmax runs in two kernels: partial statistics per row and chunk of ATT_CHUNK columns,
 * then one thread per element that combines its row's chunks. */
#ifndef YOLOCC_ATTENTION_GEMM_H
#define YOLOCC_ATTENTION_GEMM_H
#include "../../compiler/lib_kernels.h"
#include "gemm_desc.h"

/* the products, in the order a backward slice runs them */
typedef enum { AG_SCORES, AG_OUT, AG_DPROBS, AG_DV, AG_DQ, AG_DK, AG_ROLES } AttRole;
/* what an operand lives in: the op's tensors, then the scratch */
typedef enum {
    AB_QKV,         /* attention's input, attention_bwd's third */
    AB_O,           /* attention's o, attention_bwd's d_o */
    AB_V,           /* attention's v output, attention_bwd's d_v */
    AB_DQKV,        /* attention_bwd's output */
    AB_S,           /* scratch: scores, later dP (fp32) */
    AB_P,           /* scratch: probabilities, later dS (qkv's type) */
    AB_PARTIALS,    /* scratch: per row and chunk, the max and sum of exp (or the sum of P * dP), fp32 */
    AB_COUNT
} AttBuf;

enum { ATT_CHUNK = 32, ATT_ALIGN = 256 };

/* An element offset into one of the buffers. */
typedef struct AttRef {
    AttBuf buf;
    int64_t off;
} AttRef;

/* One piece of work: a product of role `role` on logical operands a, b into d,
 * or library kernel `entry` on args (t[0], t[1], ws: the refs below; everything else filled). */
typedef struct AttStep {
    bool gemm;
    AttRole role;
    AttRef a, b, d;
    LibEntry entry;
    YlArgs args;
    AttRef t0, t1;
} AttStep;

typedef struct AttGemm {
    bool bwd;
    DType type[AB_COUNT];           /* storage type of each buffer */
    GemmDesc gemm[AG_ROLES];        /* the forward uses AG_SCORES and AG_OUT */
    int64_t scratch_off[AB_COUNT];  /* byte offsets of AB_S, AB_P, AB_PARTIALS in the scratch */
    int64_t scratch_bytes;          /* all three, ATT_ALIGN-aligned */
    AttStep *steps;
    int n_steps;
} AttGemm;

/* Pure: the plan of attention / attention_bwd op op of g with operand storage types dt
 * (inputs, then outputs, as lib_program_build gives them) and the operands' image strides and
 * layouts of la (lib_launch_args). False with a message when cuBLASLt cannot take a product
 * (mixed input types, say): the op then runs its library kernels. */
bool attention_gemm_build(AttGemm *ag, const Graph *g, const Op *op, const YlArgs *la, const DType *dt, char *err, int errcap);
void attention_gemm_free(AttGemm *ag);
/* Pure: the tensor behind buffer b of op (-1 for the scratch). */
int attention_gemm_tensor(const Op *op, AttBuf b);

#endif

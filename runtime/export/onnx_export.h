/* runtime/export/onnx_export.h — a plan's validation graph (eval mode, images
 * to decoded predictions) with loaded weights, lowered to ONNX nodes: BN
 * folded into the conv before it, layout copies dropped, a v10 head's top-k
 * selection appended. Reads the graph and the weights; writes nothing but the
 * builder's nodes and initializers. */
#ifndef YOLOCC_ONNX_EXPORT_H
#define YOLOCC_ONNX_EXPORT_H
#include <stdbool.h>

#include "../../ir/ir.h"
#include "../plan_read.h"
#include "onnx_builder.h"

enum { ONNX_OPSET_MIN = 14, ONNX_OPSET_MAX = 21 };

typedef struct OnnxExportOptions {
    int batch;          /* dimension 0 of the input and output */
    bool dynamic;       /* dimension 0 named "batch" instead (any batch at run time) */
    int opset;          /* ONNX_OPSET_MIN..ONNX_OPSET_MAX */
    int max_det;        /* end-to-end heads: detections kept per image (Ultralytics' max_det) */
} OnnxExportOptions;

typedef struct OnnxExportResult {
    OnnxValue input, output;    /* "images" [batch, 3, S, S]; "output0" [batch, 4 + nc, anchors] or [batch, max_det, 6] */
    int ops_exported;           /* IR ops on the path from the images to the predictions */
    int bn_folded;              /* batch norms folded into their conv */
} OnnxExportResult;

/* Lowers graph g (the validation graph io describes) with the state values
 * buf (indexed by tensor id, as Interp.buf) into b. False with err naming the
 * op when one has no ONNX form or its weights are not state tensors. */
bool onnx_export_graph(OnnxBuilder *b, const Graph *g, void *const *buf, const EvalIO *io, const OnnxExportOptions *o, OnnxExportResult *r, char *err, int errcap);

#endif

/* runtime/export/export.h — `yolort export PLAN --weights W`: Ultralytics'
 * export mode, format onnx: the plan's eval-mode model with its trained
 * weights as one self-contained ONNX file, laid out as Ultralytics' export
 * writes it, for ONNX Runtime and Ultralytics' AutoBackend. */
#ifndef YOLOCC_EXPORT_H
#define YOLOCC_EXPORT_H
#include <stdbool.h>

typedef struct ExportArgs {
    const char *plan, *weights, *format, *output;  /* output NULL: the weights' path with .onnx */
    int batch, opset, max_det;
    bool dynamic;
} ExportArgs;

void export_args_defaults(ExportArgs *a);
/* 0 done, 2 bad arguments, plan or weights, 1 the export failed (no file is left). */
int export_main(const ExportArgs *a);

/* names as the Python dict literal Ultralytics' metadata holds ({0: 'person', 1: 'bicycle'}), for ast.literal_eval. */
char *export_names_literal(char *const *names, int n);

#endif

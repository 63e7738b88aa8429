/* runtime/predict/val.h — `yolort val PLAN --weights W --data DATA.yaml`:
 * Ultralytics' val mode on saved weights (the validation the trainer runs
 * each epoch, on any weights file), its table per class. */
#ifndef YOLOCC_VAL_H
#define YOLOCC_VAL_H
#include <stdbool.h>

typedef struct ValArgs {
    const char *plan, *weights, *data;
    int workers;
    bool reference;
} ValArgs;

/* 0 done, 1 a failure while validating, 2 bad arguments, plan, weights or data. */
int val_main(const ValArgs *a);

#endif

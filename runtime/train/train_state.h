/* runtime/train/train_state.h — the EMA of the model (training-semantics §6)
 * and the files that let a run stop and continue bit for bit: the
 * training-state file (checkpoint.h) and the EMA weights as safetensors. */
#ifndef YOLOCC_TRAIN_STATE_H
#define YOLOCC_TRAIN_STATE_H
#include <cjson/cJSON.h>
#include <stdint.h>

#include "../safetensors.h"

#include "trainer.h"

/* A copy of every state tensor of the model, taken now. */
bool ema_init(Trainer *t);
/* One ModelEMA update after an optimizer step (a CUDA plan's on the device,
 * from the device's parameters). */
bool ema_update(Trainer *t, char *err, int errcap);
/* Makes t->ema current when the device holds a newer EMA (before it is
 * read: validation, weights files, the state file). */
bool ema_sync_host(Trainer *t, char *err, int errcap);
void ema_free(Trainer *t);

/* Model state, EMA, optimizer state and gradient accumulators, plus the
 * loop's scalars (JSON object, not consumed). Atomic. */
bool state_save(Trainer *t, const char *path, cJSON *scalars, char *err, int errcap);
/* Copies the tensors of a state file read with ckpt_read (path names it in
 * errors) into the trainer. Nothing changes unless every tensor matches. */
bool state_restore(Trainer *t, const StFile *f, const char *path, char *err, int errcap);
/* The EMA weights under Ultralytics' state_dict names (what best/last hold). */
bool ema_save_weights(Trainer *t, const char *path, char *err, int errcap);

uint32_t file_crc32(const char *path, bool *ok);

#endif

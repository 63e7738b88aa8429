/* runtime/train/checkpoint.h — the training-state file behind --resume: a
 * safetensors file whose metadata holds the trainer's scalars (JSON) and a
 * CRC-32 per tensor, written atomically (temp file, fsync, rename, directory
 * fsync). Knows nothing of what the tensors mean; the training loop names
 * them. Must not touch: the weights files (weights.c) or the loop's state. */
#ifndef YOLOCC_CHECKPOINT_H
#define YOLOCC_CHECKPOINT_H
#include <cjson/cJSON.h>

#include "../safetensors.h"

/* Writes items and the JSON object state (not consumed) to path. A failure
 * leaves the previous file at path untouched. */
bool ckpt_write(const char *path, const StWriteItem *items, int n, const cJSON *state, char *err, int errcap);

/* Bytes of an item's data: dtype size times its shape. */
uint64_t ckpt_item_bytes(const StWriteItem *it);

/* Reads path, checks every tensor against its stored CRC-32 and parses the
 * state object. On success the caller owns *f (st_free) and *state
 * (cJSON_Delete). Errors name the path and the tensor. */
bool ckpt_read(const char *path, StFile *f, cJSON **state, char *err, int errcap);

#endif

/* runtime/data/loader.h — batches for the trainer: per-sample transform chain
 * (augment.c) run by a pool of C threads that fill the next batches while the
 * current step runs; optional RAM cache of decoded, resized images;
 * deterministic per-epoch shuffling and augmentation seeded by (seed, epoch,
 * sample position), so the batches do not depend on the number of workers or
 * on timing, and a resumed run sees the same batches.
 * Must not touch: datasets on disk (dataset.c), model plans, the step. */
#ifndef YOLOCC_LOADER_H
#define YOLOCC_LOADER_H
#include <stdbool.h>
#include <stdint.h>

#include "augment.h"
#include "dataset.h"

typedef struct LoaderOptions {
    int batch;          /* images per batch (the plan's batch) */
    int imgsz;          /* square output side (the plan's imgsz) */
    int max_boxes;      /* boxes per image the plan accepts; extras are dropped and counted */
    bool train;         /* true: shuffle + augment (Hyp); false: letterbox only, in order */
    Hyp hyp;            /* augmentation settings (train only) */
    uint64_t seed;
    int workers;        /* threads; 0 = decode on the caller's thread */
    bool cache_ram;     /* keep decoded images resized to imgsz (long side) in memory */
    /* batches carry the pixels as bytes (Batch.bytes) instead of value / 255
     * (Batch.images, then NULL): a GPU divides them itself, as Ultralytics does */
    bool bytes;
    /* data parallelism (training only): this loader is rank `shard` of
     * `shards` (0 of 0 or 1: alone) and its sample s of the epoch is the
     * shuffled order's position s x shards + shard, every shards-th one as
     * PyTorch's DistributedSampler deals them; the augmentation stream is
     * keyed by that position, so the ranks' batches i together are, image for
     * image, one process's batch i of batch x shards */
    int shard, shards;
    /* validation only: Ultralytics' rect batches (training-semantics 3.2):
     * images in order of aspect ratio h/w (ties by path), each batch the
     * shape ceil(ratio x imgsz / stride + 0.5) x stride of its ratios,
     * every image letterboxed into it without scaling up */
    bool rect;
    int stride;
} LoaderOptions;

/* Per image of a batch, what validation needs to map boxes back to the
 * original pixels: out = (in - pad) / ratio. */
typedef struct ImageInfo {
    int index;          /* sample index in the split, -1 for padding in a partial val batch */
    int orig_w, orig_h;
    float ratio;        /* letterbox scale from original to network pixels */
    float pad_x, pad_y; /* left, top padding in network pixels */
} ImageInfo;

typedef struct Batch {
    int h, w;           /* the images' height and width: imgsz, or a rect batch's shape */
    float *images;      /* [batch, 3, h, w], RGB, value / 255; NULL with LoaderOptions.bytes */
    uint8_t *bytes;     /* the same pixels as bytes (LoaderOptions.bytes), else NULL */
    float *boxes;       /* [batch, max_boxes, 5]: cls, cx, cy, w, h normalised to w x h */
    int64_t *counts;    /* [batch] boxes per image */
    ImageInfo *info;    /* [batch] */
    int n_valid;        /* images that are real samples (val: the last batch may be partial) */
    int instances;      /* boxes in the batch (the progress bar's Instances) */
    int dropped_boxes;  /* boxes beyond max_boxes, dropped */
} Batch;

typedef struct Loader Loader;

/* Training drops the last partial batch (the plan's batch is fixed):
 * batches per epoch = n / (batch x shards). Validation pads the last batch with empty
 * images (info.index -1, counts 0) and n_valid says how many are real. */
Loader *loader_open(const DataSplit *split, const LoaderOptions *o, char *err, int errcap);
int loader_batches_per_epoch(const Loader *l);
/* The input shape of batch i of an epoch (imgsz square unless rect). */
void loader_batch_shape(const Loader *l, int i, int *h, int *w);
/* Every batch's {h, w}, loader_batches_per_epoch rows (malloc'd; NULL when out of memory). */
int (*loader_batch_shapes(const Loader *l))[2];
/* The pixel buffers batches are handed out in (Batch.bytes, or Batch.images),
 * LOADER_SLOTS of them, bytes_each long (room for the largest batch shape) and fixed while the loader is open:
 * a GPU pins them once, and uploads each batch from where it lies. */
#define LOADER_SLOTS 3
int loader_pixel_buffers(const Loader *l, void **bufs, size_t *bytes_each);
/* The host bytes of its batch buffers (pixels, boxes, counts, image info);
 * a RAM cache (LoaderOptions.cache_ram) grows on top as images are loaded. */
int64_t loader_host_bytes(const Loader *l);
/* What its workers (or the caller's thread, without workers) hold at most
 * while making samples, estimated from the split's largest image: its
 * decode and resize, and each sample's images (a mosaic's four tiles, its
 * 2 imgsz canvas and the warp's output, twice with mixup; or a letterbox). */
int64_t loader_worker_bytes(const Loader *l);
/* The bytes of every image of the split load-resized to imgsz (each long
 * side imgsz, 3 bytes a pixel, from the headers the dataset read): what
 * LoaderOptions.cache_ram ends up holding. */
int64_t loader_cache_bytes(const DataSplit *split, int imgsz);
/* Starts epoch e (0-based): the shuffle order and augmentation random
 * streams depend only on (seed, e). mosaic false = close_mosaic (also turns
 * mixup off); skip = batches to skip (resume inside an epoch). */
bool loader_start_epoch(Loader *l, int epoch, bool mosaic, int skip, char *err, int errcap);
/* Next batch of the epoch into the loader-owned *b (valid until the next
 * call); false at the end of the epoch (err empty) or on a failure (err set,
 * e.g. an image that became unreadable). */
bool loader_next(Loader *l, Batch *b, char *err, int errcap);
void loader_close(Loader *l);

#endif

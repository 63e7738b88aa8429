/* runtime/train/trainer.h — `yolort train PLAN --data DATA.yaml`: the epoch
 * loop of training-semantics §5-§10 on a compiled plan (schedule, warmup,
 * gradient accumulation, EMA, validation, early stopping, checkpoints, exact
 * resume, results files). The plan fixes batch, image size, optimizer and
 * weight decay; everything else is a run-time option. */
#ifndef YOLOCC_TRAINER_H
#define YOLOCC_TRAINER_H
#include <stdbool.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "../data/dataset.h"
#include "../data/loader.h"
#include "../dist/dp_train.h"
#include "../plan_read.h"
#include "../predict/eval_shape.h"
#include "../train_step.h"
#include "metrics.h"

typedef struct TrainArgs {
    const char *plan, *data, *project, *name, *weights, *resume;
    int epochs, patience, close_mosaic, freeze, seed, workers, save_period;
    int batch;              /* > 0: must be the plan's batch x ranks (Ultralytics' batch is every rank's together) */
    int stop_after;         /* > 0: end this process after that many epochs (continue with resume) */
    double lr0, lrf, momentum, warmup_epochs, warmup_momentum, warmup_bias_lr;
    double weight_decay;    /* must match the plan's hyper-parameter (< 0: take the plan's) */
    double gains[3];        /* box, cls, dfl loss gains: must match the plan's (< 0: take the plan's) */
    double fraction;        /* the first round(n x fraction) training images (1: all) */
    double time;            /* > 0: hours to train; epochs follow the mean epoch time (Ultralytics' time) */
    bool single_cls;        /* every class 0, named "item" (a plan for nc 1) */
    bool cos_lr, cache_ram, cache_disk, exist_ok, val, reference;
    bool plots;             /* results.svg, train_batch*.jpg, the final evaluation's plots (not kept in the state: a report choice) */
    Hyp hyp;
} TrainArgs;

/* Ultralytics' defaults; lr0, momentum and warmup_bias_lr stay "unset" (< 0)
 * until the plan's optimizer is known (SGD: 0.01 / 0.937 / 0.1; AdamW: the
 * optimizer=auto choice round(0.002 * 5 / (4 + nc), 6) / 0.9 / 0.0). */
void train_args_defaults(TrainArgs *a);

/* What one validation pass measured. */
typedef struct ValResult {
    double precision, recall, map50, map50_95, fitness;
    double loss[3];     /* box, cls, dfl summed over batches / batches */
    int images, instances;
} ValResult;

typedef struct Trainer {
    TrainArgs a;
    Plan plan;
    TrainStep ts;
    /* data parallelism (mpirun): every rank trains its shard of each epoch,
     * gradients summed; rank 0 alone validates, prints and writes files, and
     * tells the others when to stop */
    DataParallel dp;
    bool dp_open, root;
    int world;
    Interp ev;              /* host buffers of the plan's validation graph: its state is the EMA (a CUDA plan uploads from them) */
    void **evstate;         /* the EMA in the validation graph's state order */
    EvalGraph evg;          /* CPU: the plan's validation graph on the interpreter, reading the EMA */
    EvalShapes evshapes;    /* CPU: the same model at the other shapes of rect validation batches */
    /* a CUDA plan validates on the device: its validation graph's step, and
     * host space for what comes back (predictions, loss items) */
    struct CudaStep *evcuda;
    struct CudaShapes *evcshapes;   /* the same graph at the other shapes of rect validation batches, on the device */
    float *evpred, evitems[3];
    Dataset ds;
    Loader *train_loader, *val_loader;
    void **ema;             /* per train-graph tensor id: EMA copy of each state tensor */
    long ema_updates;
    /* a CUDA plan keeps the EMA on the device (cuda_ema.c); ema[] is then
     * its host copy, and the flags say which side is newer */
    bool ema_host_stale, ema_dev_stale;
    bool *skip;             /* per tensor id: frozen parameter (no update) */
    int nb, nw, accumulate, last_opt_step, start_epoch, best_epoch;
    double lr0, lrs[3], momentum, best_fitness;
    bool adamw;             /* the plan's optimizer is AdamW (else SGD) */
    uint32_t plan_crc;
    char dir[1024];         /* the run directory */
    int64_t rss0;           /* resident bytes before set-up: the program and its libraries */
    int64_t cache_bytes;    /* the RAM cache's images (--cache ram, where they fit) */
    int64_t host_planned;   /* a CPU plan's host memory known before step 0 (host_memory.c), else 0 */
    double t0;              /* monotonic seconds at the start of training (earlier by the elapsed time of a resumed run) */
    double resumed_elapsed; /* training seconds before a resume */
    bool time_up;           /* --time ran out during the epoch */
    bool mosaic_closed;     /* the last close_mosaic epochs have begun */
    ValResult last_val;
} Trainer;

/* trainer_args.c: the arguments a state file records (for --resume, as
 * Ultralytics' checkpoint keeps its train_args; strings stay owned by the
 * JSON) and PROJECT/NAME/args.yaml. */
cJSON *train_args_json(const TrainArgs *a);
bool train_args_from_json(TrainArgs *a, const cJSON *j);
void train_write_args_yaml(const Trainer *t);
/* A CPU plan's host memory after set-up, before step 0 (host_memory.c):
 * prints what the run holds (training step, EMA, validation graphs, data
 * loaders) and fails, naming the largest batch that fits, when it exceeds
 * the memory this process may still take. */
bool trainer_host_memory_check(Trainer *t, char *err, int errcap);
/* Whether split's images, load-resized, fit in *room with Ultralytics' 50%
 * margin (check_cache_ram; sizes from the image headers, not a sample of
 * 30): if so takes them from *room and adds them to t->cache_bytes, else
 * prints Ultralytics' "... not caching images" line. */
bool trainer_cache_fits(Trainer *t, const DataSplit *split, const char *prefix, uint64_t *room);
/* --cache disk (disk_cache.c): split's images decoded once into IMAGE.npy
 * beside each (those there already are kept), with Ultralytics' bar, when
 * check_cache_disk's checks pass (else its warning, and no cache); false
 * when an image cannot be written. */
bool trainer_cache_disk(const DataSplit *split, const char *prefix, char *err, int errcap);

/* The whole command: returns the process exit code (0 done, 1 failure while
 * training, 2 bad arguments, plan or data). Prints progress to stdout and
 * warnings/errors to stderr. */
int train_main(const TrainArgs *a);

/* Validates the EMA weights on the val split (runtime/train/validate.c);
 * per_class prints one table row per class (the final evaluation);
 * plots_dir, when not NULL, gets the validation plots (report_val_plots). */
bool validate_run(Trainer *t, bool per_class, const char *plots_dir, ValResult *out, char *err, int errcap);

/* One batch through a model's eval mode: predictions [batch, 4 + nc,
 * anchors] (an end-to-end head: x1 y1 x2 y2 boxes), their anchor count (a
 * rect batch's shape sets it) and the 3 loss items. */
typedef bool (*ValBatchFn)(void *ctx, const Batch *b, const float **pred, int *anchors, const float **items, char *err, int errcap);
/* One image's detections in original pixels, as update_metrics sees them
 * (yolort val's --save-txt and --save-json). */
typedef bool (*ValImageFn)(void *ctx, const Sample *s, const Detection *dets, int n, char *err, int errcap);

/* What a validation pass reads: a split through its letterboxing loader
 * (LoaderOptions.train false) and the model that runs each batch. */
typedef struct ValPass {
    Loader *loader;
    const DataSplit *split;
    char **names;           /* nc class names, for the table */
    int nc;
    bool end2end;           /* top-k selection instead of NMS */
    NmsOptions nms;         /* NMS_VALIDATION, or yolort val's --conf/--iou/--max-det (an end-to-end head: conf, max_det) */
    ValBatchFn run;
    void *ctx;
    const char *plots_dir;  /* NULL, or where the confusion matrix, curves and val_batch*.jpg go */
    int imgsz, max_boxes;   /* the loader's, for val_batch*.jpg */
    ValImageFn on_image;    /* NULL, or called for every image */
    void *image_ctx;
} ValPass;

/* Ultralytics' DetectionValidator over the split: prints the table (all,
 * and per class with per_class) and fills out (losses: per-batch means). */
bool validate_pass(const ValPass *v, bool per_class, ValResult *out, char *err, int errcap);

double monotonic_seconds(void);

#endif

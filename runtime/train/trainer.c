/* runtime/train/trainer.c — the epoch loop (training-semantics §5, §7): set-up,
 * per-batch warmup and accumulation, per-epoch validation, results and
 * checkpoints, early stopping, resume. Must not touch: kernels, the data
 * pipeline's internals, file formats (checkpoint.c, report*.c do those). */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../../passes/optimizer.h"
#include "../cuda/cuda_step.h"
#include "../device_select.h"
#include "../mem_fit.h"
#include "../predict/eval_shape_cuda.h"
#include "../train_step_cuda.h"
#include "../weights.h"
#include "checkpoint.h"
#include "report.h"
#include "report_batches.h"
#include "schedule.h"
#include "train_state.h"

double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The progress bar's memory column: the device memory the plan's steps hold
 * (training and validation; it does not change during a run) for a CUDA
 * plan, else the process's resident memory. */
static double mem_gb(const Trainer *t) {
    if (!t->ts.cuda) return (double)process_rss_bytes() / 1e9;
    return (double)(train_step_device_bytes(&t->ts) + (t->evcuda ? cuda_step_device_bytes(t->evcuda) : 0) + (t->evcshapes ? cuda_shapes_device_bytes(t->evcshapes) : 0)) / 1e9;
}

/* PROJECT/NAME[N] (report_run_dir) with its weights/ inside */
static bool run_dir(Trainer *t, char *err, int errcap) {
    char w[1100];
    if (!report_run_dir(t->a.project, t->a.name, t->a.exist_ok, t->dir, sizeof t->dir, err, errcap)) return false;
    snprintf(w, sizeof w, "%s/weights", t->dir);
    return report_make_dir(w, err, errcap);
}

static void path_in(const Trainer *t, const char *leaf, char *out, size_t cap) { snprintf(out, cap, "%s/%s", t->dir, leaf); }

/* Marks frozen parameters: names under model.0. .. model.{N-1}. (§5.5; the
 * DFL weight is frozen in the plan itself). */
static bool freeze_layers(Trainer *t) {
    const Graph *g = &t->plan.g;
    t->skip = calloc((size_t)g->n_tensors, sizeof(bool));
    if (!t->skip) return false;
    for (int i = 0; i < g->n_state; i++) {
        int id = g->state[i];
        if (g->tensors[id].kind != TK_PARAM) continue;
        int layer;
        if (sscanf(g->tensors[id].name, "model.%d.", &layer) == 1 && layer < t->a.freeze) {
            t->skip[id] = true;
            printf("Freezing layer '%s'\n", g->tensors[id].name);
        }
    }
    return true;
}

/* The arguments still unset (< 0) from the plan's optimizer (trainer.h).
 * A plan compiled without --optimizer stands for Ultralytics' default
 * optimizer=auto (training-semantics 5.1): SGD for more than 10000
 * iterations, else AdamW, either with warmup bias lr 0. On a long run its
 * SGD trains as auto's does (momentum 0.9 unless a warmup ends at 0.937); on a shorter one auto would take AdamW, which
 * this plan has no step for, so a line says how to compile for it. */
static void optimizer_defaults(Trainer *t) {
    TrainArgs *a = &t->a;
    const char *from = cJSON_GetStringValue(cJSON_GetObjectItem(t->plan.meta, "optimizer_from"));
    const bool as_auto = from && strcmp(from, "default") == 0 && !t->adamw && a->lr0 < 0 && a->momentum < 0 && a->warmup_bias_lr < 0;
    if (as_auto) {
        const int batch = t->ts.batch * t->world, per = batch > 64 ? batch : 64; /* max(batch, nbs) */
        const long long iterations = (long long)((t->ds.train.n + per - 1) / per) * a->epochs;
        if (iterations > 10000) {
            printf("optimizer: 'optimizer=auto' found, ignoring 'lr0=0.01' and 'momentum=0.937' and determining best 'optimizer', 'lr0' and 'momentum' automatically... \n");
            a->warmup_bias_lr = 0.0;
            /* auto makes SGD with momentum 0.9, which only a warmup moves on (to 0.937) */
            if (!(a->warmup_epochs > 0)) a->momentum = 0.9;
        } else {
            printf("optimizer: Ultralytics' default optimizer=auto would train AdamW(lr=%g, momentum=0.9) for %lld iteration%s; this plan has yolocc's default SGD "
                   "(recompile with yolocc ... --optimizer adamw to train as `yolo train` does by default)\n",
                   auto_adamw_lr(t->ts.nc), iterations, iterations == 1 ? "" : "s");
        }
    }
    if (a->lr0 < 0) a->lr0 = t->adamw ? auto_adamw_lr(t->ts.nc) : 0.01;
    if (a->momentum < 0) a->momentum = t->adamw ? 0.9 : 0.937;
    if (a->warmup_bias_lr < 0) a->warmup_bias_lr = t->adamw ? 0.0 : 0.1;
    t->lr0 = a->lr0;
    t->momentum = a->momentum;
}

static void print_optimizer(const Trainer *t, const char *opt) {
    const Graph *g = &t->plan.g;
    int groups[3] = {0};
    for (int o = t->ts.clip_op + 1; o < g->n_ops; o++) groups[g->ops[o].a.group]++;
    printf("optimizer: %s(lr=%g, momentum=%g) with parameter groups %d weight(decay=0.0), %d weight(decay=%g), %d bias(decay=0.0)\n", opt, t->lr0, t->momentum,
           groups[2], groups[1], cjson_number(t->plan.meta, "weight_decay", 0), groups[0]);
}

static cJSON *scalars_json(const Trainer *t, int epoch) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "epoch", epoch);
    cJSON_AddNumberToObject(j, "last_opt_step", t->last_opt_step);
    cJSON_AddNumberToObject(j, "opt_steps", (double)t->ts.step);
    cJSON_AddNumberToObject(j, "acc_batches", t->ts.n_acc_batches);
    cJSON_AddNumberToObject(j, "ema_updates", (double)t->ema_updates);
    cJSON_AddNumberToObject(j, "best_fitness", t->best_fitness);
    cJSON_AddNumberToObject(j, "best_epoch", t->best_epoch);
    cJSON_AddNumberToObject(j, "plan_crc32", t->plan_crc);
    cJSON_AddBoolToObject(j, "mosaic_closed", t->mosaic_closed);
    cJSON_AddNumberToObject(j, "elapsed", monotonic_seconds() - t->t0);
    cJSON_AddItemToObject(j, "args", train_args_json(&t->a));
    return j;
}

static bool save_epoch(Trainer *t, int epoch, bool is_best, char *err, int errcap) {
    char p[1200];
    cJSON *s = scalars_json(t, epoch);
    if (!s) return snprintf(err, (size_t)errcap, "out of memory"), false;
    path_in(t, "weights/last.state", p, sizeof p);
    bool ok = train_step_sync_host(&t->ts, true, err, errcap) && ema_sync_host(t, err, errcap) && state_save(t, p, s, err, errcap);
    cJSON_Delete(s);
    path_in(t, "weights/last.safetensors", p, sizeof p);
    ok = ok && ema_save_weights(t, p, err, errcap);
    if (ok && is_best) {
        path_in(t, "weights/best.safetensors", p, sizeof p);
        ok = ema_save_weights(t, p, err, errcap);
    }
    if (ok && t->a.save_period > 0 && epoch % t->a.save_period == 0) {
        char leaf[64];
        snprintf(leaf, sizeof leaf, "weights/epoch%d.safetensors", epoch);
        path_in(t, leaf, p, sizeof p);
        ok = ema_save_weights(t, p, err, errcap);
    }
    return ok;
}

static void bind_batch(Trainer *t, const Batch *b) {
    size_t img = (size_t)t->ts.batch * 3 * (size_t)t->ts.imgsz * (size_t)t->ts.imgsz, box = (size_t)t->ts.batch * (size_t)t->ts.max_boxes * 5;
    /* bytes are uploaded from the loader's (pinned) slot itself */
    if (b->bytes) train_step_use_bytes(&t->ts, b->bytes);
    else memcpy(train_step_images(&t->ts), b->images, img * sizeof(float));
    memcpy(train_step_boxes(&t->ts), b->boxes, box * sizeof(float));
    memcpy(train_step_counts(&t->ts), b->counts, (size_t)t->ts.batch * sizeof(int64_t));
}

/* Ultralytics' plot_idx: the first three batches, and the first three after
 * the mosaic closes ((epochs - close_mosaic) x batches per epoch on). */
static bool plot_this_batch(const Trainer *t, int ni) {
    const int closed = t->a.close_mosaic > 0 ? (t->a.epochs - t->a.close_mosaic) * t->nb : -1;
    return ni < 3 || (closed >= 0 && ni >= closed && ni < closed + 3);
}

/* train_batchN.jpg; a failed drawing is a warning, training goes on */
static void plot_training_batch(const Trainer *t, const Batch *b, int ni) {
    char path[1200], name[64], err[1024];
    snprintf(name, sizeof name, "train_batch%d.jpg", ni);
    path_in(t, name, path, sizeof path);
    const BatchPlot p = {.b = b, .n = t->ts.batch, .imgsz = t->ts.imgsz, .max_boxes = t->ts.max_boxes, .split = &t->ds.train};
    if (!report_batch_jpeg(path, &p, err, sizeof err)) fprintf(stderr, "yolort: warning: %s\n", err);
}

/* Ultralytics' DDP timeout (3 hours): the other ranks wait this long for
 * rank 0's validation at an epoch's end, however short the collectives' own */
#define VALIDATION_WAIT_S 10800.0

/* Rank 0's decision (and its run's epochs, which --time moves) on every rank;
 * after_validation: the others may have waited through rank 0's validation. */
static bool agree(Trainer *t, int *decision, bool after_validation, char *err, int errcap) {
    if (t->world <= 1) return true;
    int32_t v[2] = {*decision, t->a.epochs};
    const double limit = t->dp.comm.timeout_s;
    if (after_validation && t->dp.comm.timeout_s < VALIDATION_WAIT_S) t->dp.comm.timeout_s = VALIDATION_WAIT_S;
    bool ok = dist_broadcast(&t->dp.comm, v, sizeof v, 0, "rank 0's stop decision", err, errcap);
    t->dp.comm.timeout_s = limit;
    if (!ok) return false;
    *decision = v[0];
    t->a.epochs = v[1];
    return true;
}

static bool time_is_up(const Trainer *t) { return t->a.time > 0 && monotonic_seconds() - t->t0 > t->a.time * 3600; }

/* --time after an epoch: the epochs that fit the hours at the mean epoch
 * time so far become the run's epochs (the schedule follows them, as
 * Ultralytics rebuilds its scheduler); true when training should stop. */
static bool timed_epochs(Trainer *t, int epoch) {
    double mean = (monotonic_seconds() - t->t0) / (epoch + 1);
    double fit = ceil(t->a.time * 3600 / (mean > 0 ? mean : 1e-9));
    t->a.epochs = fit > 1e6 ? 1000000 : fit < 1 ? 1 : (int)fit;
    t->time_up = t->time_up || time_is_up(t);
    return t->time_up || epoch >= t->a.epochs;
}

/* One epoch of batches; fills the running-mean losses. */
static bool train_epoch(Trainer *t, int epoch, double tl[3], char *err, int errcap) {
    const TrainArgs *a = &t->a;
    double lr_base = t->lr0 * lr_factor(epoch, a->epochs, a->lrf, a->cos_lr);
    for (int g = 0; g < 3; g++) t->lrs[g] = lr_base;
    /* Ultralytics closes mosaic at epoch == epochs - close_mosaic, so a run
     * shorter than close_mosaic keeps it throughout (its resume rule would
     * close it instead; one rule here keeps resumed runs exact) */
    int close_at = a->epochs - a->close_mosaic;
    /* once closed it stays closed, also when --time moves the epochs on */
    bool closes = a->close_mosaic > 0 && close_at >= 0 && epoch >= close_at;
    if (closes && !t->mosaic_closed) printf("Closing dataloader mosaic\n");
    t->mosaic_closed = t->mosaic_closed || closes;
    bool mosaic = !t->mosaic_closed;
    if (!loader_start_epoch(t->train_loader, epoch, mosaic, 0, err, errcap)) return false;
    Progress pb = progress_begin(stdout, isatty(STDOUT_FILENO), t->ts.cuda ? "GPU_mem" : "RAM", epoch, a->epochs, t->nb, monotonic_seconds());
    tl[0] = tl[1] = tl[2] = 0;
    for (int i = 0; i < t->nb; i++) {
        int ni = i + t->nb * epoch;
        int accumulate = t->accumulate;
        double momentum = t->momentum;
        if (ni <= t->nw) {
            WarmupValues w = warmup_values(ni, t->nw, lr_base, a->warmup_bias_lr, a->warmup_momentum, a->momentum, 64, t->ts.batch * t->world);
            accumulate = w.accumulate;
            memcpy(t->lrs, w.lr, sizeof t->lrs);
            momentum = w.momentum;
        }
        /* AdamW has no momentum group entry: its beta1 is not warmed up */
        if (t->adamw) momentum = a->momentum;
        Batch b;
        err[0] = 0;
        if (!loader_next(t->train_loader, &b, err, errcap)) {
            if (!err[0]) snprintf(err, (size_t)errcap, "the loader ended epoch %d after %d of %d batches", epoch + 1, i, t->nb);
            return false;
        }
        if (t->root && t->a.plots && plot_this_batch(t, ni)) plot_training_batch(t, &b, ni);
        bind_batch(t, &b);
        StepResult r;
        if (!train_step_backward(&t->ts, &r, err, errcap)) return false;
        double items[3] = {r.box, r.cls, r.dfl};
        for (int k = 0; k < 3; k++) tl[k] = (tl[k] * i + items[k]) / (i + 1);
        if (ni - t->last_opt_step >= accumulate) {
            if (!train_step_update(&t->ts, t->lrs, momentum, t->skip, NULL, err, errcap) || !ema_update(t, err, errcap)) return false;
            t->last_opt_step = ni;
        }
        if (!isfinite(r.total))
            return snprintf(err, (size_t)errcap, "epoch %d batch %d: the loss is not finite (%g)", epoch + 1, i + 1, r.total), false;
        progress_update(&pb, i + 1, mem_gb(t), tl, b.instances, t->ts.imgsz, monotonic_seconds());
        /* Ultralytics' timed stopping: looked at after each optimizer step, rank 0's clock for all */
        if (t->last_opt_step == ni && a->time > 0) {
            int up = t->root && time_is_up(t);
            if (!agree(t, &up, false, err, errcap)) return false;
            if (up) {
                t->time_up = true;
                break;
            }
        }
    }
    progress_end(&pb);
    return true;
}

/* The validation graph's step on the training step's device, opened (and its
 * memory checked) before step 0 like the training step's. */
static bool open_eval_cuda(Trainer *t, char *err, int errcap) {
    const Plan *ep = t->plan.eval;
    if (!(t->evcuda = calloc(1, sizeof *t->evcuda)) || !(t->evcshapes = calloc(1, sizeof *t->evcshapes))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    char why[1024];
    /* validation runs between training steps, never during one: it borrows the training step's arena and workspace */
    const CudaLend lend = {.arena = &t->ts.cuda->mem, .workspace = &t->ts.cuda->mem};
    if (!cuda_step_open_sharing(t->evcuda, ep, t->ts.cuda->dev.ordinal, &lend, why, sizeof why)) {
        free(t->evcuda);
        t->evcuda = NULL;
        return errf(err, errcap, "validation graph on the GPU: %s", why);
    }
    /* each validation batch replays the graphs its first batch captured, as training steps do */
    if (!cuda_step_use_graphs(t->evcuda, cuda_step_graphs_wanted(t->evcuda), why, sizeof why)) return errf(err, errcap, "validation graph on the GPU: %s", why);
    *t->evcshapes = (CudaShapes){.train = &t->plan, .own = t->evcuda, .runs = t->ts.cuda};
    return true;
}

/* The graphs of the rect validation batches' other shapes (the loader is
 * open), so that the device memory line below holds all of validation and a
 * shape the plan's kernels cannot serve stops the run before training. */
static bool open_eval_cuda_shapes(Trainer *t, int batch, char *err, int errcap) {
    int(*hw)[2] = loader_batch_shapes(t->val_loader);
    if (!hw) return snprintf(err, (size_t)errcap, "out of memory"), false;
    const bool ok = cuda_shapes_open(t->evcshapes, batch, loader_batches_per_epoch(t->val_loader), (const int(*)[2])hw, err, errcap);
    free(hw);
    if (!ok) return false;
    /* host space for the largest predictions of any shape */
    const Plan *ep = t->plan.eval;
    int64_t most = shape_numel(&ep->g.tensors[plan_meta_tensor(ep, "outputs", "predictions")].shape);
    for (int i = 0; i < t->evcshapes->n; i++) {
        const EvalIO *io = &t->evcshapes->s[i]->io;
        const int64_t n = (int64_t)io->batch * (4 + io->nc) * io->anchors;
        most = n > most ? n : most;
    }
    if (!(t->evpred = malloc(sizeof(float) * (size_t)most))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    const CudaStep *cs = t->ts.cuda;
    const CudaMem *em = &t->evcuda->mem;
    const char *lent = em->arena_lent && em->workspace_lent ? ", arena and workspace shared with training"
                       : em->arena_lent                     ? ", arena shared with training"
                       : em->workspace_lent                 ? ", workspace shared with training"
                                                            : "";
    char shapes[160] = "";
    if (t->evcshapes->n)
        snprintf(shapes, sizeof shapes, " + %.3f GB for %d other rect shape%s", (double)cuda_shapes_device_bytes(t->evcshapes) / 1e9, t->evcshapes->n,
                 t->evcshapes->n == 1 ? "" : "s");
    char user[32];
    device_user_name(cs->dev.ordinal, user, sizeof user);
    printf("CUDA:%s (%s, sm_%d): %.3f GB for training (arena %.3f, persistent %.3f, workspace %.3f, EMA %.3f) + %.3f GB for validation (arena %.3f%s)%s, checked "
           "against free memory before step 0\n",
           user, cs->dev.name, cs->dev.sm, (double)cuda_step_device_bytes(cs) / 1e9, (double)cs->mem.layout.arena_bytes / 1e9,
           (double)cs->mem.layout.persistent_bytes / 1e9, (double)cs->mem.workspace_bytes / 1e9, (double)cs->ema_bytes / 1e9,
           (double)cuda_step_device_bytes(t->evcuda) / 1e9, (double)em->layout.arena_bytes / 1e9, lent, shapes);
    char line[1536];
    cuda_step_describe(cs, line, sizeof line);
    printf("CUDA step: %s\n", line);
    return true;
}

/* Pins a loader's pixel slots for the device step that uploads from them
 * (the training or the validation CudaStep; NULL for CPU plans: nothing). */
static bool pin_loader(const Loader *l, CudaStep *cs, char *err, int errcap) {
    void *bufs[LOADER_SLOTS];
    size_t bytes;
    int n = loader_pixel_buffers(l, bufs, &bytes);
    for (int i = 0; cs && i < n; i++)
        if (!cuda_step_pin(cs, bufs[i], bytes, err, errcap)) return false;
    return true;
}

/* Letterboxed validation batches of the validation plan's size, as bytes
 * when the validation graph runs on a device that divides them itself. */
static bool open_val_loader(Trainer *t, LoaderOptions o, char *err, int errcap) {
    o.bytes = t->evcuda && t->evcuda->kern.lp.images_u8 >= 0;
    return (t->val_loader = loader_open(&t->ds.val, &o, err, errcap)) != NULL && pin_loader(t->val_loader, t->evcuda, err, errcap);
}

static bool setup(Trainer *t, char *err, int errcap) {
    TrainArgs *a = &t->a;
    if (!plan_read(a->plan, &t->plan, err, errcap)) return false;
    /* the ranks before the step: a CUDA plan's rank picks its device from them */
    t->dp_open = true; /* a failed start may have started MPI: dp_finalize ends it */
    if (!dp_init(&t->dp, plan_targets_cuda(&t->plan), err, errcap)) return false;
    t->world = t->dp.comm.ranks.world;
    t->root = dp_is_root(&t->dp);
    int plan_world = (int)cjson_number(t->plan.meta, "world_size", 1);
    if (plan_world != t->world)
        return snprintf(err, (size_t)errcap, "%s was compiled for %d rank%s and runs on %d: recompile with yolocc ... --batch B --world-size %d (B images on each rank)", a->plan,
                        plan_world, plan_world == 1 ? "" : "s", t->world, t->world),
               false;
    /* rank 0 alone prints (the others' errors still reach stderr) */
    if (!t->root && !freopen("/dev/null", "w", stdout)) return snprintf(err, (size_t)errcap, "rank %d: cannot silence stdout: %s", t->dp.comm.ranks.rank, strerror(errno)), false;
    bool crc_ok;
    t->plan_crc = file_crc32(a->plan, &crc_ok);
    if (!crc_ok) return snprintf(err, (size_t)errcap, "%s: cannot read the file", a->plan), false;
    if (!t->plan.eval) return snprintf(err, (size_t)errcap, "%s: the plan has no validation graph; recompile it with this yolocc", a->plan), false;
    if (!train_step_init(&t->ts, &t->plan, err, errcap)) return false;
    train_step_set_fast(&t->ts, !a->reference);
    if (a->batch > 0 && a->batch != t->ts.batch * t->world) {
        if (t->world > 1)
            return snprintf(err, (size_t)errcap, "--batch %d (all ranks' images together) differs from the plan's %d a rank x %d ranks%s; recompile: yolocc MODEL.yaml --batch %d --world-size %d",
                            a->batch, t->ts.batch, t->world, a->batch % t->world ? " (and is no multiple of the ranks)" : "", a->batch / t->world > 0 ? a->batch / t->world : 1, t->world),
                   false;
        return snprintf(err, (size_t)errcap, "--batch %d differs from the plan's batch %d; recompile: yolocc MODEL.yaml --batch %d --imgsz %d -o PLAN", a->batch, t->ts.batch,
                        a->batch, t->ts.imgsz),
               false;
    }
    double wd_hyp = cjson_number(t->plan.meta, "weight_decay_hyp", -1);
    if (a->weight_decay >= 0 && fabs(a->weight_decay - wd_hyp) > 1e-12)
        return snprintf(err, (size_t)errcap, "--weight-decay %g differs from the plan's %g; weight decay is compiled in: yolocc ... --weight-decay %g", a->weight_decay, wd_hyp,
                        a->weight_decay),
               false;
    double gains[3];
    if (!plan_loss_gains(&t->plan, gains)) return snprintf(err, (size_t)errcap, "%s: the training graph has no detection loss", a->plan), false;
    static const char *const GAIN_OPT[3] = {"--box", "--cls", "--dfl"};
    for (int k = 0; k < 3; k++)
        if (a->gains[k] >= 0 && fabs(a->gains[k] - gains[k]) > 1e-12)
            return snprintf(err, (size_t)errcap, "%s %g differs from the plan's %g; the loss gains are compiled in: yolocc ... %s %g", GAIN_OPT[k], a->gains[k], gains[k],
                            GAIN_OPT[k], a->gains[k]),
                   false;
    const char *opt = cJSON_GetStringValue(cJSON_GetObjectItem(t->plan.meta, "optimizer"));
    t->adamw = opt && strcmp(opt, "AdamW") == 0;
    t->accumulate = (int)cjson_number(t->plan.meta, "accumulate", 1);
    if (a->single_cls && t->ts.nc != 1)
        return snprintf(err, (size_t)errcap, "--single-cls trains one class; the plan was compiled for %d: recompile with yolocc ... --nc 1", t->ts.nc), false;
    const DatasetOptions dso = {.fraction = a->fraction, .single_cls = a->single_cls};
    if (!dataset_load(a->data, &dso, &t->ds, t->root ? stderr : NULL, err, errcap)) return false;
    if (a->single_cls) printf("Overriding class names with single class.\n");
    if (t->ds.nc != t->ts.nc)
        return snprintf(err, (size_t)errcap, "%s has %d classes, the plan was compiled for %d; recompile with yolocc ... --nc %d%s", a->data, t->ds.nc, t->ts.nc, t->ds.nc,
                        t->ts.nc == 1 ? " (or train them as one with --single-cls)" : ""),
               false;
    char line[512];
    dataset_issues_format("train", &t->ds.train, line, sizeof line);
    printf("%s\n", line);
    dataset_issues_format("val", &t->ds.val, line, sizeof line);
    printf("%s\n", line);
    optimizer_defaults(t);
    LoaderOptions lo = {.batch = t->ts.batch, .imgsz = t->ts.imgsz, .max_boxes = t->ts.max_boxes, .train = true, .hyp = a->hyp, .seed = (uint64_t)a->seed,
                        .workers = a->workers, .cache_ram = a->cache_ram, .shard = t->dp.comm.ranks.rank, .shards = t->world};
    /* a CUDA plan takes the training pixels as bytes and divides them on the device, as Ultralytics' preprocess_batch does */
    if (t->ts.cuda && !train_step_takes_bytes(&t->ts, err, errcap)) return false;
    lo.bytes = t->ts.cuda != NULL;
    /* --cache ram as Ultralytics' check_cache_ram: each split's load-resized
     * images with a 50% margin against what is available, else no cache */
    uint64_t cache_room = 0;
    char source[1200];
    if (a->cache_ram && !host_memory_available(&cache_room, source, sizeof source)) cache_room = 0;
    lo.cache_ram = a->cache_ram && trainer_cache_fits(t, &t->ds.train, "train: ", &cache_room);
    /* --cache disk: rank 0 writes both splits' .npy files (atomically: the other ranks' loaders read whole files or none) */
    if (a->cache_disk && t->root && (!trainer_cache_disk(&t->ds.train, "train: ", err, errcap) || !trainer_cache_disk(&t->ds.val, "val: ", err, errcap))) return false;
    if (!(t->train_loader = loader_open(&t->ds.train, &lo, err, errcap)) || !pin_loader(t->train_loader, t->ts.cuda, err, errcap)) return false;
    const Plan *ep = t->plan.eval;
    /* the validation loader opens once the validation graph's device is known (open_val_loader) */
    LoaderOptions val = lo;
    val.train = false;
    val.shard = val.shards = 0;
    val.cache_ram = a->cache_ram && t->root && trainer_cache_fits(t, &t->ds.val, "val: ", &cache_room);
    val.batch = (int)cjson_number(ep->meta, "batch", 0);
    val.max_boxes = (int)cjson_number(ep->meta, "max_boxes", 0);
    t->nb = loader_batches_per_epoch(t->train_loader);
    t->nw = warmup_iterations(a->warmup_epochs, t->nb);
    if (a->weights) {
        WeightsLoadReport rep;
        if (!weights_load(&t->plan.g, t->ts.it.buf, a->weights, NULL, &rep, err, errcap)) return false;
        weights_report_format(&rep, line, sizeof line);
        printf("%s\n", line);
    } else if (!weights_init(&t->plan.g, t->ts.it.buf, (uint64_t)a->seed, err, errcap)) {
        return false;
    }
    train_step_host_changed(&t->ts);
    if (!ema_init(t) || !freeze_layers(t)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    /* a CUDA plan's EMA lives on the device, uploaded before its first update */
    if (t->ts.cuda && !cuda_step_ema_open(t->ts.cuda, err, errcap)) return false;
    t->ema_dev_stale = t->ts.cuda != NULL;
    /* the validation graph reads the EMA in place: same model, same state order */
    if (!interp_init(&t->ev, &ep->g)) return snprintf(err, (size_t)errcap, "out of memory"), false;
    t->ev.fast = !a->reference;
    if (ep->g.n_state != t->plan.g.n_state) return snprintf(err, (size_t)errcap, "%s: the validation graph's state differs from the training graph's", a->plan), false;
    const int bad = graph_state_differs(&ep->g, &t->plan.g);
    if (bad >= 0) return snprintf(err, (size_t)errcap, "%s: validation tensor '%s' does not match the training graph", a->plan, ep->g.tensors[ep->g.state[bad]].name), false;
    for (int i = 0; i < ep->g.n_state; i++) t->ev.buf[ep->g.state[i]] = t->ema[t->plan.g.state[i]];
    if (!(t->evstate = calloc((size_t)ep->g.n_state + 1, sizeof *t->evstate))) return snprintf(err, (size_t)errcap, "out of memory"), false;
    for (int i = 0; i < ep->g.n_state; i++) t->evstate[i] = t->ev.buf[ep->g.state[i]];
    /* rank 0 alone validates: the others open neither the validation graph
     * (its arena, on a GPU device memory) nor its loader */
    if (!t->root) {
        print_optimizer(t, opt ? opt : "?");
        return true;
    }
    /* validation as Ultralytics' trainer runs it, in rect batches (its val
     * loader's rect=True), each other shape a graph of its own */
    val.rect = true, val.stride = eval_plan_stride(&t->plan);
    if (t->ts.cuda) {
        for (int id = 0; id < ep->g.n_tensors; id++)
            if (ep->g.tensors[id].kind == TK_INPUT && !interp_tensor(&t->ev, id)) return snprintf(err, (size_t)errcap, "out of memory"), false;
        if (!open_eval_cuda(t, err, errcap) || !open_val_loader(t, val, err, errcap) || !open_eval_cuda_shapes(t, val.batch, err, errcap)) return false;
        print_optimizer(t, opt ? opt : "?");
        return true;
    }
    /* the CPU: a batch's other shape runs the model built again at that
     * shape (eval_shape.h), reading the same EMA */
    char why[600];
    if (!eval_graph_open(&t->evg, ep, t->evstate, a->reference, false, why, sizeof why)) return snprintf(err, (size_t)errcap, "%s: %s", a->plan, why), false;
    t->evshapes = (EvalShapes){.train = &t->plan, .state = t->evstate, .reference = a->reference};
    if (!open_val_loader(t, val, err, errcap)) return false;
    /* rank 0 builds every rect batch's graph now, so a shape the plan's
     * kernels cannot serve stops the run before training, not after an epoch */
    for (int i = 0; t->root && i < loader_batches_per_epoch(t->val_loader); i++) {
        int h, w;
        loader_batch_shape(t->val_loader, i, &h, &w);
        if ((h != t->ts.imgsz || w != t->ts.imgsz) && !eval_shapes_get(&t->evshapes, val.batch, h, w, err, errcap)) return false;
    }
    print_optimizer(t, opt ? opt : "?");
    return true;
}

/* Continues from the state file read by resume_args. */
static bool resume(Trainer *t, const StFile *f, const cJSON *s, char *err, int errcap) {
    uint32_t crc = (uint32_t)cjson_number(s, "plan_crc32", -1);
    if (crc != t->plan_crc) return snprintf(err, (size_t)errcap, "%s was written for another plan (plan checksum %08x, %s has %08x)", t->a.resume, crc, t->a.plan, t->plan_crc), false;
    if (!state_restore(t, f, t->a.resume, err, errcap)) return false;
    train_step_host_changed(&t->ts);
    t->ema_dev_stale = t->ts.cuda != NULL;
    t->start_epoch = (int)cjson_number(s, "epoch", -2) + 1;
    t->last_opt_step = (int)cjson_number(s, "last_opt_step", -1);
    t->ts.step = (long)cjson_number(s, "opt_steps", 0);
    t->ts.n_acc_batches = (int)cjson_number(s, "acc_batches", 0);
    t->ema_updates = (long)cjson_number(s, "ema_updates", 0);
    t->best_fitness = cjson_number(s, "best_fitness", 0);
    t->best_epoch = (int)cjson_number(s, "best_epoch", 0);
    t->resumed_elapsed = cjson_number(s, "elapsed", 0);
    t->mosaic_closed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "mosaic_closed"));
    if (t->start_epoch < 1) return snprintf(err, (size_t)errcap, "%s: no finished epoch to resume from", t->a.resume), false;
    if (t->start_epoch >= t->a.epochs) return snprintf(err, (size_t)errcap, "%s: training already finished %d epochs; nothing to resume", t->a.resume, t->a.epochs), false;
    printf("Resuming training from %s from epoch %d to %d total epochs\n", t->a.resume, t->start_epoch + 1, t->a.epochs);
    return true;
}

/* Reads the state file once (checksums included): its arguments are needed
 * before set-up, its tensors after. */
static bool resume_args(TrainArgs *a, StFile *f, cJSON **s, char *err, int errcap) {
    if (!ckpt_read(a->resume, f, s, err, errcap)) return false;
    if (!train_args_from_json(a, cJSON_GetObjectItemCaseSensitive(*s, "args"))) return snprintf(err, (size_t)errcap, "%s: the training arguments are missing", a->resume), false;
    return true;
}

static void results_row(const Trainer *t, int epoch, const double tl[3], ResultsRow *r) {
    double v[RESULTS_NCOLS] = {epoch + 1, monotonic_seconds() - t->t0, tl[0], tl[1], tl[2], t->last_val.precision, t->last_val.recall, t->last_val.map50,
                               t->last_val.map50_95, t->last_val.loss[0], t->last_val.loss[1], t->last_val.loss[2], t->lrs[0], t->lrs[1], t->lrs[2]};
    memcpy(r->v, v, sizeof v);
}

static void trainer_free(Trainer *t) {
    if (t->dp_open) dp_detach(&t->dp); /* NCCL before the device it runs on */
    loader_close(t->train_loader);
    loader_close(t->val_loader);
    dataset_free(&t->ds);
    eval_shapes_free(&t->evshapes);
    eval_graph_close(&t->evg);
    interp_free(&t->ev);
    free(t->evstate);
    if (t->evcshapes) cuda_shapes_close(t->evcshapes);
    free(t->evcshapes);
    if (t->evcuda) cuda_step_close(t->evcuda);
    free(t->evcuda);
    free(t->evpred);
    ema_free(t);
    free(t->skip);
    train_step_free(&t->ts);
    plan_free(&t->plan);
}

/* The directory of a run from its state file: RUN/weights/last.state -> RUN. */
static bool dir_of_state(const char *state, char *dir, size_t cap) {
    snprintf(dir, cap, "%s", state);
    for (int k = 0; k < 2; k++) {
        char *slash = strrchr(dir, '/');
        if (!slash) return false;
        *slash = 0;
    }
    return dir[0] != 0;
}

int train_main(const TrainArgs *args) {
    Trainer *t = calloc(1, sizeof *t);
    if (!t) return fprintf(stderr, "yolort: error: out of memory\n"), 1;
    t->a = *args;
    t->t0 = monotonic_seconds();
    t->last_opt_step = -1;
    char err[1024] = "", state_path[1200];
    cJSON *resumed = NULL;
    StFile resume_file = {0};
    int rc = 2;
    if (t->a.resume) {
        struct stat st;
        if (stat(t->a.resume, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(state_path, sizeof state_path, "%s/weights/last.state", t->a.resume);
            t->a.resume = state_path;
        }
        if (!resume_args(&t->a, &resume_file, &resumed, err, sizeof err)) goto out;
    }
    t->rss0 = process_rss_bytes();
    if (!setup(t, err, sizeof err)) goto out;
    /* before the run directory: a run that cannot fit leaves nothing behind */
    if (!t->ts.cuda && !trainer_host_memory_check(t, err, sizeof err)) goto out;
    if (t->a.resume) {
        if (!dir_of_state(t->a.resume, t->dir, sizeof t->dir)) {
            snprintf(err, sizeof err, "%s: expected RUN/weights/last.state", t->a.resume);
            goto out;
        }
        bool ok = resume(t, &resume_file, resumed, err, sizeof err);
        st_free(&resume_file);
        if (!ok) goto out;
    } else if (t->root && !run_dir(t, err, sizeof err)) {
        goto out;
    }
    /* rank 0's parameters and buffers to every rank, and the gradient sums, as DDP does */
    if (!dp_attach(&t->dp, &t->ts, err, sizeof err)) goto out;
    if (t->a.resume) dp_state_restored(&t->dp, &t->ts);
    if (t->root) {
        train_write_args_yaml(t);
        if (t->a.plots) {
            char labels[1200], why[1024];
            path_in(t, "labels.svg", labels, sizeof labels);
            printf("Plotting labels to %s... \n", labels);
            if (!report_labels_svg(labels, &t->ds.train, t->ds.nc, (const char *const *)t->ds.names, why, sizeof why)) fprintf(stderr, "yolort: warning: %s\n", why);
        }
    }
    rc = 1;
    if (t->world > 1) printf("DDP: %d ranks (%s), %d images each a batch, gradients summed over ranks\n", t->world, ranks_launcher_name(&t->dp.comm.ranks), t->ts.batch);
    printf("Image sizes %d train, %d val\nLogging results to %s\n", t->ts.imgsz, t->ts.imgsz, t->dir);
    if (t->a.time > 0) printf("Starting training for %g hours...\n", t->a.time);
    else printf("Starting training for %d epochs...\n", t->a.epochs);
    /* the clock of results.csv and --time starts here, after set-up (plus a resumed run's earlier training time) */
    t->t0 = monotonic_seconds() - t->resumed_elapsed;
    char csv[1200], svg[1200];
    path_in(t, "results.csv", csv, sizeof csv);
    path_in(t, "results.svg", svg, sizeof svg);
    int epoch = t->start_epoch;
    enum { GO_ON, EARLY_STOP, TIME_STOP };
    /* under --time the epochs change as the run goes; the run ends at the final epoch or when the time is up */
    for (; t->a.time > 0 || epoch < t->a.epochs; epoch++) {
        double tl[3];
        if (!train_epoch(t, epoch, tl, err, sizeof err)) goto out;
        bool final = epoch + 1 >= t->a.epochs;
        int decision = GO_ON;
        bool is_best = false;
        /* rank 0 validates, keeps the results and decides; the others wait for its decision */
        if (t->root) {
            bool possible_stop = t->a.patience > 0 && (epoch + 1) - t->best_epoch >= t->a.patience - 1;
            if (t->a.val || final || possible_stop || t->time_up) {
                if (!ema_sync_host(t, err, sizeof err) || !validate_run(t, false, NULL, &t->last_val, err, sizeof err)) goto out;
            }
            ResultsRow row;
            results_row(t, epoch, tl, &row);
            if (!results_csv_append(csv, &row, err, sizeof err)) goto out;
            if (t->a.plots && !report_plot_svg(csv, svg, err, sizeof err)) fprintf(stderr, "yolort: warning: %s\n", err);
            /* fitness as Ultralytics uses it: rounded to 5 decimals; ties count as best */
            double fit = nearbyint(t->last_val.fitness * 1e5) / 1e5;
            is_best = fit >= t->best_fitness;
            if (is_best) {
                t->best_fitness = fit;
                t->best_epoch = epoch + 1;
            }
            if (t->a.time > 0 && (timed_epochs(t, epoch) || final)) decision = TIME_STOP;
            else if (t->a.patience > 0 && (epoch + 1) - t->best_epoch >= t->a.patience && !final) decision = EARLY_STOP;
            /* a run the time ended is finished: its state says so to --resume */
            if (decision == TIME_STOP) t->a.epochs = epoch + 1;
        }
        if (!agree(t, &decision, true, err, sizeof err) || !dp_settle_accumulated(&t->dp, &t->ts, err, sizeof err)) goto out;
        if (t->root && !save_epoch(t, epoch, is_best, err, sizeof err)) goto out;
        if (t->a.stop_after > 0 && epoch + 1 - t->start_epoch >= t->a.stop_after && !final) {
            printf("Stopping after %d epochs as asked; continue with: yolort train %s --resume %s\n", t->a.stop_after, t->a.plan, t->dir);
            rc = 0;
            goto out;
        }
        if (decision == EARLY_STOP)
            printf("Stopping training early as no improvement observed in last %d epochs. Best results observed at epoch %d.\n", t->a.patience, t->best_epoch);
        if (decision != GO_ON) {
            epoch++;
            break;
        }
    }
    printf("\n%d epochs completed in %.3f hours.\n", epoch - t->start_epoch, (monotonic_seconds() - t->t0) / 3600.0);
    /* every rank ends with the same parameters and optimizer state, or the run failed */
    if (t->world > 1 && (!train_step_sync_host(&t->ts, true, err, sizeof err) || !dp_check_in_sync(&t->dp, err, sizeof err))) goto out;
    if (t->root) {
        /* final evaluation of best.safetensors, with a row per class */
        char best[1200];
        path_in(t, "weights/best.safetensors", best, sizeof best);
        t->ema_host_stale = false; /* replaced by best's weights */
        if (!weights_load(&t->plan.g, t->ema, best, NULL, NULL, err, sizeof err)) goto out;
        printf("Validating %s...\n", best);
        ValResult v;
        if (!validate_run(t, true, t->a.plots ? t->dir : NULL, &v, err, sizeof err)) goto out;
        printf("Results saved to %s\n", t->dir);
        if (t->host_planned > 0)
            printf("Peak host memory %.3f GB (%.3f GB known before step 0)\n", (double)process_peak_rss_bytes() / 1e9, (double)t->host_planned / 1e9);
    }
    rc = 0;
out:
    if (rc && t->world > 1) fprintf(stderr, "yolort: error: rank %d: %s\n", t->dp.comm.ranks.rank, err);
    else if (rc) fprintf(stderr, "yolort: error: %s\n", err);
    cJSON_Delete(resumed);
    st_free(&resume_file);
    bool dp_open = t->dp_open;
    trainer_free(t); /* detaches t->dp: what is left of it is MPI's */
    DataParallel dp = t->dp;
    free(t);
    /* MPI ends last: after a failure it aborts the whole job, so no rank waits out its watchdog */
    if (dp_open) dp_finalize(&dp, rc);
    return rc;
}

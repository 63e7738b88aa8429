/* runtime/train/train_state.c — what outlives a training process: the EMA,
 * the training-state file (model, EMA, optimizer state, gradient
 * accumulators, scalars) and the weights files. Must not touch: the epoch
 * loop's control flow or the console output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <cjson/cJSON.h>

#include "../cuda/cuda_step.h"
#include "../weights.h"
#include "checkpoint.h"
#include "schedule.h"
#include "train_state.h"

bool ema_init(Trainer *t) {
    const Graph *g = &t->plan.g;
    t->ema = calloc((size_t)g->n_tensors, sizeof(void *));
    if (!t->ema) return false;
    for (int i = 0; i < g->n_state; i++) {
        int id = g->state[i];
        size_t n = (size_t)interp_tensor_bytes(&g->tensors[id]);
        if (!(t->ema[id] = malloc(n ? n : 1))) return false;
        memcpy(t->ema[id], t->ts.it.buf[id], n);
    }
    return true;
}

void ema_free(Trainer *t) {
    if (!t->ema) return;
    for (int i = 0; i < t->plan.g.n_tensors; i++) free(t->ema[i]);
    free(t->ema);
    t->ema = NULL;
}

bool ema_sync_host(Trainer *t, char *err, int errcap) {
    if (!t->ema_host_stale) return true;
    if (!cuda_step_ema_download(t->ts.cuda, t->ema, err, errcap)) return false;
    t->ema_host_stale = false;
    return true;
}

bool ema_update(Trainer *t, char *err, int errcap) {
    const Graph *g = &t->plan.g;
    t->ema_updates++;
    /* ModelEMA: v *= d; v += (1 - d) * model, in fp32; integer buffers keep their value */
    float d = (float)ema_decay(t->ema_updates), e = (float)(1.0 - ema_decay(t->ema_updates));
    if (t->ts.cuda) {
        /* the same arithmetic on the device (templates/cuda/lib/ema.cu), from the device's parameters */
        if (t->ema_dev_stale && !cuda_step_ema_upload(t->ts.cuda, t->ema, err, errcap)) return false;
        t->ema_dev_stale = false;
        t->ema_host_stale = true;
        return cuda_step_ema_update(t->ts.cuda, d, e, err, errcap);
    }
    for (int i = 0; i < g->n_state; i++) {
        int id = g->state[i];
        if (g->tensors[id].dtype != DT_F32) continue;
        float *v = t->ema[id];
        const float *m = t->ts.it.buf[id];
        int64_t n = shape_numel(&g->tensors[id].shape);
        for (int64_t k = 0; k < n; k++) {
            v[k] *= d;
            v[k] += e * m[k];
        }
    }
    return true;
}

uint32_t file_crc32(const char *path, bool *ok) {
    FILE *f = fopen(path, "rb");
    uLong crc = crc32(0L, Z_NULL, 0);
    *ok = f != NULL;
    if (!f) return 0;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) crc = crc32(crc, buf, (uInt)n);
    *ok = !ferror(f);
    fclose(f);
    return (uint32_t)crc;
}

/* The tensors of a training-state file: one name per (prefix, tensor), in a
 * fixed order so the file is a pure function of the state. */
typedef struct StateList {
    StWriteItem *items;
    char **names;
    int64_t (*shapes)[IR_MAX_DIMS];
    int n;
} StateList;

static bool list_add(StateList *l, const char *prefix, const char *name, const Tensor *t, const void *data) {
    size_t len = strlen(prefix) + strlen(name) + 2;
    char *full = malloc(len);
    if (!full) return false;
    snprintf(full, len, "%s/%s", prefix, name);
    l->names[l->n] = full;
    for (int d = 0; d < t->shape.nd; d++) l->shapes[l->n][d] = t->shape.d[d];
    l->items[l->n] = (StWriteItem){full, t->dtype == DT_I64 ? ST_I64 : ST_F32, t->shape.nd, l->shapes[l->n], data};
    l->n++;
    return true;
}

static void list_free(StateList *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->items);
    free(l->names);
    free(l->shapes);
}

static bool state_list(Trainer *t, StateList *l) {
    const Graph *g = &t->plan.g;
    int n_grads;
    const int *grads = train_step_grads(&t->ts, &n_grads);
    size_t cap = (size_t)(2 * g->n_state + g->n_tensors + n_grads + 1);
    l->items = calloc(cap, sizeof *l->items);
    l->names = calloc(cap, sizeof *l->names);
    l->shapes = calloc(cap, sizeof *l->shapes);
    l->n = 0;
    if (!l->items || !l->names || !l->shapes) return false;
    for (int i = 0; i < g->n_state; i++) {
        int id = g->state[i];
        if (!list_add(l, "model", g->tensors[id].name, &g->tensors[id], t->ts.it.buf[id]) || !list_add(l, "ema", g->tensors[id].name, &g->tensors[id], t->ema[id]))
            return false;
    }
    for (int id = 0; id < g->n_tensors; id++)
        if (g->tensors[id].kind == TK_OPTIM && !list_add(l, "optim", g->tensors[id].name, &g->tensors[id], t->ts.it.buf[id])) return false;
    for (int i = 0; i < n_grads; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "%d", i);
        Tensor shape_only = g->tensors[grads[i]];
        shape_only.dtype = DT_F32;
        if (!list_add(l, "accum", nm, &shape_only, t->ts.acc[i])) return false;
    }
    return true;
}

bool state_save(Trainer *t, const char *path, cJSON *scalars, char *err, int errcap) {
    StateList l = {0};
    bool ok = state_list(t, &l);
    if (!ok) snprintf(err, (size_t)errcap, "out of memory");
    else ok = ckpt_write(path, l.items, l.n, scalars, err, errcap);
    list_free(&l);
    return ok;
}

bool state_restore(Trainer *t, const StFile *f, const char *path, char *err, int errcap) {
    StateList l = {0};
    bool ok = state_list(t, &l);
    if (!ok) snprintf(err, (size_t)errcap, "out of memory");
    /* check every tensor first, so a mismatched file changes nothing */
    for (int i = 0; ok && i < l.n; i++) {
        const StTensor *s = st_find(f, l.items[i].name);
        if (!s || s->dtype != l.items[i].dtype || s->nbytes != ckpt_item_bytes(&l.items[i])) {
            snprintf(err, (size_t)errcap, "%s: tensor '%s' is %s in the file; the plan needs another shape or dtype", path, l.items[i].name, s ? "different" : "missing");
            ok = false;
        }
    }
    if (ok && f->n != l.n) {
        snprintf(err, (size_t)errcap, "%s: %d tensors, the plan's training state has %d", path, f->n, l.n);
        ok = false;
    }
    for (int i = 0; ok && i < l.n; i++) {
        const StTensor *s = st_find(f, l.items[i].name);
        memcpy((void *)l.items[i].data, s->data, s->nbytes);
    }
    list_free(&l);
    return ok;
}

bool ema_save_weights(Trainer *t, const char *path, char *err, int errcap) {
    char updates[32];
    snprintf(updates, sizeof updates, "%ld", t->ema_updates);
    /* the class names travel with the weights, as in Ultralytics' checkpoints (yolort predict reads them) */
    cJSON *names = cJSON_CreateStringArray((const char *const *)t->ds.names, t->ds.nc);
    char *names_json = names ? cJSON_PrintUnformatted(names) : NULL;
    cJSON_Delete(names);
    if (!names_json) return snprintf(err, (size_t)errcap, "out of memory"), false;
    const char *meta[] = {"format", "pt", "producer", "yolocc", "ema_updates", updates, "names", names_json, NULL};
    bool ok = weights_save(&t->plan.g, t->ema, path, meta, err, errcap);
    free(names_json);
    return ok;
}

/* runtime/train/host_memory.c — the host memory a CPU training run holds
 * before step 0 (set-up allocates every step, validation and loader buffer
 * up front), printed and checked against what this process may still take.
 * Reads the trainer's parts and makes its convolutions' oneDNN primitives
 * (to count their scratch); must not otherwise allocate, train or write files. */
#include <omp.h>
#include <stdio.h>

#include "../cpu_conv.h"
#include "../mem_fit.h"
#include "trainer.h"

/* Bytes of the step that grow with the batch: its arena and its inputs. */
static int64_t step_batch_bytes(const TrainStep *ts) {
    const Interp *it = &ts->it;
    int64_t b = it->arena ? it->arena_bytes : 0;
    for (int t = 0; it->owned && t < it->g->n_tensors; t++)
        if (it->owned[t] && it->g->tensors[t].kind == TK_INPUT) b += interp_tensor_bytes(&it->g->tensors[t]);
    return b;
}

bool trainer_cache_fits(Trainer *t, const DataSplit *split, const char *prefix, uint64_t *room) {
    const int64_t b = loader_cache_bytes(split, t->ts.imgsz);
    const double need = (double)b * 1.5, gib = (double)(1 << 30);
    if (need > (double)*room) {
        printf("%s%.1fGB RAM required to cache images with 50%% safety margin but only %.1f/%.1fGB available, not caching images \xe2\x9a\xa0\xef\xb8\x8f\n", prefix,
               need / gib, (double)*room / gib, (double)host_memory_total() / gib);
        return false;
    }
    *room -= (uint64_t)need;
    t->cache_bytes += b;
    return true;
}

/* Every graph the run's fast kernels will run: the step, validation at the
 * plan's shape and at each other rect shape (index -2, -1, 0.. n-1). */
static const Interp *run_graph(const Trainer *t, int i) { return i == -2 ? &t->ts.it : i == -1 ? &t->evg.ev : &t->evshapes.g[i]->ev; }

bool trainer_host_memory_check(Trainer *t, char *err, int errcap) {
    const Graph *g = &t->plan.g;
    /* the convolutions' primitives now, so that their layout scratch is
     * known and a shape oneDNN cannot run fails before step 0 */
    const int64_t before = process_rss_bytes();
    for (int i = -2; i < t->evshapes.n; i++) {
        char why[400];
        if (run_graph(t, i)->fast && !cpu_conv_prepare(run_graph(t, i)->g, why, sizeof why))
            return snprintf(err, (size_t)errcap, "%s graph: %s", i == -2 ? "training" : "validation", why), false;
    }
    /* their JIT code and descriptors: what making them added to the resident set */
    const int64_t grown = process_rss_bytes() - before, prims = grown > 0 ? grown : 0;
    const int64_t layouts = cpu_conv_layout_scratch_bytes();
    int64_t ema = 0;
    for (int i = 0; t->ema && i < g->n_state; i++) ema += interp_tensor_bytes(&g->tensors[g->state[i]]);
    const int64_t step = train_step_host_bytes(&t->ts), val = interp_host_bytes(&t->evg.ev), shapes = eval_shapes_host_bytes(&t->evshapes),
                  loaders = (t->train_loader ? loader_host_bytes(t->train_loader) : 0) + (t->val_loader ? loader_host_bytes(t->val_loader) : 0);
    /* what runs take on top and give back: the step's or a validation graph's
     * scratch (one runs at a time), and the loader threads' sample images */
    const int threads = omp_get_max_threads();
    int64_t scratch = 0;
    for (int i = -2; i < t->evshapes.n; i++) {
        const int64_t b = interp_transient_bytes(run_graph(t, i), threads);
        if (b > scratch) scratch = b;
    }
    scratch += layouts;
    const int64_t workers = (t->train_loader ? loader_worker_bytes(t->train_loader) : 0) + (t->val_loader ? loader_worker_bytes(t->val_loader) : 0);
    const int64_t total = t->rss0 + prims + step + ema + val + shapes + loaders + t->cache_bytes + scratch + workers, now = process_rss_bytes();
    /* what does not grow with the batch: the program, the parameters with
     * their gradients and optimizer state, the EMA, the threads' scratch
     * (not the layout copies of activations) */
    const int64_t fixed = t->rss0 + prims + step - step_batch_bytes(&t->ts) + ema + t->cache_bytes + scratch - layouts + workers;
    char parts[600];
    snprintf(parts, sizeof parts,
             "training step %.3f, EMA %.3f, validation %.3f + %.3f for %d other shape%s, batch buffers %.3f, RAM cache %.3f, the program %.3f, oneDNN's "
             "primitives %.3f; at most %.3f of kernel "
             "scratch (%.3f of it oneDNN's layouts) and %.3f of loader images while they run",
             (double)step / 1e9, (double)ema / 1e9, (double)val / 1e9, (double)shapes / 1e9, t->evshapes.n, t->evshapes.n == 1 ? "" : "s", (double)loaders / 1e9,
             (double)t->cache_bytes / 1e9, (double)t->rss0 / 1e9, (double)prims / 1e9, (double)scratch / 1e9, (double)layouts / 1e9, (double)workers / 1e9);
    uint64_t avail;
    char source[1200];
    if (!host_memory_available(&avail, source, sizeof source)) return snprintf(err, (size_t)errcap, "cannot read /proc/meminfo: the host memory a run may take is unknown"), false;
    /* ranks on this node share its memory (all of them when the launcher does not say) */
    const int procs = t->dp.comm.ranks.local_world > 0 ? t->dp.comm.ranks.local_world : t->world;
    const HostNeed need = {.total = total, .resident = now, .fixed = fixed, .batch = t->ts.batch, .procs = procs, .avail = avail, .source = source, .parts = parts};
    char line[2400];
    if (!host_memory_check(&need, line, sizeof line)) return snprintf(err, (size_t)errcap, "%s", line), false;
    t->host_planned = total;
    printf("%s\n", line);
    return true;
}

/* runtime/train/report.h — what a person reads during and after `yolort
 * train`: the per-epoch progress bar, results.csv (writer and reader), the
 * results plot (SVG) and args.yaml. Must not touch: training state, the
 * validation table (metrics' job), checkpoints. No global state: the training
 * loop owns every value and passes the clock in (semantics §7, §10). */
#ifndef YOLOCC_REPORT_H
#define YOLOCC_REPORT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* ---- progress bar (runtime/train/report_progress.c) ------------------------
 *
 * One Progress per epoch, as Ultralytics prints it:
 *
 *         (blank line)
 *         Epoch        RAM   box_loss   cls_loss   dfl_loss  Instances       Size
 *           1/3      0.42G      1.234      1.567      1.123         42        640: 100%|██████████| 7/7 [00:07<00:00,  1.00it/s]
 *
 * Columns are "%11s" (header, epoch "e/E", memory "{GB:.3g}G") and "%11.4g"
 * (the three running-mean losses, instances, image size), then ": " and the
 * tqdm-style meter (report_format_meter). Times are monotonic seconds from the
 * caller, so the output is a pure function of the calls.
 *
 * tty: every update redraws the line in place ('\r', padded with spaces over
 *      a longer previous line), at most once per 0.1 s (tqdm's mininterval);
 *      the first update and the one reaching total always draw. progress_end
 *      closes the line with '\n'.
 * not a tty (CI logs, pipes): one finished line per epoch, written when the
 *      last batch is reported (or at progress_end for an epoch cut short),
 *      plus one line whenever 30 s have passed since the epoch began or since
 *      the last such line, so a long epoch still shows signs of life without
 *      flooding the log. A short epoch prints exactly one line.
 *
 * The rate is the epoch's average (done / elapsed), not tqdm's exponential
 * moving average: the first batch's loader warm-up then weighs on the ETA,
 * but the numbers are reproducible from the inputs alone. Write errors on
 * `out` make the calls return false; training should carry on regardless. */
enum { PROGRESS_LINE_CAP = 1024 };

typedef struct Progress {
    FILE *out;
    bool tty;
    int epoch, epochs, total;   /* epoch is 0-based, as the loop counts */
    double t0;                  /* when the epoch's bar was created */
    /* the last reported state, redrawn by progress_end if it was not shown */
    int done, instances, size;
    double mem_gb, losses[3], now;
    bool have_state, shown;     /* shown: the last state is on the screen/log */
    double last_draw, last_log; /* tty redraw throttle; non-tty 30 s marks */
    int last_width;             /* display columns of the last tty line */
    bool write_failed;          /* the header could not be written */
} Progress;

/* Writes "\n" + the header line ("Epoch", mem_label, box_loss, cls_loss,
 * dfl_loss, Instances, Size, each "%11s") and returns the epoch's bar.
 * mem_label is "GPU_mem" on CUDA, "RAM" on the CPU target. epoch is 0-based;
 * total_batches the batches this epoch will run. now: monotonic seconds. */
Progress progress_begin(FILE *out, bool tty, const char *mem_label, int epoch, int epochs, int total_batches,
                        double now);

/* Reports that `done` batches (1..total) are finished; mem_gb in GB (1e9
 * bytes), losses the running means of box/cls/dfl, instances the GT boxes of
 * the batch, size the image width. Draws according to the rules above. */
bool progress_update(Progress *p, int done, double mem_gb, const double losses[3], int instances, int size,
                     double now);

/* Ends the epoch's bar: shows the last state if it is not shown yet, then
 * (tty) ends the line. Nothing is written if no update came. Returns false
 * if this or the header's write failed. */
bool progress_end(Progress *p);

/* The pieces, exposed for tests and for other bars (validation):
 * "%11s" x 7 header, no newline. */
void report_progress_header(char *buf, size_t cap, const char *mem_label);
/* The per-batch description: epoch, memory, losses, instances, size. */
void report_progress_desc(char *buf, size_t cap, int epoch, int epochs, double mem_gb, const double losses[3],
                          int instances, int size);
/* tqdm's interval: "MM:SS", or "H:MM:SS" from one hour on (seconds truncated). */
void report_format_interval(double seconds, char *buf, size_t cap);
/* tqdm's meter with a 10-cell bar: "{pct:3.0f}%|{bar}| n/total
 * [elapsed<remaining, rate]", rate "%5.2fit/s" or, below 1 it/s, "%5.2fs/it";
 * "?" for the rate and remaining time while nothing is done or no time passed.
 * The bar uses U+2588 for full cells and U+258F..U+2589 for eighths. */
void report_format_meter(char *buf, size_t cap, int n, int total, double elapsed);

/* ---- results.csv (runtime/train/report_files.c) ----------------------------
 *
 * One row per epoch, the 15 columns of §10 in this order, header once, values
 * "%.6g" joined by ',' with no padding, exactly Ultralytics' save_metrics
 * (NaN is written "nan" as Python does, never "-nan"). */
enum ResultsCol {
    RESULTS_EPOCH,      /* 1-based */
    RESULTS_TIME,       /* seconds since training start */
    RESULTS_TRAIN_BOX, RESULTS_TRAIN_CLS, RESULTS_TRAIN_DFL,
    RESULTS_PRECISION, RESULTS_RECALL, RESULTS_MAP50, RESULTS_MAP50_95,
    RESULTS_VAL_BOX, RESULTS_VAL_CLS, RESULTS_VAL_DFL,
    RESULTS_LR_PG0, RESULTS_LR_PG1, RESULTS_LR_PG2,
    RESULTS_NCOLS
};
extern const char *const results_csv_columns[RESULTS_NCOLS];

typedef struct ResultsRow {
    double v[RESULTS_NCOLS];   /* indexed by enum ResultsCol */
} ResultsRow;

typedef struct ResultsTable {
    int n;
    ResultsRow *rows;   /* malloc'd; results_table_free */
} ResultsTable;

/* Appends one epoch's row, rewriting the whole file through atomic_write so
 * that a crash leaves either the old file or the new one, never half a row.
 * Pass the raw running-mean train losses: they are rounded to 5 decimals
 * here, as Ultralytics' label_loss_items does (correctly rounded, half to
 * even on the exact binary value, like Python's round). Metrics and val
 * losses are the last validation's (zeros before the first), lr the groups'
 * at the end of the epoch. Rows already in the file whose epoch is >= the new
 * row's are dropped first, so a resumed run that redoes an epoch (crash
 * between results.csv and last.pt) or a fresh run in a reused directory
 * leaves no duplicate or out-of-order epochs. A file that exists but does not
 * parse is an error, and is left as it was. row->v[RESULTS_EPOCH] must be an
 * integer >= 1. */
bool results_csv_append(const char *path, const ResultsRow *row, char *err, int errcap);

/* Parses a results.csv written by results_csv_append (or Ultralytics 8.3's
 * detection trainer): the header must name the 15 columns in order (spaces
 * around names and values are allowed, as in older padded files), every row
 * has 15 numbers (strtod syntax, "nan"/"inf" included), epochs are integers
 * >= 1 and increasing, CRLF line ends and a missing final newline are
 * accepted, blank lines are skipped. Any other text fails with
 * "PATH:LINE: what is wrong". On success *out owns the rows. */
bool results_csv_read(const char *path, ResultsTable *out, char *err, int errcap);
/* The same on bytes in memory; name is used in messages. */
bool results_csv_parse(const char *text, size_t len, const char *name, ResultsTable *out, char *err, int errcap);
void results_table_free(ResultsTable *t);

/* Formats one value as "%.6g" the way Python does ("nan" for every NaN). */
void results_format_value(double v, char *buf, size_t cap);

/* ---- results plot (runtime/train/report_plot.c) ----------------------------
 *
 * Reads csv_path and writes svg_path (atomically): a 1200x600 figure of 2x5
 * panels like Ultralytics' results.png, in its order: train/box_loss,
 * train/cls_loss, train/dfl_loss, metrics/precision(B), metrics/recall(B),
 * val/box_loss, val/cls_loss, val/dfl_loss, metrics/mAP50(B),
 * metrics/mAP50-95(B), each against epoch with a framed axis, ticks, tick
 * labels and the column name as title. The series is a solid polyline with
 * point markers; the dotted line is a gaussian filter with sigma 3 (truncated
 * at 4 sigma, mirror-reflected ends: what scipy's gaussian_filter1d, which
 * Ultralytics uses, computes). Non-finite values and |v| > 1e30 are skipped
 * (the smoothing runs over the points that remain); a constant series gets a
 * small band around its value; one epoch is one marker; a file with a header
 * and no rows gives empty panels. */
bool report_plot_svg(const char *csv_path, const char *svg_path, char *err, int errcap);

/* ---- args.yaml (runtime/train/report_files.c) ------------------------------
 *
 * kv = key, value, key, value, ..., NULL: a NULL in a key position ends the
 * list, one in a value position is YAML null (e.g. {"project", NULL, NULL}). Writes "key: value" lines, one block mapping, in the given order,
 * atomically, through libyaml's emitter, so that a YAML reader (PyYAML as
 * Ultralytics uses it, or libyaml) gets back what was meant:
 *   value NULL              -> null
 *   "true" / "false"        -> plain, a bool
 *   an integer ("16", "-1") -> plain, an int (no leading zeros: "007" is a string)
 *   a float as %g/%.17g etc. prints it ("0.01", "1e-05", "inf", "nan")
 *                           -> plain float, written the way PyYAML does
 *                              ("1.0e-05", ".inf", "-.inf", ".nan")
 *   anything else           -> a string: plain when it reads back as the
 *                              same string, else quoted (empty, "null", "~",
 *                              "yes", "On", "1.5x", ": " inside, a leading
 *                              '-', '[', '#', '*', ...). The string "true"
 *                              cannot be expressed; bools come as "true".
 * Keys must be non-empty strings. */
bool report_write_args_yaml(const char *path, const char *const *kv, char *err, int errcap);

/* mkdir that accepts an existing directory. */
bool report_make_dir(const char *path, char *err, int errcap);
/* Ultralytics' increment_path: creates PROJECT (and its parents) and
 * PROJECT/NAME, or NAME2, NAME3, ... when it exists (exist_ok: reuse NAME);
 * the path goes to dir. */
bool report_run_dir(const char *project, const char *name, bool exist_ok, char *dir, size_t cap, char *err, int errcap);

/* ---- validation plots (runtime/train/report_val_plots.c) -------------------
 *
 * What Ultralytics' validator writes with plots on, drawn as SVG into dir:
 * confusion_matrix.svg and confusion_matrix_normalized.svg (columns divided
 * by their sums; blank under 0.005), confusion_matrix.csv (the counts, as
 * ConfusionMatrix.summary() names its columns), and, when some detection was
 * a true positive, BoxPR_curve.svg (precision against recall at IoU 0.5,
 * legend "NAME AP50" below 21 classes and "all classes MAP50 mAP@0.5"),
 * BoxF1_curve.svg, BoxP_curve.svg and BoxR_curve.svg (against confidence;
 * the mean smoothed by a 5% box filter, labelled by its peak). names: nc
 * class names, or NULL for class0, class1, ... */
struct Metrics;
struct ConfusionMatrix;
struct DataSplit;
bool report_val_plots(const char *dir, const struct Metrics *m, const struct ConfusionMatrix *cm, const char *const *names, char *err,
                      int errcap);

/* ---- labels.svg (runtime/train/report_labels.c) ----------------------------
 *
 * Ultralytics' labels.jpg (plot_labels) for a split's labels: instances per
 * class (bars in the class palette, names below 30 classes), the first 500
 * boxes drawn at one centre, and 50 x 50 histograms of the centres (x, y)
 * and sizes (width, height), shaded up to the count below which the cells
 * hold 90% of the labels (seaborn's pmax 0.9). */
bool report_labels_svg(const char *path, const struct DataSplit *split, int nc, const char *const *names, char *err, int errcap);

#endif

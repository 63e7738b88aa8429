/* runtime/dist/launch.c — `yolort train ... --ranks N` (see launch.h): fork
 * and exec this program N times with torchrun's variables, serve their
 * store, reap them. Owns the child processes and the store server; must not
 * train, touch MPI, NCCL or CUDA. */
#include "launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../argv_option.h"
#include "sock.h"
#include "store_server.h"

#define KILL_GRACE_S 10.0

static bool parse_n(const char *v, int *n) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > LAUNCH_MAX_RANKS) return false;
    *n = (int)x;
    return true;
}

bool launch_find_ranks(int argc, char **argv, int *ranks, int *at, int *span, char *err, int errcap) {
    const char *v;
    *ranks = 1;
    if (!argv_find_option(argc, argv, "--ranks", &v, at, span, err, errcap)) return false;
    if (*at < 0) return true;
    if (!v) return errf(err, errcap, "--ranks needs a number of ranks (1..%d)", LAUNCH_MAX_RANKS);
    if (!parse_n(v, ranks)) return errf(err, errcap, "--ranks must be a number of ranks in 1..%d, got '%s'", LAUNCH_MAX_RANKS, v);
    return true;
}

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

static void child(char **args, int rank, int n, int port, long run) {
    char v[4][32];
    snprintf(v[0], sizeof v[0], "%d", rank);
    snprintf(v[1], sizeof v[1], "%d", n);
    snprintf(v[2], sizeof v[2], "%d", port);
    snprintf(v[3], sizeof v[3], "yolort-%ld", run);
    const char *set[][2] = {{"RANK", v[0]}, {"LOCAL_RANK", v[0]}, {"WORLD_SIZE", v[1]}, {"LOCAL_WORLD_SIZE", v[1]}, {"MASTER_ADDR", "127.0.0.1"},
                            {"MASTER_PORT", v[2]}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RUN_ID", v[3]}, {"TORCHELASTIC_RESTART_COUNT", "0"},
                            {"YOLORT_LAUNCHER", "1"}};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        if (setenv(set[i][0], set[i][1], 1) != 0) _exit(127);
    execv("/proc/self/exe", args);
    fprintf(stderr, "yolort: error: rank %d cannot start: %s\n", rank, strerror(errno));
    _exit(127);
}

static void signal_all(const pid_t *pid, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (pid[i] > 0) kill(pid[i], sig);
}

int launch_ranks(int argc, char **argv, int at, int span, int n, char *err, int errcap) {
    char **args = calloc((size_t)argc + 1, sizeof *args);
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    if (!args || !pid) return free(args), free(pid), errf(err, errcap, "out of memory"), 2;
    for (int i = 0, k = 0; i < argc; i++) /* the ranks' command line: this one without "--ranks N" */
        if (i < at || i >= at + span) args[k++] = argv[i];
    int port = 0;
    StoreServer *s = store_server_open(&port, err, errcap);
    if (!s) return free(args), free(pid), 2;
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    fflush(NULL);
    int started = 0, status = 0;
    const long run = (long)getpid(); /* the run id: this launcher's, the same for every rank */
    for (; started < n; started++) {
        pid[started] = fork();
        if (pid[started] == 0) child(args, started, n, port, run);
        if (pid[started] < 0) {
            status = 2;
            errf(err, errcap, "cannot start rank %d of %d: fork: %s", started, n, strerror(errno));
            break;
        }
    }
    int alive = started;
    double kill_at = 0; /* when the ranks still running get SIGKILL (0: not ending them) */
    if (status) signal_all(pid, started, SIGTERM), kill_at = sock_now_s() + KILL_GRACE_S;
    char why[512];
    while (alive > 0) {
        if (!store_server_serve(s, 50, why, sizeof why) && !status) {
            status = 2;
            errf(err, errcap, "%s", why);
            signal_all(pid, started, SIGTERM), kill_at = sock_now_s() + KILL_GRACE_S;
        }
        if (stop_signal && !kill_at) {
            signal_all(pid, started, (int)stop_signal);
            if (!status) status = 128 + (int)stop_signal;
            kill_at = sock_now_s() + KILL_GRACE_S;
        }
        if (kill_at && sock_now_s() > kill_at) signal_all(pid, started, SIGKILL);
        int st;
        for (pid_t w; (w = waitpid(-1, &st, WNOHANG)) > 0;) {
            for (int i = 0; i < started; i++)
                if (pid[i] == w) pid[i] = 0, alive--;
            const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            if (code != 0 && !status) {
                /* the first failure is the job's; the other ranks would only wait for it */
                status = code;
                errf(err, errcap, "a rank of %d ended with exit status %d; the others were ended", n, code);
                if (!kill_at) signal_all(pid, started, SIGTERM), kill_at = sock_now_s() + KILL_GRACE_S;
            }
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    store_server_close(s);
    free(args);
    free(pid);
    return status;
}

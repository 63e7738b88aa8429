/* compiler/cc_build.c — runs the system C compiler through posix_spawnp on a
 * source written to a private mkdtemp directory. Owns that directory and
 * the flag list; must not use the shell (no system/popen) or leave files. */
#include "cc_build.h"
#include "words.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../ir/diag.h"

extern char **environ;

/* IEEE semantics stay (no -ffast-math, no -fno-math-errno): generated
 * kernels must round exactly like the reference interpreter. The list is
 * also the cache-key text, so keys change whenever the flags do. */
/* -fopenmp: generated loops split channels (and elements) over the cores;
 * every sum stays within one thread, so results do not depend on the count */
static const char *const FLAGS[] = {"-std=c11", "-O2", "-fopenmp", "-fPIC", "-shared", "-Wall", "-Werror"};
enum { N_FLAGS = sizeof FLAGS / sizeof FLAGS[0], MAX_CC_WORDS = 16, PATH_CAP = 4096, LOG_SHOWN = 1500 };

bool cc_options_string(char *buf, int cap) { return words_join(FLAGS, N_FLAGS, buf, cap); }

/* $CC (else "cc") split at blanks into argv[0..); words backs the strings. */
static int cc_words(char *words, size_t cap, char **argv) {
    const char *cc = getenv("CC");
    snprintf(words, cap, "%s", cc && *cc ? cc : "cc");
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(words, " \t", &save); w && n < MAX_CC_WORDS; w = strtok_r(NULL, " \t", &save)) argv[n++] = w;
    if (n == 0) { /* CC set to blanks only */
        snprintf(words, cap, "cc");
        argv[n++] = words;
    }
    return n;
}

/* Starts argv with stdin from /dev/null and stdout and stderr on out_fd. */
static bool spawn(char *const argv[], int out_fd, pid_t *pid, char *err, int errcap) {
    posix_spawn_file_actions_t fa;
    int rc = posix_spawn_file_actions_init(&fa);
    if (rc != 0) return errf(err, errcap, "cannot run %s: posix_spawn_file_actions_init: %s", argv[0], strerror(rc));
    if ((rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) == 0 && (rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1)) == 0)
        rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
    if (rc == 0) rc = posix_spawnp(pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return errf(err, errcap, "cannot run the C compiler %s: %s (set CC to a C compiler)", argv[0], strerror(rc));
    return true;
}

/* true when the child exited; *code is its exit status */
static bool wait_exit(pid_t pid, const char *what, int *code, char *err, int errcap) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return errf(err, errcap, "waitpid for %s: %s", what, strerror(errno));
    if (WIFSIGNALED(st)) return errf(err, errcap, "%s was killed by signal %d", what, WTERMSIG(st));
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return true;
}

static bool write_file(const char *path, const char *text, char *err, int errcap) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return errf(err, errcap, "cannot create %s: %s", path, strerror(errno));
    for (size_t left = strlen(text); left > 0;) {
        ssize_t w = write(fd, text, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            errf(err, errcap, "cannot write %s: %s", path, strerror(errno));
            close(fd);
            return false;
        }
        text += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0) return errf(err, errcap, "cannot close %s: %s", path, strerror(errno));
    return true;
}

/* Reads at most max bytes (all of it when max is 0) into a malloc'd,
 * NUL-terminated buffer. */
static bool read_file(const char *path, size_t max, unsigned char **out, size_t *len, char *err, int errcap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errf(err, errcap, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        errf(err, errcap, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return false;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (max && n > max) n = max;
    unsigned char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return errf(err, errcap, "out of memory reading %s (%zu bytes)", path, n);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            errf(err, errcap, "cannot read %s: %s", path, r < 0 ? strerror(errno) : "file shrank while reading");
            free(buf);
            close(fd);
            return false;
        }
        got += (size_t)r;
    }
    close(fd); /* read-only: a failed close loses nothing */
    buf[n] = 0;
    *out = buf;
    *len = n;
    return true;
}

/* dir/leaf into buf; the directory came from mkdtemp with room to spare,
 * so false means a caller's bug rather than a user's long path. */
static bool join(char *buf, size_t cap, const char *dir, const char *leaf) {
    int n = snprintf(buf, cap, "%s/%s", dir, leaf);
    return n >= 0 && (size_t)n < cap;
}

/* Empties and removes dir (the compiler writes only plain files into it). */
static bool remove_dir(const char *dir, char *err, int errcap) {
    DIR *d = opendir(dir);
    if (!d) return errf(err, errcap, "cannot open temporary directory %s: %s", dir, strerror(errno));
    bool ok = true;
    char path[PATH_CAP];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!join(path, sizeof path, dir, e->d_name)) {
            ok = ok && errf(err, errcap, "path of %s in %s is too long", e->d_name, dir);
            continue;
        }
        if (unlink(path) != 0 && ok) ok = errf(err, errcap, "cannot remove %s: %s", path, strerror(errno));
    }
    closedir(d);
    if (ok && rmdir(dir) != 0) ok = errf(err, errcap, "cannot remove temporary directory %s: %s", dir, strerror(errno));
    return ok;
}

/* The compiler names files by their absolute path; the directory is gone by
 * the time anyone reads the message, so only "k.c:LINE:COL" is kept. */
static void strip_prefix(char *text, const char *dir) {
    char pre[PATH_CAP];
    if (!join(pre, sizeof pre, dir, "")) return;
    size_t pl = strlen(pre);
    for (char *p; (p = strstr(text, pre));) memmove(p, p + pl, strlen(p + pl) + 1);
}

/* Runs the compiler in dir; on failure err holds its output. */
static bool compile_in(const char *dir, const char *name, char *err, int errcap) {
    char c_path[PATH_CAP], so_path[PATH_CAP], log_path[PATH_CAP], words[1024];
    if (!join(c_path, sizeof c_path, dir, "k.c") || !join(so_path, sizeof so_path, dir, "k.so") || !join(log_path, sizeof log_path, dir, "cc.log"))
        return errf(err, errcap, "cc: %s: temporary path %s is too long", name, dir);
    char *argv[MAX_CC_WORDS + N_FLAGS + 5];
    int n = cc_words(words, sizeof words, argv);
    for (int i = 0; i < N_FLAGS; i++) argv[n++] = (char *)FLAGS[i]; /* posix_spawn's argv is not const, but is never written */
    argv[n++] = "-o";
    argv[n++] = so_path;
    argv[n++] = c_path;
    argv[n++] = "-lmvec";
    argv[n++] = "-lm";
    argv[n] = NULL;
    int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (log < 0) return errf(err, errcap, "cc: %s: cannot create %s: %s", name, log_path, strerror(errno));
    char why[512];
    pid_t pid;
    int code = -1;
    bool ran = spawn(argv, log, &pid, why, sizeof why) && wait_exit(pid, argv[0], &code, why, sizeof why);
    if (close(log) != 0 && ran) {
        ran = errf(why, sizeof why, "cannot close %s: %s", log_path, strerror(errno));
    }
    if (!ran) return errf(err, errcap, "cc: cannot compile %s: %s", name, why);
    if (code == 0) return true;
    unsigned char *text = NULL;
    size_t len = 0;
    if (!read_file(log_path, LOG_SHOWN, &text, &len, why, sizeof why))
        return errf(err, errcap, "cc: %s failed (exit status %d) on %s, and %s", argv[0], code, name, why);
    strip_prefix((char *)text, dir);
    for (size_t k = strlen((char *)text); k > 0 && (text[k - 1] == '\n' || text[k - 1] == ' '); k--) text[k - 1] = 0;
    errf(err, errcap, "cc: cannot compile %s: %s exited with status %d:\n%s", name, argv[0], code, (char *)text);
    free(text);
    return false;
}

bool cc_build_shared(const char *src, const char *name_for_errors, unsigned char **so, size_t *so_len, char *err, int errcap) {
    *so = NULL;
    *so_len = 0;
    const char *name = name_for_errors && *name_for_errors ? name_for_errors : "(unnamed source)";
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_CAP], path[PATH_CAP];
    int w = snprintf(dir, sizeof dir, "%s/yolocc-cc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (w < 0 || (size_t)w >= sizeof dir - 16) return errf(err, errcap, "cc: %s: TMPDIR is too long", name);
    if (!mkdtemp(dir)) return errf(err, errcap, "cc: %s: cannot create a temporary directory %s: %s", name, dir, strerror(errno));
    char why[512] = "temporary path is too long";
    bool ok = join(path, sizeof path, dir, "k.c") && write_file(path, src, why, sizeof why);
    if (!ok) errf(err, errcap, "cc: %s: %s", name, why);
    if (ok) ok = compile_in(dir, name, err, errcap);
    if (ok && !(ok = join(path, sizeof path, dir, "k.so") && read_file(path, 0, so, so_len, why, sizeof why)))
        errf(err, errcap, "cc: %s: %s", name, why);
    /* a leftover directory is an error even after a good build: every build
     * would leave one more behind */
    if (!remove_dir(dir, why, sizeof why) && ok) {
        free(*so);
        *so = NULL;
        *so_len = 0;
        ok = errf(err, errcap, "cc: %s: %s", name, why);
    }
    return ok;
}

bool cc_version(char *buf, int cap) {
    if (cap <= 0) return false;
    char words[1024];
    char *argv[MAX_CC_WORDS + 2];
    int n = cc_words(words, sizeof words, argv);
    argv[n++] = "--version";
    argv[n] = NULL;
    int p[2];
    if (pipe(p) != 0) return errf(buf, cap, "cannot run %s --version: pipe: %s", argv[0], strerror(errno));
    if (fcntl(p[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) != 0) {
        errf(buf, cap, "cannot run %s --version: fcntl: %s", argv[0], strerror(errno));
        close(p[0]);
        close(p[1]);
        return false;
    }
    pid_t pid;
    char why[512];
    bool ok = spawn(argv, p[1], &pid, why, sizeof why);
    close(p[1]); /* the child holds its own copy; EOF comes when it exits */
    if (!ok) {
        close(p[0]);
        return errf(buf, cap, "%s", why);
    }
    char line[512];
    size_t got = 0;
    for (;;) { /* read to EOF so the compiler never blocks on a full pipe */
        char chunk[512];
        ssize_t r = read(p[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t take = (size_t)r < sizeof line - 1 - got ? (size_t)r : sizeof line - 1 - got;
        memcpy(line + got, chunk, take);
        got += take;
    }
    close(p[0]);
    line[got] = 0;
    int code = -1;
    if (!wait_exit(pid, argv[0], &code, why, sizeof why)) return errf(buf, cap, "%s", why);
    line[strcspn(line, "\n")] = 0;
    if (code != 0 || !line[0]) return errf(buf, cap, "%s --version exited with status %d and printed \"%s\"", argv[0], code, line);
    snprintf(buf, (size_t)cap, "%s", line);
    return true;
}

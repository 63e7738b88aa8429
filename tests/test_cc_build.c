/* tests/test_cc_build.c — generated C becomes a shared object with the
 * system compiler (compiler/cc_build.h) and loads from memory
 * (runtime/kernel_so.h): the function runs, compiler errors are named and
 * quoted, nothing is left in $TMPDIR, and non-ELF bytes are refused. Each
 * test points TMPDIR at its own mkdtemp directory and restores it. */
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "../compiler/cc_build.h"
#include "../runtime/kernel_so.h"
#include "test_util.h"

static char g_tmp[64];
static char *g_saved_tmpdir, *g_saved_cc;

static void setup(void) {
    const char *t = getenv("TMPDIR"), *c = getenv("CC");
    g_saved_tmpdir = t ? strdup(t) : NULL;
    g_saved_cc = c ? strdup(c) : NULL;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/yolocc-ccb-test-XXXXXX");
    cr_assert(mkdtemp(g_tmp), "mkdtemp");
    cr_assert_eq(setenv("TMPDIR", g_tmp, 1), 0);
}

static void restore(const char *name, char **saved) {
    if (*saved) setenv(name, *saved, 1);
    else unsetenv(name);
    free(*saved);
    *saved = NULL;
}

/* Idempotent: cr_skip_test does not run .fini, so a skipping test calls it
 * first itself. */
static void teardown(void) {
    restore("TMPDIR", &g_saved_tmpdir);
    restore("CC", &g_saved_cc);
    if (!g_tmp[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) cr_log_warn("cannot remove %s", g_tmp);
    g_tmp[0] = 0;
}

TestSuite(cc_build, .init = setup, .fini = teardown);
TestSuite(kernel_so, .init = setup, .fini = teardown);

/* entries left in the test's TMPDIR: every build and load must leave none */
static int tmp_entries(void) {
    DIR *d = opendir(g_tmp);
    cr_assert(d, "opendir %s", g_tmp);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

typedef int (*IntFn)(int);

static IntFn int_fn(const KernelSo *k, const char *name) {
    void *p = kernel_so_sym(k, name);
    IntFn f = NULL;
    if (p) memcpy(&f, &p, sizeof f); /* POSIX: dlsym's object pointer holds a function address */
    return f;
}

static void build(const char *src, const char *name, unsigned char **so, size_t *len) {
    char err[2048] = "";
    cr_assert(cc_build_shared(src, name, so, len, err, sizeof err), "%s", err);
    cr_assert_eq(tmp_entries(), 0, "the build left files in TMPDIR");
}

Test(cc_build, builds_loads_and_runs_add3) {
    unsigned char *so = NULL;
    size_t len = 0;
    build("int add3(int x){return x+3;}\n", "add3.c", &so, &len);
    cr_expect(len > 64 && memcmp(so, "\x7f" "ELF", 4) == 0, "a %zu-byte ELF file", len);
    KernelSo k;
    char err[1024] = "";
    cr_assert(kernel_so_open(&k, so, len, err, sizeof err), "%s", err);
    free(so); /* the loaded object does not depend on the caller's bytes */
    IntFn add3 = int_fn(&k, "add3");
    cr_assert(add3, "add3 is exported");
    cr_expect_eq(add3(7), 10);
    cr_expect_null(kernel_so_sym(&k, "no_such_symbol"), "a missing name is NULL");
    kernel_so_close(&k);
    cr_expect_null(k.handle);
    kernel_so_close(&k); /* closing twice is harmless */
    cr_expect_eq(tmp_entries(), 0, "loading left files in TMPDIR");
}

Test(cc_build, libm_is_linked) {
    unsigned char *so = NULL;
    size_t len = 0;
    build("#include <math.h>\ndouble root(double x){return sqrt(x);}\n", "root.c", &so, &len);
    KernelSo k;
    char err[1024] = "";
    cr_assert(kernel_so_open(&k, so, len, err, sizeof err), "%s", err);
    free(so);
    void *p = kernel_so_sym(&k, "root");
    double (*root)(double) = NULL;
    cr_assert(p);
    memcpy(&root, &p, sizeof root);
    volatile double x = 2.0; /* keep the call at run time */
    cr_expect(root(x) > 1.41421 && root(x) < 1.41422);
    kernel_so_close(&k);
}

Test(cc_build, syntax_error_is_named_and_quoted) {
    unsigned char *so = (unsigned char *)"untouched";
    size_t len = 5;
    char err[4096] = "";
    cr_expect(!cc_build_shared("int add3(int x){return x+3}\n", "group_12.c", &so, &len, err, sizeof err));
    cr_expect(so == NULL && len == 0);
    cr_expect(strstr(err, "group_12.c"), "%s", err);
    cr_expect(strstr(err, "error"), "the compiler's message: %s", err);
    cr_expect(strstr(err, "k.c:1:"), "diagnostics keep file:line: %s", err);
    cr_expect(!strstr(err, g_tmp), "the vanished temp directory is not in the message: %s", err);
    cr_expect_eq(tmp_entries(), 0, "the temp directory is removed after a failure too");
    cr_log_info("%s", err);
}

Test(cc_build, warnings_are_errors) {
    unsigned char *so = NULL;
    size_t len = 0;
    char err[4096] = "";
    cr_expect(!cc_build_shared("int f(void){int unused; return 0;}\n", "warn.c", &so, &len, err, sizeof err), "-Wall -Werror apply");
    cr_expect(strstr(err, "unused"), "%s", err);
    cr_expect_eq(tmp_entries(), 0);
}

Test(cc_build, long_compiler_output_is_cut_to_errcap) {
    char src[8192] = "";
    for (int i = 0; i < 100; i++) strcat(src, "int f(void){return x;}\n"); /* a hundred errors */
    unsigned char *so = NULL;
    size_t len = 0;
    char err[256];
    cr_expect(!cc_build_shared(src, "many.c", &so, &len, err, sizeof err));
    cr_expect(strlen(err) < sizeof err && strstr(err, "many.c"), "%s", err);
    cr_expect_eq(tmp_entries(), 0);
}

Test(cc_build, cc_with_arguments_is_split) {
    setenv("CC", "cc -DADD=5", 1);
    unsigned char *so = NULL;
    size_t len = 0;
    build("int addn(int x){return x+ADD;}\n", "addn.c", &so, &len);
    KernelSo k;
    char err[1024] = "";
    cr_assert(kernel_so_open(&k, so, len, err, sizeof err), "%s", err);
    free(so);
    IntFn f = int_fn(&k, "addn");
    cr_assert(f);
    cr_expect_eq(f(1), 6);
    kernel_so_close(&k);
}

Test(cc_build, missing_compiler_is_named) {
    setenv("CC", "/nonexistent/yolocc-cc", 1);
    unsigned char *so = NULL;
    size_t len = 0;
    char err[1024] = "", ver[512];
    cr_expect(!cc_build_shared("int x;\n", "any.c", &so, &len, err, sizeof err));
    cr_expect(strstr(err, "/nonexistent/yolocc-cc") && strstr(err, "any.c"), "%s", err);
    cr_expect_eq(tmp_entries(), 0);
    cr_expect(!cc_version(ver, sizeof ver));
    cr_expect(strstr(ver, "/nonexistent/yolocc-cc"), "%s", ver);
}

Test(cc_build, version_and_options_for_cache_keys) {
    char ver[512], opts[256];
    cr_assert(cc_version(ver, sizeof ver), "%s", ver);
    cr_expect(ver[0] && !strchr(ver, '\n'), "one line: %s", ver);
    cr_log_info("cc: %s", ver);
    cr_assert(cc_options_string(opts, sizeof opts));
    cr_expect(strstr(opts, "-std=c11") && strstr(opts, "-O2") && strstr(opts, "-fPIC") && strstr(opts, "-shared"), "%s", opts);
    cr_expect(!strstr(opts, "fast-math") && !strstr(opts, "math-errno"), "IEEE semantics are kept: %s", opts);
    char small[4];
    cr_expect(!cc_options_string(small, sizeof small));
}

Test(kernel_so, non_elf_bytes_are_refused) {
    KernelSo k = {(void *)1};
    char err[512] = "";
    const unsigned char text[] = "int add3(int x){return x+3;}";
    cr_expect(!kernel_so_open(&k, text, sizeof text, err, sizeof err));
    cr_expect(strstr(err, "not a shared object"), "%s", err);
    cr_expect_null(k.handle);
    cr_expect(!kernel_so_open(&k, (const unsigned char *)"\x7f" "EL", 3, err, sizeof err));
    cr_expect(strstr(err, "not a shared object"), "%s", err);
}

Test(kernel_so, elf_that_is_not_a_shared_object_is_refused) {
    unsigned char hdr[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    hdr[16] = 2; /* ET_EXEC, little-endian */
    KernelSo k;
    char err[512] = "";
    cr_expect(!kernel_so_open(&k, hdr, sizeof hdr, err, sizeof err));
    cr_expect(strstr(err, "not a shared object") && strstr(err, "ELF type 2"), "%s", err);
}

Test(kernel_so, broken_shared_object_reports_dlerror) {
    unsigned char hdr[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
    hdr[16] = 3; /* ET_DYN, but nothing after the header */
    KernelSo k;
    char err[1024] = "";
    cr_expect(!kernel_so_open(&k, hdr, sizeof hdr, err, sizeof err));
    cr_expect(strstr(err, "cannot load the shared object"), "%s", err);
    cr_expect_null(k.handle);
    cr_expect_eq(tmp_entries(), 0);
}

/* Two kernels loaded at once, and one loaded after another is unloaded,
 * each run their own code: a reused /proc/self/fd/N name must not hand back
 * an earlier kernel. */
Test(kernel_so, distinct_kernels_stay_distinct) {
    unsigned char *a = NULL, *b = NULL, *c = NULL;
    size_t la = 0, lb = 0, lc = 0;
    build("int addk(int x){return x+3;}\n", "a.c", &a, &la);
    build("int addk(int x){return x+4;}\n", "b.c", &b, &lb);
    build("int addk(int x){return x+5;}\n", "c.c", &c, &lc);
    KernelSo ka, kb, kc;
    char err[1024] = "";
    cr_assert(kernel_so_open(&ka, a, la, err, sizeof err), "%s", err);
    cr_assert(kernel_so_open(&kb, b, lb, err, sizeof err), "%s", err);
    cr_expect_eq(int_fn(&ka, "addk")(7), 10);
    cr_expect_eq(int_fn(&kb, "addk")(7), 11);
    kernel_so_close(&ka);
    cr_assert(kernel_so_open(&kc, c, lc, err, sizeof err), "%s", err);
    cr_expect_eq(int_fn(&kc, "addk")(7), 12);
    cr_expect_eq(int_fn(&kb, "addk")(7), 11);
    kernel_so_close(&kb);
    kernel_so_close(&kc);
    cr_expect_eq(tmp_entries(), 0, "no temp files remain");
    free(a);
    free(b);
    free(c);
}

/* memfd_create fails with ENOSYS in this (forked, per-test) process from
 * here on, as on kernels before 3.17 or under a sandbox that forbids it. */
static bool block_memfd_create(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

Test(kernel_so, temp_file_route_without_memfd) {
    unsigned char *so = NULL;
    size_t len = 0;
    build("int add3(int x){return x+3;}\n", "add3.c", &so, &len);
    if (!block_memfd_create()) {
        char why[128];
        snprintf(why, sizeof why, "%s", strerror(errno));
        free(so);
        teardown();
        cr_skip_test("cannot install a seccomp filter here: %s", why);
    }
    cr_assert(syscall(SYS_memfd_create, "probe", 0) < 0 && errno == ENOSYS, "the filter blocks memfd_create");
    KernelSo k;
    char err[1024] = "";
    cr_assert(kernel_so_open(&k, so, len, err, sizeof err), "%s", err);
    free(so);
    IntFn add3 = int_fn(&k, "add3");
    cr_assert(add3);
    cr_expect_eq(add3(7), 10);
    cr_expect_eq(tmp_entries(), 0, "the temp file is unlinked right after dlopen");
    kernel_so_close(&k);
}

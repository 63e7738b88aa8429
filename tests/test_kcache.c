/* tests/test_kcache.c — the on-disk kernel cache: keys are length-prefixed
 * SHA-256, entries round-trip, a damaged entry is a miss and is removed, the
 * directory follows XDG, YOLOCC_NO_CACHE turns it off. Every test works in
 * its own mkdtemp directory and restores the environment it changes. */
#include "../compiler/kcache.h"
#include "test_util.h"

static char g_root[64];
static char *g_saved[3];
static const char *const ENV_NAMES[3] = {"XDG_CACHE_HOME", "HOME", "YOLOCC_NO_CACHE"};

static void setup(void) {
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(ENV_NAMES[i]);
        g_saved[i] = v ? strdup(v) : NULL;
    }
    snprintf(g_root, sizeof g_root, "/tmp/yolocc-kcache-test-XXXXXX");
    cr_assert(mkdtemp(g_root), "mkdtemp");
    cr_assert_eq(setenv("XDG_CACHE_HOME", g_root, 1), 0);
    unsetenv("YOLOCC_NO_CACHE");
}

static void teardown(void) {
    for (int i = 0; i < 3; i++) {
        if (g_saved[i]) setenv(ENV_NAMES[i], g_saved[i], 1);
        else unsetenv(ENV_NAMES[i]);
        free(g_saved[i]);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) cr_log_warn("cannot remove %s", g_root);
}

TestSuite(kcache, .init = setup, .fini = teardown);

static void key2(const char *a, const char *b, char hex[65]) {
    const void *parts[] = {a, b};
    size_t lens[] = {strlen(a), strlen(b)};
    kcache_key(parts, lens, 2, hex);
}

static void entry_path(const char *hex, char *buf, size_t cap) { snprintf(buf, cap, "%s/yolocc/%s", g_root, hex); }

Test(kcache, key_is_length_prefixed_sha256) {
    char k0[65], k1[65], k2[65], k3[65];
    kcache_key(NULL, NULL, 0, k0);
    /* no parts: SHA-256 of nothing */
    cr_expect_str_eq(k0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    key2("ab", "c", k1);
    key2("a", "bc", k2);
    cr_expect_eq(strlen(k1), 64);
    cr_expect_str_neq(k1, k2, "(\"ab\",\"c\") and (\"a\",\"bc\") must differ");
    const void *one[] = {"abc"};
    size_t one_len[] = {3};
    kcache_key(one, one_len, 1, k3);
    cr_expect_str_neq(k1, k3, "(\"ab\",\"c\") and (\"abc\") must differ");
    key2("ab", "c", k3);
    cr_expect_str_eq(k1, k3, "the key is deterministic");
    key2("ab", "d", k3);
    cr_expect_str_neq(k1, k3, "the last part counts");
    key2("xb", "c", k3);
    cr_expect_str_neq(k1, k3, "the first part counts");
    const void *bin[] = {"a\0b", "c"};
    size_t bin_len[] = {3, 1}, bin_len2[] = {1, 1};
    kcache_key(bin, bin_len, 2, k2);
    kcache_key(bin, bin_len2, 2, k3);
    cr_expect_str_neq(k2, k3, "parts are bytes, not C strings");
}

Test(kcache, put_then_get_round_trips) {
    char hex[65], err[512] = "";
    key2("kernel source", "sm_80", hex);
    unsigned char data[3000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
    unsigned char *out = NULL;
    size_t n = 0;
    cr_expect(!kcache_get(hex, &out, &n), "absent before the put");
    cr_assert(kcache_put(hex, data, sizeof data, err, sizeof err), "%s", err);
    cr_assert(kcache_get(hex, &out, &n));
    cr_expect_eq(n, sizeof data);
    cr_expect(memcmp(out, data, sizeof data) == 0);
    free(out);
    /* a second put replaces the entry */
    cr_assert(kcache_put(hex, "new", 3, err, sizeof err), "%s", err);
    cr_assert(kcache_get(hex, &out, &n));
    cr_expect(n == 3 && memcmp(out, "new", 3) == 0);
    free(out);
}

Test(kcache, empty_payload_round_trips) {
    char hex[65], err[512] = "";
    key2("empty", "", hex);
    unsigned char *out = NULL;
    size_t n = 99;
    cr_assert(kcache_put(hex, NULL, 0, err, sizeof err), "%s", err);
    cr_assert(kcache_get(hex, &out, &n));
    cr_expect_eq(n, 0);
    free(out);
}

/* Puts an entry, lets damage() change its file, and expects a miss that
 * removes the file. */
static void expect_damaged_is_miss(void (*damage)(const char *path, size_t size)) {
    char hex[65], err[512] = "", path[256];
    key2("damaged", "entry", hex);
    const char payload[] = "a cubin, say";
    cr_assert(kcache_put(hex, payload, sizeof payload, err, sizeof err), "%s", err);
    entry_path(hex, path, sizeof path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "the entry is the file %s", path);
    damage(path, (size_t)st.st_size);
    unsigned char *out = NULL;
    size_t n = 0;
    cr_expect(!kcache_get(hex, &out, &n), "a damaged entry is a miss");
    cr_expect(out == NULL);
    cr_expect(access(path, F_OK) != 0, "and is removed");
}

static void flip(const char *path, size_t off) {
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    int c = fgetc(f);
    cr_assert_eq(fseek(f, (long)off, SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    cr_assert_eq(fclose(f), 0);
}

static void truncate_by_one(const char *path, size_t size) { cr_assert_eq(truncate(path, (off_t)size - 1), 0); }
static void truncate_to_header(const char *path, size_t size) {
    (void)size;
    cr_assert_eq(truncate(path, 20), 0);
}
static void flip_last_byte(const char *path, size_t size) { flip(path, size - 1); }
static void flip_magic(const char *path, size_t size) {
    (void)size;
    flip(path, 0);
}
static void flip_stored_key(const char *path, size_t size) {
    (void)size;
    flip(path, 8 + 8 + 5);
}
static void append_byte(const char *path, size_t size) {
    (void)size;
    FILE *f = fopen(path, "ab");
    cr_assert(f);
    fputc('!', f);
    cr_assert_eq(fclose(f), 0);
}

Test(kcache, truncated_entry_is_a_miss) { expect_damaged_is_miss(truncate_by_one); }
Test(kcache, entry_cut_inside_header_is_a_miss) { expect_damaged_is_miss(truncate_to_header); }
Test(kcache, bit_flipped_payload_is_a_miss) { expect_damaged_is_miss(flip_last_byte); }
Test(kcache, bad_magic_is_a_miss) { expect_damaged_is_miss(flip_magic); }
Test(kcache, entry_for_another_key_is_a_miss) { expect_damaged_is_miss(flip_stored_key); }
Test(kcache, trailing_garbage_is_a_miss) { expect_damaged_is_miss(append_byte); }

Test(kcache, invalid_keys_are_refused) {
    char err[512] = "";
    unsigned char *out = NULL;
    size_t n = 0;
    const char *bad[] = {"", "abc", "../../../../etc/passwd", "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855", NULL};
    for (int i = 0; bad[i]; i++) {
        cr_expect(!kcache_put(bad[i], "x", 1, err, sizeof err), "%s", bad[i]);
        cr_expect(strstr(err, "invalid key"), "%s", err);
        cr_expect(!kcache_get(bad[i], &out, &n), "%s", bad[i]);
    }
}

Test(kcache, no_cache_disables_get_and_put) {
    char hex[65], err[512] = "", path[256];
    key2("no", "cache", hex);
    entry_path(hex, path, sizeof path);
    unsigned char *out = NULL;
    size_t n = 0;
    setenv("YOLOCC_NO_CACHE", "1", 1);
    cr_expect(kcache_put(hex, "abc", 3, err, sizeof err), "a disabled put succeeds: %s", err);
    cr_expect(access(path, F_OK) != 0, "and writes nothing");
    unsetenv("YOLOCC_NO_CACHE");
    cr_assert(kcache_put(hex, "abc", 3, err, sizeof err), "%s", err);
    setenv("YOLOCC_NO_CACHE", "1", 1);
    cr_expect(!kcache_get(hex, &out, &n), "a disabled get misses");
    cr_expect(access(path, F_OK) == 0, "without touching the entry");
    setenv("YOLOCC_NO_CACHE", "0", 1);
    cr_expect(kcache_get(hex, &out, &n), "YOLOCC_NO_CACHE=0 leaves the cache on");
    free(out);
}

Test(kcache, directory_is_created_0700_with_parents) {
    char deep[256], err[512] = "", hex[65], dir[300];
    snprintf(deep, sizeof deep, "%s/a/b", g_root);
    setenv("XDG_CACHE_HOME", deep, 1);
    key2("deep", "dir", hex);
    cr_assert(kcache_put(hex, "x", 1, err, sizeof err), "%s", err);
    snprintf(dir, sizeof dir, "%s/yolocc", deep);
    struct stat st;
    cr_assert_eq(stat(dir, &st), 0);
    cr_expect(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700, "mode %o", st.st_mode & 0777);
}

Test(kcache, falls_back_to_home_cache) {
    char err[512] = "", hex[65], path[300];
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", g_root, 1);
    key2("home", "fallback", hex);
    cr_assert(kcache_put(hex, "x", 1, err, sizeof err), "%s", err);
    snprintf(path, sizeof path, "%s/.cache/yolocc/%s", g_root, hex);
    cr_expect(access(path, F_OK) == 0, "%s", path);
    setenv("XDG_CACHE_HOME", "relative/dir", 1);
    unsigned char *out = NULL;
    size_t n = 0;
    cr_expect(kcache_get(hex, &out, &n), "a relative XDG_CACHE_HOME is ignored, as XDG says");
    free(out);
}

Test(kcache, file_in_the_way_is_an_error) {
    char in_way[256], err[512] = "", hex[65];
    snprintf(in_way, sizeof in_way, "%s/file", g_root);
    FILE *f = fopen(in_way, "w");
    cr_assert(f);
    cr_assert_eq(fclose(f), 0);
    snprintf(in_way, sizeof in_way, "%s/file/sub", g_root);
    setenv("XDG_CACHE_HOME", in_way, 1);
    key2("in the", "way", hex);
    cr_expect(!kcache_put(hex, "x", 1, err, sizeof err));
    cr_expect(strstr(err, "/file") && strstr(err, "not a directory"), "%s", err);
    unsigned char *out = NULL;
    size_t n = 0;
    cr_expect(!kcache_get(hex, &out, &n), "and get misses");
}

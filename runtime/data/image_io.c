/* runtime/data/image_io.c — JPEG (libjpeg-turbo) and PNG (libpng) files <->
 * Image, by magic bytes, with bounded memory and setjmp error handlers so bad
 * bytes give one error line. Must not touch labels, datasets or transforms. */
#include "image_io.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "../../ir/atomic_file.h"
#include "../../ir/diag.h"

/* A progressive JPEG may repeat scans forever; libjpeg-turbo's own tools
 * cap them the same way. */
enum { JPEG_MAX_SCANS = 500 };
/* libjpeg's working memory (coefficient buffers of progressive files). */
#define JPEG_MAX_WORK_BYTES (512L << 20)
/* How much of a file image_probe reads to find the header. */
#define PROBE_PREFIX ((size_t)256 << 10)

typedef enum { FMT_NONE, FMT_JPEG, FMT_PNG } Format;

static const unsigned char PNG_MAGIC[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
static const unsigned char PNG_IEND[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};

static Format sniff(const unsigned char *b, size_t len) {
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return FMT_JPEG;
    if (len >= 8 && memcmp(b, PNG_MAGIC, 8) == 0) return FMT_PNG;
    return FMT_NONE;
}

/* What one decode produces: the size, and the pixels when asked for. The
 * decoders below keep all their state here (not in locals) so it survives
 * their longjmp error paths. */
typedef struct Job {
    const unsigned char *buf;
    size_t len, pos;
    bool pixels;
    bool hit_eof;           /* ran out of bytes (the probe then reads more) */
    int w, h;
    uint8_t *px, *row;
    unsigned char *enc;     /* encoder output */
    unsigned long enc_len;
    png_bytep *rows;
    char msg[JMSG_LENGTH_MAX + 64];
} Job;

/* ------------------------------------------------------------------ EXIF */

static unsigned rd16(const unsigned char *p, bool le) { return le ? (unsigned)(p[0] | p[1] << 8) : (unsigned)(p[0] << 8 | p[1]); }
static uint32_t rd32(const unsigned char *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
              : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* The orientation tag (1..8) of an APP1 "Exif" payload; 1 when absent or
 * malformed, since a broken EXIF block does not make the pixels unusable. */
static int exif_orientation(const unsigned char *d, size_t n) {
    if (n < 14 || memcmp(d, "Exif\0\0", 6) != 0) return 1;
    d += 6, n -= 6;
    bool le = d[0] == 'I' && d[1] == 'I';
    if (!le && !(d[0] == 'M' && d[1] == 'M')) return 1;
    if (rd16(d + 2, le) != 42) return 1;
    uint32_t ifd = rd32(d + 4, le);
    if (ifd > n || n - ifd < 2) return 1;
    unsigned count = rd16(d + ifd, le);
    for (unsigned i = 0; i < count; i++) {
        size_t at = ifd + 2 + (size_t)i * 12;
        if (at + 12 > n) return 1;
        if (rd16(d + at, le) == 0x0112 && rd16(d + at + 2, le) == 3) {
            unsigned v = rd16(d + at + 8, le);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
}

/* Applies EXIF orientation o to the w x h RGB pixels in j->px (so the image
 * looks the way viewers and OpenCV show it); j->w, j->h become the result. */
static bool orient(Job *j, int o) {
    if (o == 1) return true;
    int w = j->w, h = j->h;
    bool swap = o >= 5;
    uint8_t *dst = malloc((size_t)w * (size_t)h * 3);
    if (!dst) return false;
    int ow = swap ? h : w;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int nx, ny;
            switch (o) {
            case 2: nx = w - 1 - x, ny = y; break;
            case 3: nx = w - 1 - x, ny = h - 1 - y; break;
            case 4: nx = x, ny = h - 1 - y; break;
            case 5: nx = y, ny = x; break;
            case 6: nx = h - 1 - y, ny = x; break;
            case 7: nx = h - 1 - y, ny = w - 1 - x; break;
            default: nx = y, ny = w - 1 - x; break;
            }
            memcpy(dst + ((size_t)ny * (size_t)ow + (size_t)nx) * 3, j->px + ((size_t)y * (size_t)w + (size_t)x) * 3, 3);
        }
    free(j->px);
    j->px = dst;
    if (swap) j->w = h, j->h = w;
    return true;
}

/* ------------------------------------------------------------------ JPEG */

typedef struct JpegErr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    Job *job;
} JpegErr;

static void jpeg_fail(j_common_ptr ci) {
    JpegErr *e = (JpegErr *)ci->err;
    char m[JMSG_LENGTH_MAX];
    ci->err->format_message(ci, m);
    snprintf(e->job->msg, sizeof e->job->msg, "bad JPEG: %s", m);
    longjmp(e->jb, 1);
}

/* Data ending early is an error here (libjpeg would pad it with grey);
 * other corrupt-data warnings, common in real photo sets, are tolerated. */
static void jpeg_emit(j_common_ptr ci, int level) {
    if (level >= 0) return;
    int code = ci->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) {
        JpegErr *e = (JpegErr *)ci->err;
        e->job->hit_eof = code == JWRN_JPEG_EOF;
        snprintf(e->job->msg, sizeof e->job->msg, "truncated JPEG (data ends early)");
        longjmp(e->jb, 1);
    }
    ci->err->num_warnings++;
}

static void jpeg_silent(j_common_ptr ci) { (void)ci; }

static void jpeg_progress(j_common_ptr ci) {
    if (!ci->is_decompressor || ((j_decompress_ptr)ci)->input_scan_number <= JPEG_MAX_SCANS) return;
    JpegErr *e = (JpegErr *)ci->err;
    snprintf(e->job->msg, sizeof e->job->msg, "bad JPEG: more than %d scans", JPEG_MAX_SCANS);
    longjmp(e->jb, 1);
}

static void jpeg_err_init(JpegErr *e, Job *j) {
    jpeg_std_error(&e->pub);
    e->pub.error_exit = jpeg_fail;
    e->pub.emit_message = jpeg_emit;
    e->pub.output_message = jpeg_silent;
    e->job = j;
}

/* CMYK as Adobe writes it (inverted): ink-free means 255. */
static void cmyk_to_rgb(const uint8_t *src, uint8_t *dst, int w) {
    for (int x = 0; x < w; x++) {
        unsigned k = src[4 * x + 3];
        for (int c = 0; c < 3; c++) dst[3 * x + c] = (uint8_t)((src[4 * x + c] * k + 127) / 255);
    }
}

typedef struct JpegDec {
    struct jpeg_decompress_struct ci;
    struct jpeg_progress_mgr prog;
    JpegErr e;
} JpegDec;

static bool jpeg_run(Job *j, JpegDec *d) {
    d->ci.err = NULL;
    jpeg_err_init(&d->e, j);
    if (setjmp(d->e.jb)) {
        if (d->ci.err) jpeg_destroy_decompress(&d->ci);
        return false;
    }
    d->ci.err = &d->e.pub;
    jpeg_create_decompress(&d->ci);
    d->ci.mem->max_memory_to_use = JPEG_MAX_WORK_BYTES;
    d->prog.progress_monitor = jpeg_progress;
    d->ci.progress = &d->prog;
    jpeg_mem_src(&d->ci, j->buf, (unsigned long)j->len);
    jpeg_save_markers(&d->ci, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&d->ci, TRUE);
    if (d->ci.image_width > IMAGE_MAX_SIDE || d->ci.image_height > IMAGE_MAX_SIDE) {
        snprintf(j->msg, sizeof j->msg, "JPEG is %ux%u; the limit is %d a side", d->ci.image_width, d->ci.image_height, IMAGE_MAX_SIDE);
        longjmp(d->e.jb, 1);
    }
    J_COLOR_SPACE cs = d->ci.jpeg_color_space;
    int nc = d->ci.num_components;
    bool cmyk = cs == JCS_CMYK || cs == JCS_YCCK;
    if (!((cs == JCS_GRAYSCALE && nc == 1) || ((cs == JCS_YCbCr || cs == JCS_RGB) && nc == 3) || (cmyk && nc == 4))) {
        snprintf(j->msg, sizeof j->msg, "unsupported JPEG colour space (%d components)", nc);
        longjmp(d->e.jb, 1);
    }
    int o = 1;
    for (jpeg_saved_marker_ptr m = d->ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && (o = exif_orientation(m->data, m->data_length)) != 1) break;
    j->w = (int)d->ci.image_width;
    j->h = (int)d->ci.image_height;
    if (j->pixels) {
        d->ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
        jpeg_start_decompress(&d->ci);
        size_t w = d->ci.output_width, h = d->ci.output_height;
        j->px = malloc(w * h * 3);
        j->row = cmyk ? malloc(w * 4) : NULL;
        if (!j->px || (cmyk && !j->row)) {
            snprintf(j->msg, sizeof j->msg, "out of memory for a %zux%zu image", w, h);
            longjmp(d->e.jb, 1);
        }
        while (d->ci.output_scanline < d->ci.output_height) {
            uint8_t *dst = j->px + (size_t)d->ci.output_scanline * w * 3;
            JSAMPROW r = cmyk ? j->row : dst;
            if (jpeg_read_scanlines(&d->ci, &r, 1) != 1) {
                snprintf(j->msg, sizeof j->msg, "truncated JPEG (data ends early)");
                longjmp(d->e.jb, 1);
            }
            if (cmyk) cmyk_to_rgb(j->row, dst, (int)w);
        }
        jpeg_finish_decompress(&d->ci);
        j->w = (int)w, j->h = (int)h;
    }
    jpeg_destroy_decompress(&d->ci);
    if (j->pixels && !orient(j, o)) {
        snprintf(j->msg, sizeof j->msg, "out of memory");
        return false;
    }
    if (!j->pixels && o >= 5) {
        int t = j->w;
        j->w = j->h, j->h = t;
    }
    return true;
}

/* ------------------------------------------------------------------- PNG */

typedef struct PngDec {
    png_structp png;
    png_infop info;
} PngDec;

static void png_fail(png_structp png, png_const_charp m) {
    Job *j = png_get_error_ptr(png);
    snprintf(j->msg, sizeof j->msg, "bad PNG: %s", m);
    png_longjmp(png, 1);
}

static void png_silent(png_structp png, png_const_charp m) {
    (void)png;
    (void)m;
}

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    Job *j = png_get_io_ptr(png);
    if (n > j->len - j->pos) {
        j->hit_eof = true;
        png_error(png, "truncated (data ends early)");
    }
    memcpy(out, j->buf + j->pos, n);
    j->pos += n;
}

static bool png_run(Job *j, PngDec *d) {
    d->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, j, png_fail, png_silent);
    d->info = d->png ? png_create_info_struct(d->png) : NULL;
    if (!d->info) {
        png_destroy_read_struct(&d->png, NULL, NULL);
        snprintf(j->msg, sizeof j->msg, "cannot initialise libpng");
        return false;
    }
    if (setjmp(png_jmpbuf(d->png))) {
        png_destroy_read_struct(&d->png, &d->info, NULL);
        return false;
    }
    png_set_read_fn(d->png, j, png_read_mem);
    png_set_user_limits(d->png, IMAGE_MAX_SIDE, IMAGE_MAX_SIDE);
    /* bounds what text/ICC chunks (possibly zlib bombs) may allocate */
    png_set_chunk_cache_max(d->png, 1000);
    png_set_chunk_malloc_max(d->png, 8u << 20);
    png_read_info(d->png, d->info);
    j->w = (int)png_get_image_width(d->png, d->info);
    j->h = (int)png_get_image_height(d->png, d->info);
    if (j->pixels) {
        /* as OpenCV's imread: 16-bit keeps the high byte, alpha is dropped
         * (not composited), no gamma correction */
        png_set_expand(d->png);
        png_set_strip_16(d->png);
        png_set_strip_alpha(d->png);
        png_set_gray_to_rgb(d->png);
        png_set_interlace_handling(d->png);
        png_read_update_info(d->png, d->info);
        size_t w = (size_t)j->w, h = (size_t)j->h;
        if (png_get_rowbytes(d->png, d->info) != w * 3 || png_get_bit_depth(d->png, d->info) != 8) {
            snprintf(j->msg, sizeof j->msg, "bad PNG: unexpected layout after conversion to RGB");
            png_longjmp(d->png, 1);
        }
        j->px = malloc(w * h * 3);
        j->rows = malloc(h * sizeof *j->rows);
        if (!j->px || !j->rows) {
            snprintf(j->msg, sizeof j->msg, "out of memory for a %zux%zu image", w, h);
            png_longjmp(d->png, 1);
        }
        for (size_t y = 0; y < h; y++) j->rows[y] = j->px + y * w * 3;
        png_read_image(d->png, j->rows);
        png_read_end(d->png, NULL);
    }
    png_destroy_read_struct(&d->png, &d->info, NULL);
    return true;
}

/* ---------------------------------------------------------------- decode */

/* Decodes (or, pixels false, reads the header of) buf into j. */
static bool run(Job *j) {
    bool ok;
    switch (sniff(j->buf, j->len)) {
    case FMT_JPEG: {
        JpegDec d;
        ok = jpeg_run(j, &d);
        break;
    }
    case FMT_PNG: {
        PngDec d;
        ok = png_run(j, &d);
        break;
    }
    default:
        if (j->len == 0) snprintf(j->msg, sizeof j->msg, "empty file");
        else snprintf(j->msg, sizeof j->msg, "not a JPEG or PNG file (unknown magic bytes)");
        return false;
    }
    free(j->row);
    free(j->rows);
    j->row = NULL, j->rows = NULL;
    if (!ok) {
        free(j->px);
        j->px = NULL;
    }
    return ok;
}

bool image_decode(const unsigned char *buf, size_t len, Image *out, char *err, int errcap) {
    *out = (Image){0};
    Job j = {.buf = buf, .len = len, .pixels = true};
    if (!run(&j)) return errf(err, errcap, "<memory>: %s", j.msg);
    *out = (Image){j.w, j.h, j.px};
    return true;
}

/* ------------------------------------------------------------------ files */

typedef struct File {
    int fd;
    size_t size;
} File;

static bool file_open(const char *path, File *f, char *err, int errcap) {
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return errf(err, errcap, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(f->fd);
        return errf(err, errcap, "%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > IMAGE_MAX_FILE_BYTES) {
        close(f->fd);
        return errf(err, errcap, "%s: file is %lld bytes; the limit is %zu", path, (long long)st.st_size, IMAGE_MAX_FILE_BYTES);
    }
    f->size = (size_t)st.st_size;
    return true;
}

/* Reads n bytes at offset off into a new buffer. */
static unsigned char *file_read(const File *f, size_t off, size_t n, const char *path, char *err, int errcap) {
    unsigned char *b = malloc(n ? n : 1);
    if (!b) return errf(err, errcap, "%s: out of memory", path), NULL;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, b + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(b);
            return errf(err, errcap, "%s: cannot read: %s", path, r < 0 ? strerror(errno) : "file shrank while being read"), NULL;
        }
        got += (size_t)r;
    }
    return b;
}

bool image_load(const char *path, Image *out, char *err, int errcap) {
    *out = (Image){0};
    File f = {-1, 0};
    if (!file_open(path, &f, err, errcap)) return false;
    unsigned char *buf = file_read(&f, 0, f.size, path, err, errcap);
    close(f.fd);
    if (!buf) return false;
    Job j = {.buf = buf, .len = f.size, .pixels = true};
    bool ok = run(&j);
    free(buf);
    if (!ok) return errf(err, errcap, "%s: %s", path, j.msg);
    *out = (Image){j.w, j.h, j.px};
    return true;
}

bool image_probe(const char *path, int *w, int *h, char *err, int errcap) {
    *w = *h = 0;
    File f = {-1, 0};
    if (!file_open(path, &f, err, errcap)) return false;
    size_t n = f.size < PROBE_PREFIX ? f.size : PROBE_PREFIX;
    unsigned char *buf = file_read(&f, 0, n, path, err, errcap);
    if (!buf) return close(f.fd), false;
    Job j = {.buf = buf, .len = n};
    bool ok = run(&j), whole = n == f.size;
    if (!ok && j.hit_eof && !whole) {
        /* the header (EXIF, ICC, text chunks) is longer than the prefix */
        free(buf);
        buf = file_read(&f, 0, f.size, path, err, errcap);
        if (!buf) return close(f.fd), false;
        j = (Job){.buf = buf, .len = f.size};
        ok = run(&j);
        whole = true;
    }
    if (ok) {
        /* a complete file ends with EOI / IEND; otherwise decode to see
         * whether what is there is usable */
        bool png = sniff(buf, n) == FMT_PNG;
        size_t tl = png ? sizeof PNG_IEND : 2;
        unsigned char *tail = f.size >= tl ? file_read(&f, f.size - tl, tl, path, err, errcap) : NULL;
        bool complete = tail && (png ? memcmp(tail, PNG_IEND, tl) == 0 : tail[0] == 0xFF && tail[1] == 0xD9);
        free(tail);
        if (!complete) {
            if (!whole) {
                free(buf);
                buf = file_read(&f, 0, f.size, path, err, errcap);
                if (!buf) return close(f.fd), false;
            }
            j = (Job){.buf = buf, .len = f.size, .pixels = true};
            ok = run(&j);
            free(j.px);
        }
    }
    close(f.fd);
    free(buf);
    if (!ok) return errf(err, errcap, "%s: %s", path, j.msg);
    *w = j.w, *h = j.h;
    return true;
}

/* ---------------------------------------------------------------- encode */

static bool check_image(const char *path, const Image *im, int max_side, char *err, int errcap) {
    if (!im->px || im->w < 1 || im->h < 1 || im->w > max_side || im->h > max_side)
        return errf(err, errcap, "%s: cannot write a %dx%d image (sides 1..%d)", path, im->w, im->h, max_side);
    return true;
}

typedef struct JpegEnc {
    struct jpeg_compress_struct ci;
    JpegErr e;
} JpegEnc;

static bool jpeg_encode(Job *j, JpegEnc *c, const Image *im, int quality, bool full_chroma) {
    c->ci.err = NULL;
    jpeg_err_init(&c->e, j);
    if (setjmp(c->e.jb)) {
        if (c->ci.err) jpeg_destroy_compress(&c->ci);
        return false;
    }
    c->ci.err = &c->e.pub;
    jpeg_create_compress(&c->ci);
    jpeg_mem_dest(&c->ci, &j->enc, &j->enc_len);
    c->ci.image_width = (JDIMENSION)im->w;
    c->ci.image_height = (JDIMENSION)im->h;
    c->ci.input_components = 3;
    c->ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c->ci);
    jpeg_set_quality(&c->ci, quality, TRUE);
    if (full_chroma)
        for (int k = 0; k < c->ci.num_components; k++) c->ci.comp_info[k].h_samp_factor = c->ci.comp_info[k].v_samp_factor = 1;
    jpeg_start_compress(&c->ci, TRUE);
    while (c->ci.next_scanline < c->ci.image_height) {
        JSAMPROW r = im->px + (size_t)c->ci.next_scanline * (size_t)im->w * 3;
        jpeg_write_scanlines(&c->ci, &r, 1);
    }
    jpeg_finish_compress(&c->ci);
    jpeg_destroy_compress(&c->ci);
    return true;
}

static bool write_bytes(const char *path, const void *data, size_t len, char *err, int errcap) {
    const void *chunks[1] = {data};
    size_t lens[1] = {len};
    char why[512];
    if (!atomic_write(path, chunks, lens, 1, why, sizeof why)) return errf(err, errcap, "%s: %s", path, why);
    return true;
}

static bool write_jpeg(const char *path, const Image *im, int quality, bool full_chroma, char *err, int errcap) {
    if (!check_image(path, im, 65500, err, errcap)) return false;
    if (quality < 1 || quality > 100) return errf(err, errcap, "%s: JPEG quality %d is outside 1..100", path, quality);
    Job j = {0};
    JpegEnc c;
    bool ok = jpeg_encode(&j, &c, im, quality, full_chroma);
    if (ok) ok = write_bytes(path, j.enc, j.enc_len, err, errcap);
    else errf(err, errcap, "%s: %s", path, j.msg);
    free(j.enc);
    return ok;
}

bool image_write_jpeg(const char *path, const Image *im, int quality, char *err, int errcap) { return write_jpeg(path, im, quality, false, err, errcap); }

bool image_write_jpeg_444(const char *path, const Image *im, int quality, char *err, int errcap) { return write_jpeg(path, im, quality, true, err, errcap); }

bool image_write_png(const char *path, const Image *im, char *err, int errcap) {
    if (!check_image(path, im, 1 << 24, err, errcap)) return false;
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)im->w;
    pi.height = (png_uint_32)im->h;
    pi.format = PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    if (!png_image_write_to_memory(&pi, NULL, &size, 0, im->px, 0, NULL)) {
        errf(err, errcap, "%s: cannot encode PNG: %s", path, pi.message);
        png_image_free(&pi);
        return false;
    }
    void *mem = malloc(size ? size : 1);
    if (!mem) return errf(err, errcap, "%s: out of memory", path);
    bool ok = png_image_write_to_memory(&pi, mem, &size, 0, im->px, 0, NULL);
    if (ok) ok = write_bytes(path, mem, size, err, errcap);
    else errf(err, errcap, "%s: cannot encode PNG: %s", path, pi.message);
    png_image_free(&pi);
    free(mem);
    return ok;
}

/* runtime/train/checkpoint.c — training-state files: safetensors + metadata
 * "yolocc_state" (the loop's JSON) and "crc32" (tensor name -> CRC-32 of its
 * bytes, hex), so a flipped bit anywhere is caught on resume. */
#include "checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t bytes_crc(const void *p, uint64_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *b = p;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, b, chunk);
        b += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

uint64_t ckpt_item_bytes(const StWriteItem *it) {
    uint64_t n = st_dtype_size(it->dtype);
    for (int d = 0; d < it->nd; d++) n *= (uint64_t)it->shape[d];
    return n;
}

bool ckpt_write(const char *path, const StWriteItem *items, int n, const cJSON *state, char *err, int errcap) {
    cJSON *crcs = cJSON_CreateObject();
    bool ok = crcs != NULL;
    for (int i = 0; ok && i < n; i++) {
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", bytes_crc(items[i].data, ckpt_item_bytes(&items[i])));
        ok = cJSON_AddStringToObject(crcs, items[i].name, hex) != NULL;
    }
    char *crc_txt = ok ? cJSON_PrintUnformatted(crcs) : NULL, *state_txt = ok ? cJSON_PrintUnformatted(state) : NULL;
    cJSON_Delete(crcs);
    if (!crc_txt || !state_txt) {
        free(crc_txt);
        free(state_txt);
        snprintf(err, (size_t)errcap, "%s: out of memory", path);
        return false;
    }
    const char *meta[] = {"format", "yolocc-train-state", "yolocc_state", state_txt, "crc32", crc_txt, NULL};
    ok = st_write(path, items, n, meta, err, errcap);
    free(crc_txt);
    free(state_txt);
    return ok;
}

static const char *meta_value(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

bool ckpt_read(const char *path, StFile *f, cJSON **state, char *err, int errcap) {
    *state = NULL;
    if (!st_read(path, f, err, errcap)) return false;
    const char *fmt = meta_value(f, "format"), *st_txt = meta_value(f, "yolocc_state"), *crc_txt = meta_value(f, "crc32");
    cJSON *crcs = NULL;
    if (!fmt || strcmp(fmt, "yolocc-train-state") != 0 || !st_txt || !crc_txt) {
        snprintf(err, (size_t)errcap, "%s: not a yolocc training-state file", path);
        goto fail;
    }
    crcs = cJSON_Parse(crc_txt);
    *state = cJSON_Parse(st_txt);
    if (!cJSON_IsObject(crcs) || !cJSON_IsObject(*state)) {
        snprintf(err, (size_t)errcap, "%s: training-state metadata is not valid JSON", path);
        goto fail;
    }
    if (cJSON_GetArraySize(crcs) != f->n) {
        snprintf(err, (size_t)errcap, "%s: %d checksums for %d tensors", path, cJSON_GetArraySize(crcs), f->n);
        goto fail;
    }
    for (int i = 0; i < f->n; i++) {
        const StTensor *t = &f->tensors[i];
        const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(crcs, t->name));
        char got[16];
        snprintf(got, sizeof got, "%08x", bytes_crc(t->data, t->nbytes));
        if (!want || strcmp(want, got) != 0) {
            snprintf(err, (size_t)errcap, "%s: tensor '%s' fails its checksum (stored %s, computed %s)", path, t->name, want ? want : "none", got);
            goto fail;
        }
    }
    cJSON_Delete(crcs);
    return true;
fail:
    cJSON_Delete(crcs);
    cJSON_Delete(*state);
    *state = NULL;
    st_free(f);
    return false;
}

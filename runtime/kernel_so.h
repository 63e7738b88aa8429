/* runtime/kernel_so.h — loads a compiled kernel shared object (from a plan
 * or the kernel cache) straight from memory and looks up its symbols. Owns
 * the dlopen handle only; must not compile, cache or call the kernels. */
#ifndef YOLOCC_KERNEL_SO_H
#define YOLOCC_KERNEL_SO_H
#include <stdbool.h>
#include <stddef.h>

typedef struct KernelSo {
    void *handle; /* dlopen handle; NULL when closed */
} KernelSo;

/* Loads bytes (an ELF shared object) with RTLD_NOW | RTLD_LOCAL, through a
 * memfd, or a private temp file removed right after dlopen where memfds or
 * /proc are unavailable. Fails with "not a shared object" for other bytes. */
bool kernel_so_open(KernelSo *k, const unsigned char *bytes, size_t len, char *err, int errcap);

/* The symbol's address, or NULL when the object has no such symbol. */
void *kernel_so_sym(const KernelSo *k, const char *name);

/* Unloads; safe on a closed or failed KernelSo. */
void kernel_so_close(KernelSo *k);

#endif

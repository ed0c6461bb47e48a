/* src/core/npy.h - reading NumPy's .npy files (format versions 1, 2 and 3): the header parsed
 * with a bound on every length and count, float32 or float64 in either byte order, C order
 * only (a Fortran-order file is refused, not transposed), the data read in chunks and
 * converted to float32. Not public API: the MIR relevancy file (src/train/mir.c) reads with it.
 * Tests: tests/test_mir.c. */
#ifndef TUBELET_CORE_NPY_H
#define TUBELET_CORE_NPY_H

#include <stdint.h>
#include <stdio.h>

#define TBI_NPY_MAX_DIMS 8

struct tbi_npy {
    int n_dims;
    int64_t shape[TBI_NPY_MAX_DIMS];
    int64_t n;             /* elements: the product of the shape */
    int item_bytes;        /* 4 (float32) or 8 (float64) */
    int swap;              /* the file's byte order is not the host's */
    char descr[16];        /* as the header writes it, e.g. "<f4" */
    FILE *f;               /* positioned at the data */
};

/* Open path and parse its header; the file's size must be the header's plus the shape's data
 * exactly. 0, or TB_ENOENT/TB_EIO/TB_EFORMAT with a message naming the file (and, for a bad
 * header, what in it). h->f is NULL on failure. */
int tbi_npy_open(struct tbi_npy *h, const char *path);

/* Read all h->n elements as float32 into out (float64 rounds to nearest). 0 or TB_EIO. */
int tbi_npy_read_f32(struct tbi_npy *h, const char *path, float *out);

/* Close the file; a closed or never-opened h is fine. */
void tbi_npy_close(struct tbi_npy *h);

#endif /* TUBELET_CORE_NPY_H */

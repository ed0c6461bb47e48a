/* src/core/npy.h - reading NumPy arrays from .npy files (format versions 1, 2 and 3) and from
 * Python pickles of one array (pickle.dump(a), protocols 3 to 5: src/core/pickle.c): the header
 * parsed with a bound on every length and count, float32 or float64 in either byte order, C
 * order only (a Fortran-order file is refused, not transposed), the data read in chunks and
 * converted to float32, or streamed as float64. Not public API: the MIR relevancy files
 * (src/metrics/mir.c, mir_captions.c) read with it. Tests: tests/test_mir.c,
 * tests/test_captions.c. */
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

/* Read the next n elements (from where the last read stopped) as float64 into out, exactly
 * (float32 widens without rounding): a large array a row at a time. 0 or TB_EIO. */
int tbi_npy_read_f64(struct tbi_npy *h, const char *path, int64_t n, double *out);

/* Open path, a pickle of one NumPy array, into h as tbi_npy_open does: numpy's
 * _reconstruct (protocols 3 and 4) or _frombuffer (protocol 5) with the data in the pickle
 * (not out-of-band); h->f positioned at the array's bytes, which must lie inside the file.
 * Anything else is TB_EFORMAT naming what was found and where. */
int tbi_pkl_open(struct tbi_npy *h, const char *path);

/* Whether path starts like a pickle (protocol 2 or later) rather than like a .npy file: 1, 0,
 * or a negative code when it cannot be read. */
int tbi_pkl_is(const char *path);

/* Close the file; a closed or never-opened h is fine. */
void tbi_npy_close(struct tbi_npy *h);

#endif /* TUBELET_CORE_NPY_H */

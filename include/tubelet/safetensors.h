/* include/tubelet/safetensors.h - reading and writing safetensors files (the format PyTorch,
 * timm and Hugging Face load directly): an 8-byte little-endian header size, a JSON header
 * {"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}, then the raw tensor
 * bytes. tubelet writes F32 and I64 tensors, atomically, and reads F32, I64 (and converts
 * BF16/F16 to F32 on read). Every file tubelet writes carries a checksum: its metadata's first
 * entry is "crc32c", 8 hex digits of the CRC-32C of the whole file with those digits read as
 * "00000000" (docs/FORMATS.md); a file that carries one is verified on read, one without (from
 * PyTorch, or tubelet before the checksum) is read as it is. Tests: tests/test_vit.c,
 * tests/test_crash.c. */
#ifndef TUBELET_SAFETENSORS_H
#define TUBELET_SAFETENSORS_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TB_ST_MAX_DIMS 8

enum tb_st_dtype { TB_ST_F32, TB_ST_I64, TB_ST_BF16, TB_ST_F16 };

struct tb_st_tensor {
    char name[256];
    enum tb_st_dtype dtype;
    int n_dims;
    int64_t shape[TB_ST_MAX_DIMS];
    int64_t n;          /* elements */
    void *data;         /* F32 -> float, I64 -> int64_t; owned by the file (read) or the caller
                           (write) */
};

/* A file in memory. */
struct tb_st_file {
    struct tb_st_tensor *tensors;
    int n_tensors;
    char *metadata;     /* the __metadata__ object as JSON text (without "crc32c"), or NULL */
    int checksummed;    /* 1: the file carried a checksum, and its bytes matched it */
};

/* Read path. BF16/F16 tensors come back as F32. Errors name the file (and the tensor); a
 * truncated file and one whose bytes do not match its checksum are TB_EFORMAT saying so. */
TB_API int tb_st_read(struct tb_st_file **out, const char *path);
TB_API void tb_st_free(struct tb_st_file **f);
/* The tensor called name, or NULL. */
TB_API const struct tb_st_tensor *tb_st_find(const struct tb_st_file *f, const char *name);

/* Write n tensors (their data borrowed) and optional metadata (a JSON object's text, e.g.
 * "{\"step\": \"12\"}"; a "crc32c" in it is replaced by the file's own) to path, with the
 * checksum, atomically (temporary file, fsync, rename): a failure leaves path as it was. */
TB_API int tb_st_write(const char *path, const struct tb_st_tensor *tensors, int n,
                       const char *metadata);
/* The same, where a tensor with data NULL has its bytes written by fill(user, i, dst) straight
 * into the file's buffer (from device memory, say: no second host copy); fill returns 0 or a
 * TB_E* code. */
TB_API int tb_st_write_fill(const char *path, const struct tb_st_tensor *tensors, int n,
                            const char *metadata, int (*fill)(void *user, int i, void *dst),
                            void *user);

/* t's data (its dtype and shape; F32, I64 or F16) as a NumPy .npy file (format 1.0,
 * little-endian, C order), written atomically: np.load reads it. 0, or TB_ENOMEM / TB_EIO
 * naming the file (TB_EINVAL: bf16, which NumPy lacks). */
TB_API int tb_npy_write(const char *path, const struct tb_st_tensor *t);
/* x (rows, cols) float32 as a .npy file (tb_npy_write). */
TB_API int tb_npy_write_f32(const char *path, const float *x, int64_t rows, int64_t cols);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_SAFETENSORS_H */

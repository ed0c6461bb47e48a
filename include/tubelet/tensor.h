/* include/tubelet/tensor.h - the shape legend used in every shape comment, and the device
 * and dtype a model's configuration names. Activations and parameters are plain float arrays
 * in a backend's memory with their shapes written beside them (llm.c style); the backend op
 * table (src/tensor/backend.h) works on them.
 *
 *   B  batch (per process)       N   visual tokens per clip
 *   T  frames per clip           S   text tokens per caption
 *   H, W  pixels                 D   embedding width
 *   C  image channels (3)        F   MLP hidden width (4 D)
 *   P  spatial patch             NH, HS  heads, head size (D = NH * HS)
 *   TU tubelet (frames a patch spans)   L, V  layers, vocabulary
 *   K  classes
 * T is frames, never sequence length. Videos in tensors are (B, C, T, H, W), as PyTorch's
 * Conv3d expects; tokens are ordered (t, h, w) as PyTorch flattens the Conv3d output. */
#ifndef TUBELET_TENSOR_H
#define TUBELET_TENSOR_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tb_dtype { TB_DTYPE_F32, TB_DTYPE_BF16 };
enum tb_device { TB_DEVICE_CPU, TB_DEVICE_CUDA };

/* 0 if the backend called name ("cpu", "cuda", the test backends "cpu-guarded", "cuda-emu")
 * is in this build and opens here (for "cuda": a GPU and its driver are found), else a negative
 * TB_E* with the reason in tb_errmsg(). */
TB_API int tb_backend_probe(const char *name);

/* The CPU backend's fair share for the backends opened from now on (a process setting; the
 * library's default is off): 1 lets the CPU ops' OpenMP team follow the cores other processes
 * leave free (the tubelet program turns it on), 0 keeps it at OpenMP's setting. Speed only,
 * never results; TUBELET_CPU_SHARE=off in the environment keeps it off. */
TB_API void tb_backend_set_share(int on);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TENSOR_H */

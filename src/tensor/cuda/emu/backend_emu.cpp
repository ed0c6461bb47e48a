/* src/tensor/cuda/emu/backend_emu.cpp - the "cuda-emu" backend: src/tensor/cuda's sources, the
 * kernels and the host side alike, compiled as C++ for the CPU on the emulated device of
 * emulate.h (checked launches, guarded NaN memory, streams run in an adversarial order:
 * emulate_rt.h), emulate_ptx.h (attention's tensor-core primitives), emulate_lt.h (cuBLASLt,
 * checked against its documented rules) and emulate_nccl.h (NCCL, over dist.h's processes). A test
 * backend: it runs what the GPU would run, slowly, and shows the bugs a GPU hides (docs/CUDA.md
 * says which it cannot see). Built wherever the CUDA headers are, nvcc or not. The sources go into
 * a namespace of their own: the same kernels compiled by nvcc (backend.cu) link beside them. */
#define TBC_EMULATE 1
#include "emulate_lt.h"
#include "emulate_nccl.h"
#include "emulate_ptx.h"

extern "C" {
#include "core/internal.h"
#include "tensor/backend.h"
#include "tubelet/dist.h"
}

namespace tbc_emu
{
#include "tensor/cuda/backend.cu"
}

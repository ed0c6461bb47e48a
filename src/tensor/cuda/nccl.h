/* src/tensor/cuda/nccl.h - NCCL as a table of the functions the backend's data parallelism
 * calls, as cuBLASLt is (lt.h): on a GPU, NCCL's own functions, found with dlopen when a CUDA
 * backend opens with more than one process (TUBELET_NCCL=PATH, else libnccl.so.2), so nothing
 * else maps the library and no build needs it; on the emulated device, emu/emulate_nccl.h's
 * stand-in, which checks each call as NCCL documents it and does the collective over the
 * process group of dist.h, on the stream it was given. The types are NCCL 2's ABI, stated
 * here (nccl.h is not needed to build): a 128-byte unique id passed by value, enums as int,
 * ncclFloat32 7, ncclBfloat16 9, ncclSum 0, ncclAvg 4 (NCCL 2.10 and later). C++ only. */
#ifndef TUBELET_TENSOR_CUDA_NCCL_H
#define TUBELET_TENSOR_CUDA_NCCL_H

#include <stddef.h>

struct tbc_nccl_id {
    char internal[128];
};

enum { TBC_NCCL_F32 = 7, TBC_NCCL_BF16 = 9 };
enum { TBC_NCCL_SUM = 0, TBC_NCCL_AVG = 4 };
#define TBC_NCCL_MIN_VERSION 21000 /* ncclAvg */

struct tbc_nccl {
    int (*version)(int *);
    int (*unique_id)(tbc_nccl_id *);
    int (*init_rank)(void **comm, int nranks, tbc_nccl_id id, int rank);
    int (*destroy)(void *comm);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                      cudaStream_t stream);
    int (*all_gather)(const void *send, void *recv, size_t send_count, int dtype, void *comm,
                      cudaStream_t stream);
    int (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root, void *comm,
                     cudaStream_t stream);
    const char *(*error_string)(int);
};

/* The functions by their names, in the table's order. */
#define TBC_NCCL_NAMES                                                                             \
    "ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclAllReduce",   \
        "ncclAllGather", "ncclBroadcast", "ncclGetErrorString"

#if !defined(TBC_EMULATE) && defined(__has_include)
#if __has_include(<nccl.h>)
/* Where NCCL's header is found, the ABI stated above is checked against it. */
#include <nccl.h>
static_assert(sizeof(tbc_nccl_id) == sizeof(ncclUniqueId), "NCCL's unique id");
static_assert(TBC_NCCL_F32 == (int)ncclFloat32 && TBC_NCCL_BF16 == (int)ncclBfloat16,
              "NCCL's types");
static_assert(TBC_NCCL_SUM == (int)ncclSum && TBC_NCCL_AVG == (int)ncclAvg, "NCCL's operations");
static_assert(sizeof(ncclResult_t) == sizeof(int) && sizeof(ncclDataType_t) == sizeof(int) &&
                  sizeof(ncclRedOp_t) == sizeof(int),
              "NCCL's enums are ints");
#endif
#endif

#endif /* TUBELET_TENSOR_CUDA_NCCL_H */

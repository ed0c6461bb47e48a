/* src/tensor/cuda/emu/emulate_nccl.h - NCCL on the emulated device: the functions of the
 * table in src/tensor/cuda/nccl.h, which check each call as NCCL documents it and do the
 * collective with dist.h's process group (MPI's, or the TCP group under torchrun or srun) on
 * the stream given, in its order with the stream's other work (emulate_rt.h), so the
 * backend's NCCL code runs on the CPU as on a GPU. Checked:
 * - the unique id: made by rank 0 alone, and the same on every rank at the communicator's
 *   creation (each rank's is compared with all the others': an exchange that did not reach
 *   every rank fails there); the rank and count are the process group's;
 * - each collective: a communicator this stand-in made and not destroyed, a live stream, a
 *   count above zero, a type and operation it models (float32; sum or average), both buffers
 *   inside device allocations, in place or not overlapping at all (all-gather in place: the
 *   send buffer at the rank's place in the receive buffer).
 * Not modelled: bf16 and the other types and operations (refused, naming them), groups,
 * non-blocking communicators, the network. The arithmetic: sum in rank order, the average
 * that sum times 1/count (NCCL's own order and rounding may differ: a GPU's results are
 * compared within tolerance). A refused call prints why (a test device) and returns
 * ncclInvalidArgument (4) or ncclInvalidUsage (5).
 * Overlap: an all-reduce issued after kernels were launched since the previous one, with no
 * stream waiting on another in between, lets a GPU reduce while those kernels run (the
 * backward goes on while a finished span is reduced). The communicator counts them; with
 * TBC_EMU_REPORT=1 its destruction prints "emulate: NCCL: N all-reduces, K issued amid
 * kernels (overlapped)", which test_dist reads. */
#ifndef TUBELET_EMULATE_NCCL_H
#define TUBELET_EMULATE_NCCL_H

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "tensor/cuda/nccl.h"
#include "tubelet/dist.h"

#define EMU_NCCL_MAGIC "tubelet-emulated-nccl"

struct emu_nccl_comm {
    char magic[32];
    int rank, nranks;
    long reduces, overlapped;   /* all-reduces issued; of them, amid kernels */
    long at_launched, at_waits; /* kernels launched, waits queued on other streams: at
                                 * the previous one */
};

static int emu_nccl_refuse(int st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int emu_nccl_refuse(int st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emu_say("NCCL", fmt, ap);
    va_end(ap);
    return st;
}

static int emu_nccl_version(int *v)
{
    *v = 22800; /* models 2.28's calls */
    return 0;
}

static int emu_nccl_unique_id(tbc_nccl_id *id)
{
    static unsigned n;
    if (tb_dist_rank() != 0)
        return emu_nccl_refuse(5,
                               "ncclGetUniqueId on rank %d: rank 0 makes the id, the others "
                               "receive it",
                               tb_dist_rank());
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "%s %ld %u", EMU_NCCL_MAGIC, (long)getpid(), ++n);
    return 0;
}

static int emu_nccl_init_rank(void **comm, int nranks, tbc_nccl_id id, int rank)
{
    *comm = NULL;
    if (nranks != tb_dist_world() || rank != tb_dist_rank())
        return emu_nccl_refuse(4, "ncclCommInitRank as rank %d of %d in a group where this "
                               "process is rank %d of %d", rank, nranks, tb_dist_world(),
                               tb_dist_rank());
    /* Every rank's id, compared after they are all in (a collective, as NCCL's initialisation
     * is: judging one before would leave the others waiting in it). */
    const size_t nf = sizeof(id) / sizeof(float);
    std::vector<float> mine(nf), all(nf * (size_t)nranks);
    memcpy(mine.data(), &id, sizeof(id));
    if (tb_dist_gather_f32(mine.data(), nf, all.data()) < 0)
        return emu_nccl_refuse(2, "ncclCommInitRank: the process group failed: %s", tb_errmsg());
    for (int r = 0; r < nranks; r++) {
        const char *theirs = (const char *)&all[(size_t)r * nf];
        if (strncmp(theirs, EMU_NCCL_MAGIC, strlen(EMU_NCCL_MAGIC)))
            return emu_nccl_refuse(4, "ncclCommInitRank: rank %d holds an id ncclGetUniqueId "
                                   "did not make (the id did not reach it)", r);
        if (memcmp(theirs, &id, sizeof(id)))
            return emu_nccl_refuse(4, "ncclCommInitRank: rank %d holds another unique id than "
                                   "rank %d (the id did not reach every rank)", r, rank);
    }
    emu_nccl_comm *c = (emu_nccl_comm *)calloc(1, sizeof(*c));
    if (!c)
        return 2;
    snprintf(c->magic, sizeof(c->magic), "%s", EMU_NCCL_MAGIC);
    c->rank = rank, c->nranks = nranks;
    *comm = c;
    return 0;
}

static int emu_nccl_valid(void *comm)
{
    emu_nccl_comm *c = (emu_nccl_comm *)comm;
    return c && !strcmp(c->magic, EMU_NCCL_MAGIC);
}

static int emu_nccl_destroy(void *comm)
{
    if (!emu_nccl_valid(comm))
        return emu_nccl_refuse(4, "ncclCommDestroy of no live communicator");
    const emu_nccl_comm *c = (const emu_nccl_comm *)comm;
    const char *report = getenv("TBC_EMU_REPORT");
    if (report && !strcmp(report, "1"))
        fprintf(stderr,
                "emulate: NCCL: rank %d: %ld all-reduces, %ld issued amid kernels "
                "(overlapped)\n",
                c->rank, c->reduces, c->overlapped);
    memset(comm, 0, sizeof(emu_nccl_comm));
    free(comm);
    return 0;
}

/* The checks every collective shares: 0, or the refusal's code. */
static int emu_nccl_check(const char *fn, const void *send, size_t send_bytes, const void *recv,
                          size_t recv_bytes, int dtype, void *comm, cudaStream_t stream)
{
    if (!emu_nccl_valid(comm))
        return emu_nccl_refuse(4, "%s on no live communicator", fn);
    const int si = emu_stream_index(stream);
    if (si < 0 || (size_t)si >= emu_streams.size() || !emu_streams[(size_t)si].live)
        return emu_nccl_refuse(4, "%s on %s", fn,
                               si < 0 ? "the null stream (the backend's "
                                        "collectives go on its own streams)"
                                      : "a stream not live");
    if (dtype != TBC_NCCL_F32)
        return emu_nccl_refuse(4, "%s of type %d: the stand-in models float32 (7) only", fn, dtype);
    if (!send_bytes)
        return emu_nccl_refuse(4, "%s of no elements", fn);
    if (!emu_in_device(send, send_bytes) || !emu_in_device(recv, recv_bytes))
        return emu_nccl_refuse(4,
                               "%s: the %s buffer (%zu bytes at %p) is not inside one "
                               "device allocation",
                               fn, emu_in_device(send, send_bytes) ? "receive" : "send",
                               emu_in_device(send, send_bytes) ? recv_bytes : send_bytes,
                               emu_in_device(send, send_bytes) ? recv : send);
    return 0;
}

static int emu_overlap(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return x < y + bn && y < x + an;
}

static int emu_nccl_all_reduce(const void *send, void *recv, size_t count, int dtype, int op,
                               void *comm, cudaStream_t stream)
{
    const size_t bytes = count * 4;
    int st = emu_nccl_check("ncclAllReduce", send, bytes, recv, bytes, dtype, comm, stream);
    if (st)
        return st;
    if (op != TBC_NCCL_SUM && op != TBC_NCCL_AVG)
        return emu_nccl_refuse(4,
                               "ncclAllReduce with operation %d: the stand-in models sum "
                               "(0) and average (4)",
                               op);
    if (send != recv && emu_overlap(send, bytes, recv, bytes))
        return emu_nccl_refuse(4, "ncclAllReduce with send and receive buffers that overlap "
                                  "but are not the same");
    emu_nccl_comm *c = (emu_nccl_comm *)comm;
    long waits = 0; /* on the other streams: the compute stream waiting for a reduction */
    for (size_t i = 0; i < emu_streams.size(); i++)
        waits += (int)i != emu_stream_index(stream) ? emu_streams[i].waits : 0;
    c->overlapped += c->reduces && waits == c->at_waits && emu_n_launched > c->at_launched;
    c->reduces++;
    c->at_launched = emu_n_launched, c->at_waits = waits;
    const int nranks = c->nranks;
    emu_enqueue(stream, [send, recv, count, op, nranks] {
        float *x = (float *)recv;
        if (send != recv)
            memcpy(x, send, count * 4);
        /* the sum in rank order times 1/count: dist.h's mean; a sum is that mean times count */
        if (tb_dist_mean_f32(x, count) < 0)
            emu_fail("the emulated ncclAllReduce: the process group failed");
        if (op == TBC_NCCL_SUM)
            for (size_t i = 0; i < count; i++)
                x[i] *= (float)nranks;
    });
    return 0;
}

static int emu_nccl_all_gather(const void *send, void *recv, size_t send_count, int dtype,
                               void *comm, cudaStream_t stream)
{
    const emu_nccl_comm *c = (const emu_nccl_comm *)comm;
    const size_t bytes = send_count * 4;
    int st = emu_nccl_check("ncclAllGather", send, bytes, recv,
                            emu_nccl_valid(comm) ? bytes * (size_t)c->nranks : bytes, dtype, comm,
                            stream);
    if (st)
        return st;
    const char *mine = (const char *)recv + bytes * (size_t)c->rank;
    if (send != mine && emu_overlap(send, bytes, recv, bytes * (size_t)c->nranks))
        return emu_nccl_refuse(4,
                               "ncclAllGather: the send buffer overlaps the receive buffer "
                               "but is not rank %d's place in it",
                               c->rank);
    emu_enqueue(stream, [send, recv, send_count] {
        std::vector<float> x((const float *)send, (const float *)send + send_count);
        if (tb_dist_gather_f32(x.data(), send_count, (float *)recv) < 0)
            emu_fail("the emulated ncclAllGather: the process group failed");
    });
    return 0;
}

static int emu_nccl_broadcast(const void *send, void *recv, size_t count, int dtype, int root,
                              void *comm, cudaStream_t stream)
{
    const size_t bytes = count * 4;
    int st = emu_nccl_check("ncclBroadcast", send, bytes, recv, bytes, dtype, comm, stream);
    if (st)
        return st;
    const emu_nccl_comm *c = (const emu_nccl_comm *)comm;
    if (root < 0 || root >= c->nranks)
        return emu_nccl_refuse(4, "ncclBroadcast from rank %d of %d", root, c->nranks);
    if (send != recv && emu_overlap(send, bytes, recv, bytes))
        return emu_nccl_refuse(4, "ncclBroadcast with send and receive buffers that overlap "
                                  "but are not the same");
    emu_enqueue(stream, [send, recv, count, root] {
        if (send != recv)
            memcpy(recv, send, count * 4);
        if (tb_dist_bcast(recv, count * 4, root) < 0)
            emu_fail("the emulated ncclBroadcast: the process group failed");
    });
    return 0;
}

static const char *emu_nccl_error_string(int st)
{
    static const char *const names[] = {"no error",
                                        "unhandled cuda error",
                                        "unhandled system error",
                                        "internal error",
                                        "invalid argument",
                                        "invalid usage",
                                        "remote process exited or there was a network error",
                                        "NCCL operation in progress"};
    return st >= 0 && st < 8 ? names[st] : "unknown result code";
}

static const struct tbc_nccl emu_nccl_table = {
    emu_nccl_version,    emu_nccl_unique_id,  emu_nccl_init_rank, emu_nccl_destroy,
    emu_nccl_all_reduce, emu_nccl_all_gather, emu_nccl_broadcast, emu_nccl_error_string,
};

#endif /* TUBELET_EMULATE_NCCL_H */

/* src/tensor/cuda/emu/emulate_rt.h - the host side of the emulated device: streams, events,
 * copies and memory, behind the runtime seam of src/tensor/cuda/cuda_common.h (tbc_rt_*).
 * Work queued on a stream does not run when it is queued: it runs when the host waits (a
 * stream or device synchronisation, a copy to the host, a free), and then the streams go in
 * an adversarial order: always the newest stream that can go on, as far as it can, so work a
 * later stream queues runs before earlier streams' work unless an event wait holds it back. A
 * missing wait between the compute and communication streams then reads values not yet
 * written (fresh device memory is NaN), where a GPU would usually, not always, hide it.
 * TBC_EMU_ORDER=oldest runs the oldest stream first instead, for a second order. A copy from
 * the host takes the source's bytes when it is queued (pageable memory: cudaMemcpyAsync
 * returns once they are staged); a copy to the host waits for everything. The null stream
 * runs at once (the tests of single kernels). It models no concurrency inside a stream and no
 * timing. */
#ifndef TUBELET_EMULATE_RT_H
#define TUBELET_EMULATE_RT_H

#include <deque>
#include <functional>
#include <vector>

struct emu_entry {
    std::function<void()> run; /* a kernel or copy; empty for a record or a wait */
    int event;                 /* record: the event; wait: the event waited on; else -1 */
    long seq;                  /* record: the event's record number; wait: the number awaited */
    int is_wait;
};

struct emu_stream_s {
    std::deque<emu_entry> q;
    int live;
    long waits; /* event waits queued on it so far */
};

struct emu_event_s {
    long recorded, done; /* records queued, records reached */
    int live;
};

static std::vector<emu_stream_s> emu_streams;
static std::vector<emu_event_s> emu_events;
static long emu_n_deferred; /* entries run later than queued: the tests check the model ran */
/* Kernels launched so far (emulate_nccl.h's overlap count). */
static long emu_n_launched;

/* Streams and events are small integers + 1 in the handle (0 is the null stream). */
static inline int emu_stream_index(cudaStream_t s)
{
    return (int)(uintptr_t)s - 1;
}

static inline void emu_enqueue(cudaStream_t s, std::function<void()> fn)
{
    const int i = emu_stream_index(s);
    if (i < 0) {
        fn();
        return;
    }
    emu_streams[(size_t)i].q.push_back(emu_entry{std::move(fn), -1, 0, 0});
}

static inline int emu_head_ready(const emu_stream_s &st)
{
    if (st.q.empty())
        return 0;
    const emu_entry &e = st.q.front();
    return !e.is_wait || emu_events[(size_t)e.event].done >= e.seq;
}

/* Runs every queued entry, the streams in the adversarial order; a wait on a record never
 * queued is a deadlock, as on a GPU (there it hangs). */
static inline void emu_drain(void)
{
    static int oldest_first = -1;
    if (oldest_first < 0) {
        const char *o = getenv("TBC_EMU_ORDER");
        oldest_first = o && !strcmp(o, "oldest");
    }
    for (;;) {
        int pick = -1, n = (int)emu_streams.size(), left = 0;
        for (int k = 0; k < n; k++) {
            const int i = oldest_first ? k : n - 1 - k;
            left += !emu_streams[(size_t)i].q.empty();
            if (pick < 0 && emu_head_ready(emu_streams[(size_t)i]))
                pick = i;
        }
        if (!left)
            return;
        if (pick < 0)
            emu_fail("deadlock: every stream waits on an event never recorded");
        emu_stream_s &st = emu_streams[(size_t)pick];
        while (emu_head_ready(st)) {
            emu_entry e = std::move(st.q.front());
            st.q.pop_front();
            if (e.run) {
                e.run();
                emu_n_deferred++;
            } else if (!e.is_wait) {
                emu_events[(size_t)e.event].done = e.seq;
            }
        }
    }
}

/* Streams and events given back are used again (their queues are empty: destroying drains). */
static inline cudaStream_t emu_stream_create(void)
{
    for (size_t i = 0; i < emu_streams.size(); i++)
        if (!emu_streams[i].live) {
            emu_streams[i].live = 1;
            return (cudaStream_t)(uintptr_t)(i + 1);
        }
    emu_streams.push_back(emu_stream_s{{}, 1, 0});
    return (cudaStream_t)(uintptr_t)emu_streams.size();
}

static inline void emu_stream_destroy(cudaStream_t s)
{
    emu_drain();
    if (emu_stream_index(s) >= 0)
        emu_streams[(size_t)emu_stream_index(s)].live = 0;
}

static inline int emu_event_create(void)
{
    for (size_t i = 0; i < emu_events.size(); i++)
        if (!emu_events[i].live) {
            emu_events[i] = emu_event_s{0, 0, 1};
            return (int)i;
        }
    emu_events.push_back(emu_event_s{0, 0, 1});
    return (int)emu_events.size() - 1;
}

static inline void emu_event_destroy(int ev)
{
    emu_drain();
    emu_events[(size_t)ev].live = 0;
}

static inline void emu_event_record(int ev, cudaStream_t s)
{
    emu_event_s &e = emu_events[(size_t)ev];
    e.recorded++;
    const int i = emu_stream_index(s);
    if (i < 0) {
        e.done = e.recorded;
        return;
    }
    emu_streams[(size_t)i].q.push_back(emu_entry{nullptr, ev, e.recorded, 0});
}

/* s waits for ev's latest record (none yet: nothing to wait for, as cudaStreamWaitEvent). */
static inline void emu_stream_wait(cudaStream_t s, int ev)
{
    const emu_event_s &e = emu_events[(size_t)ev];
    const int i = emu_stream_index(s);
    if (i < 0) {
        emu_drain();
        return;
    }
    emu_streams[(size_t)i].q.push_back(emu_entry{nullptr, ev, e.recorded, 1});
    emu_streams[(size_t)i].waits++;
}

/* Device memory: cudaMalloc's alignment, NaN when fresh; freeing waits for all queued work
 * (cudaFree synchronises) and fails when a canary byte beside the allocation was written. */
static inline void *emu_dev_malloc(size_t bytes)
{
    return emu_malloc(bytes, 256);
}

static inline int emu_dev_free(void *p)
{
    emu_drain();
    return emu_free(p);
}

static inline void emu_copy_in(void *dst, const void *src, size_t bytes, cudaStream_t s)
{
    std::vector<unsigned char> staged((const unsigned char *)src,
                                      (const unsigned char *)src + bytes);
    emu_enqueue(s, [dst, staged] { memcpy(dst, staged.data(), staged.size()); });
}

/* From pinned host memory: read when the stream reaches the copy (not when it is queued, as
 * from pageable memory), so a host that writes the memory again before the copy is done
 * changes what the device gets, as on a GPU. */
static inline void emu_copy_pinned(void *dst, const void *src, size_t bytes, cudaStream_t s)
{
    emu_enqueue(s, [dst, src, bytes] { memcpy(dst, src, bytes); });
}

static inline void emu_copy_out(void *dst, const void *src, size_t bytes)
{
    emu_drain();
    memcpy(dst, src, bytes);
}

static inline void emu_copy_dev(void *dst, const void *src, size_t bytes, cudaStream_t s)
{
    emu_enqueue(s, [dst, src, bytes] { memmove(dst, src, bytes); });
}

static inline void emu_memset(void *p, int v, size_t bytes, cudaStream_t s)
{
    emu_enqueue(s, [p, v, bytes] { memset(p, v, bytes); });
}

#endif /* TUBELET_EMULATE_RT_H */

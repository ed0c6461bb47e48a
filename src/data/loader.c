/* src/data/loader.c - the threaded, bounded, deterministic loader (contract in data.h).
 *
 * Clip positions of an epoch are handed out in order: position p belongs to batch p / B and
 * its buffer is slot (p / B) % P of a pool of P = prefetch + 1 batch buffers, so a worker only
 * takes a position whose batch has a free buffer and memory never grows. A worker decodes
 * into its own scratch clip and copies it into the batch, so a clip abandoned by the time
 * limit can never write into a buffer that has moved on. A failed clip goes back into a
 * small retry queue with the next attempt number; attempt a of position p reads a substitute
 * sample drawn from (seed, epoch, p, a), so the batches do not depend on timing or on the
 * number of workers. Tests: tests/test_data.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "tubelet/data.h"

#define MAX_ATTEMPTS 16
#define MIN_FAILURES_TO_STOP 10

enum { W_IDLE, W_RUNNING, W_WRITING };

struct worker {
    struct tb_loader *l;
    pthread_t thread;
    tb_reader *reader;
    uint8_t *scratch;         /* one clip (T, H, W, 3) */
    int state;
    int stuck;                /* abandoned by the time limit; leaves when it wakes */
    int exited;
    uint64_t token;           /* of the task it is on; 0 once abandoned */
    int64_t pos;              /* the task: clip position and attempt */
    int attempt;
    double started;
};

struct slot {
    struct tb_batch batch;
    int64_t number;           /* batch in it, -1 when free */
    int remaining;            /* clips still to come */
};

struct retry {
    int64_t pos;
    int attempt;
};

struct tb_loader {
    tb_dataset *ds;
    struct tb_loader_opts o;
    size_t clip_bytes;
    pthread_mutex_t mu;
    pthread_cond_t work, done;

    struct worker **workers;
    int n_workers, cap_workers;

    struct slot *slots;
    int n_slots;

    int64_t epoch;
    int64_t *order;           /* samples of this rank's shard, in epoch order */
    int64_t n_order, n_batches;
    int64_t next_pos;         /* next position to hand out */
    int64_t delivered;        /* batches given to the consumer */
    int64_t released;         /* batches given back */
    struct retry *retries;    /* bounded: at most one per position in flight */
    int n_retries, cap_retries;
    uint64_t next_token;

    int stop;
    int taken;                /* a batch buffer was taken (tb_loader_take): no more epochs */
    int failed_rc;            /* the loader gave up: tb_loader_next returns this */
    char failed_msg[768];
    char last_failure[512];
    struct tb_loader_stats stats;
};

/* Sample read at attempt a of position pos: the epoch's own at attempt 0, else a substitute
 * drawn from (seed, TB_RNG_SUBSTITUTE, epoch, pos, a). */
static int64_t sample_for(const struct tb_loader *l, int64_t pos, int attempt)
{
    if (attempt == 0)
        return l->order[pos];
    tb_rng r;
    tb_rng_init_for3(&r, l->o.seed, TB_RNG_SUBSTITUTE, (uint64_t)l->epoch, (uint64_t)pos,
                     (uint64_t)attempt);
    return (int64_t)tb_rng_below(&r, (uint64_t)tb_dataset_size(l->ds));
}

/* Record a failed clip (rc: its error, TB_ETIMEDOUT for one abandoned): count it, queue the
 * next attempt, or give up (at once where nothing may be replaced). Locked. */
static void clip_failed(struct tb_loader *l, int64_t pos, int attempt, const char *why,
                        int rc)
{
    l->stats.failures++;
    int timeout = rc == TB_ETIMEDOUT;
    l->stats.timeouts += timeout;
    snprintf(l->last_failure, sizeof(l->last_failure), "%s", why);
    int64_t attempted = l->stats.clips + l->stats.failures;
    if (l->o.max_failure_rate <= 0 && !l->failed_rc) {
        l->failed_rc = rc; /* no substitutes: the clip's own error */
        snprintf(l->failed_msg, sizeof(l->failed_msg), "%s", why);
    } else if (l->stats.failures >= MIN_FAILURES_TO_STOP &&
        (double)l->stats.failures > l->o.max_failure_rate * (double)attempted && !l->failed_rc) {
        l->failed_rc = TB_EDECODE;
        snprintf(l->failed_msg, sizeof(l->failed_msg), "too many clips fail: %" PRId64 " of %"
                 PRId64 " (limit %.3g%%); last: %s", l->stats.failures, attempted,
                 100 * l->o.max_failure_rate, why);
    } else if (attempt + 1 >= MAX_ATTEMPTS && !l->failed_rc) {
        l->failed_rc = TB_EDECODE;
        snprintf(l->failed_msg, sizeof(l->failed_msg), "position %" PRId64 " failed %d times "
                 "with substitutes; last: %s", pos, MAX_ATTEMPTS, why);
    } else if (l->n_retries < l->cap_retries) {
        l->retries[l->n_retries++] = (struct retry){pos, attempt + 1};
    }
    pthread_cond_broadcast(&l->work);
    pthread_cond_broadcast(&l->done);
}

/* Fill the batch fields of position pos from a finished clip. Called while WRITING: the
 * slot is reserved for this batch until every clip of it has arrived. */
static void store(struct tb_loader *l, struct worker *w, int64_t pos, int64_t sample,
                  const struct tb_sample_info *info)
{
    int64_t b = pos / l->o.batch_size;
    int j = (int)(pos % l->o.batch_size);
    struct tb_batch *batch = &l->slots[b % l->n_slots].batch;
    memcpy(batch->video + (size_t)j * l->clip_bytes, w->scratch, l->clip_bytes);
    for (int k = 0; k < 3; k++)
        batch->label[j * 3 + k] = info->label[k];
    batch->index[j] = sample;
    batch->text[j] = info->text;
    batch->flip[j] = (uint8_t)info->clip.crop.flip;
}

/* One clip a worker decodes: its position, attempt and sample in the epoch, and the token that
 * tells whether the time limit abandoned it meanwhile. */
struct clip_job {
    int64_t pos, epoch, sample;
    int attempt;
    uint64_t token;
};

/* The next position to decode, with its attempt: a retry first, else the next position whose
 * batch has a slot. 0 when there is none (the caller waits). Called with mu held. */
static int take_position(struct tb_loader *l, int64_t *pos, int *attempt)
{
    if (l->n_retries > 0) {
        struct retry rt = l->retries[--l->n_retries];
        *pos = rt.pos;
        *attempt = rt.attempt;
        return 1;
    }
    if (!l->failed_rc && l->next_pos < l->n_order &&
        l->next_pos / l->o.batch_size < l->released + l->n_slots) {
        *pos = l->next_pos++;
        *attempt = 0;
        return 1;
    }
    return 0;
}

/* A decoded clip (rc: tb_dataset_get's result, why: its message) into its batch, or its failure
 * counted. Called with mu held; drops it while writing or logging. */
static void finish_clip(struct tb_loader *l, struct worker *w, const struct clip_job *j, int rc,
                        const char *why, const struct tb_sample_info *info)
{
    if (w->token != j->token || l->epoch != j->epoch) {
        /* Abandoned by the time limit (already counted) or from an old epoch. */
        w->state = W_IDLE;
        return;
    }
    if (rc == TB_ENOMEM) {
        /* Not the clip's fault: a substitute would make the batches depend on the
         * machine's memory. The loader stops; a resumed run gets the same batches. */
        w->state = W_IDLE;
        if (!l->failed_rc) {
            l->failed_rc = TB_ENOMEM;
            snprintf(l->failed_msg, sizeof(l->failed_msg), "sample %" PRId64 ": %s", j->sample,
                     why);
        }
        pthread_cond_broadcast(&l->done);
        return;
    }
    if (rc < 0) {
        w->state = W_IDLE;
        pthread_mutex_unlock(&l->mu);
        if (l->o.max_failure_rate > 0)
            tbi_log(TB_LOG_WARN, "clip failed and was replaced: %s", why);
        pthread_mutex_lock(&l->mu);
        if (l->epoch == j->epoch)
            clip_failed(l, j->pos, j->attempt, why, rc);
        return;
    }
    w->state = W_WRITING;
    pthread_mutex_unlock(&l->mu);
    store(l, w, j->pos, j->sample, info);
    pthread_mutex_lock(&l->mu);
    w->state = W_IDLE;
    l->stats.clips++;
    l->stats.frames_decoded += info->clip.n_decoded;
    struct slot *s = &l->slots[(j->pos / l->o.batch_size) % l->n_slots];
    if (--s->remaining == 0)
        pthread_cond_broadcast(&l->done);
    pthread_cond_broadcast(&l->work); /* writers wait for this at epoch starts */
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct tb_loader *l = w->l;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop || w->stuck)
            break;
        struct clip_job j;
        if (!take_position(l, &j.pos, &j.attempt)) {
            pthread_cond_wait(&l->work, &l->mu);
            continue;
        }
        j.epoch = l->epoch;
        j.sample = sample_for(l, j.pos, j.attempt);
        j.token = ++l->next_token;
        w->token = j.token;
        w->pos = j.pos;
        w->attempt = j.attempt;
        w->state = W_RUNNING;
        w->started = tbi_now_s();
        pthread_mutex_unlock(&l->mu);

        struct tb_sample_info info;
        tb_errclear();
        int rc = tb_dataset_get(l->ds, w->reader, l->o.seed, j.epoch, j.sample, w->scratch, &info);
        char why[512];
        if (rc < 0)
            snprintf(why, sizeof(why), "%s", tb_errmsg()[0] ? tb_errmsg() : tb_strerror(rc));

        pthread_mutex_lock(&l->mu);
        finish_clip(l, w, &j, rc, why, &info);
    }
    w->exited = 1;
    pthread_cond_broadcast(&l->done);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static int start_worker(struct tb_loader *l)
{
    if (l->n_workers == l->cap_workers)
        return tbi_err(TB_ENOMEM, "too many loader workers");
    struct worker *w = tbi_calloc(1, sizeof(*w));
    if (!w)
        return tbi_err(TB_ENOMEM, "out of memory");
    w->l = l;
    int rc = tb_reader_open(&w->reader, NULL);
    if (rc == 0 && !(w->scratch = tbi_malloc(l->clip_bytes)))
        rc = tbi_err(TB_ENOMEM, "out of memory");
    if (rc == 0 && pthread_create(&w->thread, NULL, worker_main, w) != 0)
        rc = tbi_err(TB_ENOMEM, "cannot start a loader thread");
    if (rc < 0) {
        tb_reader_close(&w->reader);
        free(w->scratch);
        free(w);
        return rc;
    }
    l->workers[l->n_workers++] = w;
    return 0;
}

/* The time limit: abandon clips running too long, queue their next attempt, and start a
 * worker in place of each stuck one. Locked. */
static void watchdog(struct tb_loader *l)
{
    double t = tbi_now_s();
    int n = l->n_workers;
    for (int i = 0; i < n; i++) {
        struct worker *w = l->workers[i];
        if (w->stuck || w->exited || w->state != W_RUNNING || t - w->started < l->o.clip_timeout_s)
            continue;
        w->stuck = 1;
        w->token = 0;
        char why[256];
        snprintf(why, sizeof(why), "a clip took longer than %.3g s (the worker was abandoned)",
                 l->o.clip_timeout_s);
        tbi_log(TB_LOG_WARN, "%s", why);
        clip_failed(l, w->pos, w->attempt, why, TB_ETIMEDOUT);
        if (start_worker(l) < 0 && !l->failed_rc) {
            l->failed_rc = TB_ETIMEDOUT;
            snprintf(l->failed_msg, sizeof(l->failed_msg), "clips keep hanging: %s", why);
        }
    }
}

int tb_loader_open(tb_loader **out, tb_dataset *ds, const struct tb_loader_opts *o)
{
    *out = NULL;
    if (o->batch_size < 1 || o->n_workers < 1 || o->n_workers > 256 || o->prefetch < 0 ||
        o->prefetch > 64 || o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return tbi_err(TB_EINVAL, "bad loader settings: batch %d, %d workers, prefetch %d, "
                       "rank %d of %d", o->batch_size, o->n_workers, o->prefetch, o->rank,
                       o->world);
    struct tb_loader *l = tbi_calloc(1, sizeof(*l));
    if (!l)
        return tbi_err(TB_ENOMEM, "out of memory");
    l->ds = ds;
    l->o = *o;
    l->clip_bytes = tb_dataset_sample_bytes(ds);
    l->n_slots = o->prefetch + 1;
    l->cap_workers = 2 * o->n_workers + 8;
    l->cap_retries = o->batch_size * l->n_slots + l->cap_workers;
    l->epoch = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    l->slots = tbi_calloc((size_t)l->n_slots, sizeof(*l->slots));
    l->workers = tbi_calloc((size_t)l->cap_workers, sizeof(*l->workers));
    l->retries = tbi_calloc((size_t)l->cap_retries, sizeof(*l->retries));
    int rc = l->slots && l->workers && l->retries ? 0 : tbi_err(TB_ENOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < l->n_slots; i++) {
        struct tb_batch *b = &l->slots[i].batch;
        size_t n = (size_t)o->batch_size;
        l->slots[i].number = -1;
        /* Page-aligned, so a GPU backend can pin the pool (cudaHostRegister) once. */
        void *video = NULL;
        if (!tbi_fault(TBI_FAULT_ALLOC) && posix_memalign(&video, 4096, n * l->clip_bytes) == 0)
            b->video = video;
        b->label = tbi_malloc(n * 3 * sizeof(*b->label));
        b->index = tbi_malloc(n * sizeof(*b->index));
        b->text = tbi_malloc(n * sizeof(*b->text));
        b->flip = tbi_malloc(n);
        if (!b->video || !b->label || !b->index || !b->text || !b->flip)
            rc = tbi_err(TB_ENOMEM, "out of memory for %d batches of %zu MB", l->n_slots,
                         n * l->clip_bytes >> 20);
    }
    for (int i = 0; rc == 0 && i < o->n_workers; i++) {
        pthread_mutex_lock(&l->mu);
        rc = start_worker(l);
        pthread_mutex_unlock(&l->mu);
    }
    if (rc < 0) {
        tb_loader_close(&l);
        return rc;
    }
    *out = l;
    return 0;
}

/* This rank's samples of the epoch: the (shuffled) order padded to a multiple of world by
 * repeating its start, or cut to one with drop_last, then every world-th from rank. */
static int make_order(struct tb_loader *l, int64_t epoch)
{
    int64_t n = tb_dataset_size(l->ds), world = l->o.world;
    int64_t total = l->o.drop_last ? n / world * world : (n + world - 1) / world * world;
    int64_t *perm = tbi_malloc(sizeof(*perm) * (size_t)(n ? n : 1));
    int64_t *mine = tbi_malloc(sizeof(*mine) * (size_t)(total / world + 1));
    if (!perm || !mine) {
        free(perm);
        free(mine);
        return tbi_err(TB_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    if (l->o.shuffle) {
        tb_rng r;
        tb_rng_init_for(&r, l->o.seed, TB_RNG_SHUFFLE, (uint64_t)epoch, 0);
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)tb_rng_below(&r, (uint64_t)i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    int64_t m = 0;
    for (int64_t k = l->o.rank; k < total; k += world)
        mine[m++] = perm[k % n];
    free(perm);
    free(l->order);
    l->order = mine;
    l->n_order = m;
    int64_t B = l->o.batch_size;
    l->n_batches = l->o.drop_last ? m / B : (m + B - 1) / B;
    if (l->o.drop_last)
        l->n_order = l->n_batches * B;
    return 0;
}

int64_t tb_loader_epoch(tb_loader *l, int64_t epoch)
{
    return tb_loader_epoch_from(l, epoch, 0);
}

/* Ends the epoch under way and waits until no worker writes into a buffer. Locked. */
static void stop_writes(struct tb_loader *l, int64_t epoch)
{
    l->epoch = -1 - epoch; /* invalidates running tasks */
    l->next_pos = l->n_order;
    l->n_retries = 0;
    for (;;) {
        int writing = 0;
        for (int i = 0; i < l->n_workers; i++)
            writing |= l->workers[i]->state == W_WRITING;
        if (!writing)
            break;
        pthread_cond_wait(&l->work, &l->mu);
    }
}

int64_t tb_loader_epoch_from(tb_loader *l, int64_t epoch, int64_t first)
{
    pthread_mutex_lock(&l->mu);
    if (l->taken) {
        pthread_mutex_unlock(&l->mu);
        return tbi_err(TB_EINVAL, "a batch buffer was taken from this loader: close it");
    }
    stop_writes(l, epoch); /* nothing of the old epoch may still be writing */
    int rc = make_order(l, epoch);
    if (rc < 0) {
        pthread_mutex_unlock(&l->mu);
        return rc;
    }
    if (first < 0 || first > l->n_batches)
        first = l->n_batches;
    l->epoch = epoch;
    l->next_pos = first * l->o.batch_size;
    l->delivered = l->released = first;
    l->n_retries = 0;
    for (int i = 0; i < l->n_slots; i++) {
        /* Batch b goes into slot b % P; the first P from `first` on are assigned now. */
        int64_t b = first + ((i - first % l->n_slots) + l->n_slots) % l->n_slots;
        struct slot *s = &l->slots[i];
        s->number = b < l->n_batches ? b : -1;
        int64_t left = l->n_order - b * l->o.batch_size;
        s->remaining = (int)(left < l->o.batch_size ? (left > 0 ? left : 0) : l->o.batch_size);
    }
    pthread_cond_broadcast(&l->work);
    int64_t n = l->n_batches;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int tb_loader_next(tb_loader *l, struct tb_batch **out)
{
    double t0 = tbi_now_s();
    int rc = 0;
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->epoch < 0) {
        pthread_mutex_unlock(&l->mu);
        return tbi_err(TB_EINVAL, "no epoch started (tb_loader_epoch)");
    }
    if (l->delivered >= l->n_batches) {
        pthread_mutex_unlock(&l->mu);
        return TB_EOF;
    }
    if (l->delivered >= l->released + l->n_slots) {
        pthread_mutex_unlock(&l->mu);
        return tbi_err(TB_EINVAL, "all %d batch buffers are out: release one first",
                       l->n_slots);
    }
    struct slot *s = &l->slots[l->delivered % l->n_slots];
    while (s->remaining > 0 && !l->failed_rc) {
        if (l->o.clip_timeout_s > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&l->done, &l->mu, &ts);
            watchdog(l);
        } else {
            pthread_cond_wait(&l->done, &l->mu);
        }
    }
    if (l->failed_rc) {
        rc = tbi_err(l->failed_rc, "%s", l->failed_msg);
    } else {
        int64_t b = l->delivered++;
        s->batch.number = b;
        s->batch.epoch = l->epoch;
        int64_t left = l->n_order - b * l->o.batch_size;
        s->batch.n = (int)(left < l->o.batch_size ? left : l->o.batch_size);
        *out = &s->batch;
    }
    l->stats.wait_s += tbi_now_s() - t0;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

void tb_loader_release(tb_loader *l, struct tb_batch *batch)
{
    if (!batch)
        return;
    pthread_mutex_lock(&l->mu);
    TB_ASSERT(batch->number == l->released); /* batches come back in order */
    struct slot *s = &l->slots[l->released % l->n_slots];
    l->released++;
    int64_t next = l->released + l->n_slots - 1; /* the batch this slot holds next */
    s->number = next < l->n_batches ? next : -1;
    int64_t left = l->n_order - next * l->o.batch_size;
    s->remaining = (int)(left < l->o.batch_size ? (left > 0 ? left : 0) : l->o.batch_size);
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
}

uint8_t *tb_loader_take(tb_loader *l, struct tb_batch *batch)
{
    pthread_mutex_lock(&l->mu);
    if (!l->taken)
        stop_writes(l, l->epoch < 0 ? -1 - l->epoch : l->epoch);
    l->taken = 1;
    uint8_t *video = batch->video;
    batch->video = NULL;
    pthread_mutex_unlock(&l->mu);
    return video;
}

void tb_loader_get_stats(const tb_loader *l, struct tb_loader_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    *st = l->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
}

void tb_loader_close(tb_loader **pl)
{
    struct tb_loader *l = pl ? *pl : NULL;
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    int stuck = 0;
    for (int i = 0; i < l->n_workers; i++) {
        struct worker *w = l->workers[i];
        if (w->stuck && !w->exited) {
            /* Blocked in a system call: it cannot be joined. It and the loader it points to
             * are left to it. */
            pthread_detach(w->thread);
            stuck = 1;
            continue;
        }
        pthread_join(w->thread, NULL);
    }
    if (stuck) {
        *pl = NULL;
        return;
    }
    for (int i = 0; i < l->n_workers; i++) {
        tb_reader_close(&l->workers[i]->reader);
        free(l->workers[i]->scratch);
        free(l->workers[i]);
    }
    for (int i = 0; l->slots && i < l->n_slots; i++) {
        struct tb_batch *b = &l->slots[i].batch;
        free(b->video);
        free(b->label);
        free(b->index);
        free(b->text);
        free(b->flip);
    }
    free(l->slots);
    free(l->workers);
    free(l->retries);
    free(l->order);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->done);
    free(l);
    *pl = NULL;
}

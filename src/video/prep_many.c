/* src/video/prep_many.c - prepare many sources with a fixed number of worker threads. Each
 * worker takes the next source from a shared counter; a failure is reported through the
 * callback and never stops the others. Tests: tests/test_prep.c (jobs > 1, a bad source among
 * good ones). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tubelet/prep.h"

struct pool {
    const struct tb_prep_opts *opts;
    const char *const *srcs;
    int n_srcs;
    const int *dup_of;      /* index of an earlier source with the same output name, or -1 */
    atomic_int next;
    atomic_int n_failed;
    tb_prep_done_fn done;
    void *user;
};

static void *worker(void *arg)
{
    struct pool *pool = arg;
    for (;;) {
        int i = atomic_fetch_add(&pool->next, 1);
        if (i >= pool->n_srcs)
            return NULL;
        struct tb_prep_result res;
        int rc;
        memset(&res, 0, sizeof(res));
        tb_errclear();
        if (pool->dup_of[i] >= 0) {
            rc = tbi_err(TB_EINVAL, "%s: has the same output name as %s; rename one of them",
                         pool->srcs[i], pool->srcs[pool->dup_of[i]]);
        } else {
            rc = tb_prep_video(pool->opts, pool->srcs[i], &res);
        }
        if (rc < 0)
            atomic_fetch_add(&pool->n_failed, 1);
        if (pool->done)
            pool->done(pool->user, i, pool->srcs[i], rc, &res, rc < 0 ? tb_errmsg() : "");
    }
}

int tb_prep_many(const struct tb_prep_opts *opts, const char *const *srcs, int n_srcs,
                 int n_jobs, tb_prep_done_fn done, void *user)
{
    struct pool pool;
    int *dup_of = NULL;
    char (*names)[256] = NULL;
    pthread_t *threads = NULL;
    int n_started = 0, rc = 0;

    if (n_srcs <= 0)
        return tbi_err(TB_EINVAL, "no source videos given");
    if (n_jobs < 1)
        n_jobs = 1;
    if (n_jobs > n_srcs)
        n_jobs = n_srcs;
    dup_of = tbi_malloc(sizeof(*dup_of) * (size_t)n_srcs);
    names = tbi_calloc((size_t)n_srcs, sizeof(*names));
    threads = tbi_malloc(sizeof(*threads) * (size_t)n_jobs);
    if (!dup_of || !names || !threads) {
        rc = tbi_err(TB_ENOMEM, "out of memory");
        goto end;
    }
    /* Quadratic, but the list is a command line's worth of files. */
    for (int i = 0; i < n_srcs; i++) {
        dup_of[i] = -1;
        if (tb_prep_video_name(names[i], sizeof(names[i]), srcs[i], opts->ext) < 0)
            names[i][0] = '\0'; /* tb_prep_video reports the bad name itself */
        for (int j = 0; j < i && names[i][0]; j++)
            if (!strcmp(names[i], names[j])) {
                dup_of[i] = j;
                break;
            }
    }
    pool.opts = opts;
    pool.srcs = srcs;
    pool.n_srcs = n_srcs;
    pool.dup_of = dup_of;
    atomic_init(&pool.next, 0);
    atomic_init(&pool.n_failed, 0);
    pool.done = done;
    pool.user = user;
    for (; n_started < n_jobs; n_started++)
        if (pthread_create(&threads[n_started], NULL, worker, &pool) != 0)
            break;
    if (n_started == 0) {
        rc = tbi_err(TB_ENOMEM, "cannot start a worker thread");
        goto end;
    }
    for (int i = 0; i < n_started; i++)
        pthread_join(threads[i], NULL);
    rc = atomic_load(&pool.n_failed);
end:
    free(dup_of);
    free(names);
    free(threads);
    return rc;
}

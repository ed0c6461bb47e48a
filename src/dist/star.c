/* src/dist/star.c - the TCP process group of star.h. */
#define _POSIX_C_SOURCE 200809L
#include "dist/star.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

#define MAGIC 0x544c4254u  /* "TBLT" */
#define CHUNK (256u << 10) /* bytes combined at a time */

struct tbi_star {
    int rank, world;
    int *fd;       /* rank 0: fd[r] for each other rank r; else fd[0], the link to rank 0 */
    int timeout_ms;
    unsigned char *buf; /* CHUNK bytes */
};

struct hello {
    uint32_t magic;
    int32_t rank, world;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits until fd is ready for events, up to the timeout; retried across signals. */
static int wait_fd(const struct tbi_star *s, int fd, short events, int peer, const char *what)
{
    struct pollfd p = {.fd = fd, .events = events};
    for (;;) {
        int n = poll(&p, 1, s->timeout_ms);
        if (n > 0)
            return 0;
        if (n == 0 && peer < 0)
            return tbi_err(TB_ETIMEDOUT, "rank %d: nothing for %d s while %s "
                           "(TUBELET_DIST_TIMEOUT)", s->rank, s->timeout_ms / 1000, what);
        if (n == 0)
            return tbi_err(TB_ETIMEDOUT, "rank %d: no word from rank %d for %d s while %s "
                           "(TUBELET_DIST_TIMEOUT)", s->rank, peer, s->timeout_ms / 1000, what);
        if (errno != EINTR)
            return tbi_err(TB_EDIST, "rank %d: poll: %s", s->rank, strerror(errno));
    }
}

static int send_all(const struct tbi_star *s, int fd, int peer, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        TBI_TRY(wait_fd(s, fd, POLLOUT, peer, "sending"));
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return tbi_err(TB_EDIST, "rank %d: sending to rank %d: %s (did it stop?)", s->rank,
                           peer, k < 0 ? strerror(errno) : "nothing sent");
        c += k, n -= (size_t)k;
    }
    return 0;
}

static int recv_all(const struct tbi_star *s, int fd, int peer, void *p, size_t n)
{
    char *c = p;
    while (n) {
        TBI_TRY(wait_fd(s, fd, POLLIN, peer, "receiving"));
        ssize_t k = recv(fd, c, n, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k == 0)
            return tbi_err(TB_EDIST, "rank %d: rank %d closed its connection (it stopped)",
                           s->rank, peer);
        if (k < 0)
            return tbi_err(TB_EDIST, "rank %d: receiving from rank %d: %s", s->rank, peer,
                           strerror(errno));
        c += k, n -= (size_t)k;
    }
    return 0;
}

static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Rank 0: listens on every IPv4 address at port and accepts the world - 1 others. */
static int accept_all(struct tbi_star *s, const char *addr, int port)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1, rc = 0;
    if (lfd < 0)
        return tbi_err(TB_EDIST, "socket: %s", strerror(errno));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, s->world)) {
        rc = tbi_err(TB_EDIST, "rank 0 cannot listen at port %d (MASTER_ADDR %s, MASTER_PORT): "
                     "%s", port, addr, strerror(errno));
        goto end;
    }
    for (int joined = 1; joined < s->world;) {
        if ((rc = wait_fd(s, lfd, POLLIN, -1, "waiting for the others to join")) < 0)
            goto end;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        tune(fd);
        struct hello h;
        if ((rc = recv_all(s, fd, -1, &h, sizeof(h))) < 0) {
            close(fd);
            goto end;
        }
        if (h.magic != MAGIC || h.world != s->world || h.rank < 1 || h.rank >= s->world ||
            s->fd[h.rank] >= 0) {
            close(fd);
            rc = tbi_err(TB_EDIST, "rank 0: a process joined at port %d as rank %d of %d, "
                         "not one of ranks 1-%d of %d (another job at this MASTER_PORT?)", port,
                         (int)h.rank, (int)h.world, s->world - 1, s->world);
            goto end;
        }
        s->fd[h.rank] = fd;
        joined++;
    }
    struct hello ok = {MAGIC, 0, s->world};
    for (int r = 1; r < s->world && !rc; r++)
        rc = send_all(s, s->fd[r], r, &ok, sizeof(ok));
end:
    close(lfd);
    return rc;
}

/* Any other rank: connects to rank 0, retrying until the timeout (it may start later). */
static int connect_root(struct tbi_star *s, const char *addr, int port)
{
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    double until = now_s() + s->timeout_ms / 1000.0;
    int err = 0;
    for (;;) {
        int g = getaddrinfo(addr, service, &hints, &ai);
        if (g == 0) {
            int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                freeaddrinfo(ai);
                tune(fd);
                s->fd[0] = fd;
                break;
            }
            err = errno;
            if (fd >= 0)
                close(fd);
            freeaddrinfo(ai);
        }
        if (now_s() > until)
            return tbi_err(TB_ETIMEDOUT, "rank %d: cannot reach rank 0 at %s:%d in %d s: %s",
                           s->rank, addr, port, s->timeout_ms / 1000,
                           g ? gai_strerror(g) : strerror(err));
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    struct hello h = {MAGIC, s->rank, s->world};
    TBI_TRY(send_all(s, s->fd[0], 0, &h, sizeof(h)));
    TBI_TRY(recv_all(s, s->fd[0], 0, &h, sizeof(h)));
    if (h.magic != MAGIC || h.world != s->world)
        return tbi_err(TB_EDIST, "rank %d: %s:%d answered as no rank 0 of %d processes", s->rank,
                       addr, port, s->world);
    return 0;
}

int tbi_star_open(struct tbi_star **out, int rank, int world, const char *addr, int port)
{
    *out = NULL;
    if (!addr || !addr[0] || port <= 0)
        return tbi_err(TB_EINVAL, "%d processes without MPI meet at MASTER_ADDR:MASTER_PORT, "
                       "which are not both set", world);
    struct tbi_star *s = calloc(1, sizeof(*s));
    if (!s || !(s->fd = malloc(sizeof(int) * (size_t)world)) || !(s->buf = malloc(CHUNK))) {
        if (s)
            free(s->fd);
        free(s);
        return tbi_err(TB_ENOMEM, "the process group of %d", world);
    }
    for (int r = 0; r < world; r++)
        s->fd[r] = -1;
    s->rank = rank, s->world = world;
    const char *t = getenv("TUBELET_DIST_TIMEOUT");
    long sec = t ? strtol(t, NULL, 10) : 1800;
    s->timeout_ms = (int)(sec > 0 && sec < 2000000 ? sec * 1000 : 1800 * 1000);
    /* Joining waits at most 5 minutes by default (a rank that failed to start leaves the others
     * waiting only that long), a collective the full timeout (a checkpoint on rank 0). */
    const int run_ms = s->timeout_ms;
    if (!t && s->timeout_ms > 300 * 1000)
        s->timeout_ms = 300 * 1000;
    int rc = rank == 0 ? accept_all(s, addr, port) : connect_root(s, addr, port);
    s->timeout_ms = run_ms;
    if (rc < 0) {
        tbi_star_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void tbi_star_close(struct tbi_star **sp)
{
    struct tbi_star *s = *sp;
    if (!s)
        return;
    for (int r = 0; r < s->world; r++)
        if (s->fd[r] >= 0)
            close(s->fd[r]);
    free(s->fd);
    free(s->buf);
    free(s);
    *sp = NULL;
}

static size_t type_size(enum tbi_star_type t)
{
    return t == TBI_STAR_F64 ? 8 : 4;
}

/* x[0..n) = x op y, elementwise. */
static void combine(void *x, const void *y, size_t n, enum tbi_star_type t, enum tbi_star_op op)
{
    if (t == TBI_STAR_F32) {
        float *a = x;
        const float *b = y;
        for (size_t i = 0; i < n; i++)
            a[i] = op == TBI_STAR_SUM ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]);
    } else if (t == TBI_STAR_F64) {
        double *a = x;
        const double *b = y;
        for (size_t i = 0; i < n; i++)
            a[i] = op == TBI_STAR_SUM ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]);
    } else {
        int32_t *a = x;
        const int32_t *b = y;
        for (size_t i = 0; i < n; i++)
            a[i] = op == TBI_STAR_SUM ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]);
    }
}

int tbi_star_reduce(struct tbi_star *s, void *x, size_t n, enum tbi_star_type type,
                    enum tbi_star_op op)
{
    size_t es = type_size(type), bytes = n * es;
    if (s->rank) {
        TBI_TRY(send_all(s, s->fd[0], 0, x, bytes));
        return recv_all(s, s->fd[0], 0, x, bytes);
    }
    size_t step = CHUNK / es;
    for (int r = 1; r < s->world; r++)
        for (size_t i = 0; i < n; i += step) {
            size_t k = n - i < step ? n - i : step;
            TBI_TRY(recv_all(s, s->fd[r], r, s->buf, k * es));
            combine((char *)x + i * es, s->buf, k, type, op);
        }
    for (int r = 1; r < s->world; r++)
        TBI_TRY(send_all(s, s->fd[r], r, x, bytes));
    return 0;
}

int tbi_star_gather(struct tbi_star *s, const void *x, size_t bytes, void *all)
{
    size_t total = bytes * (size_t)s->world;
    if (s->rank) {
        TBI_TRY(send_all(s, s->fd[0], 0, x, bytes));
        return recv_all(s, s->fd[0], 0, all, total);
    }
    memcpy(all, x, bytes);
    for (int r = 1; r < s->world; r++)
        TBI_TRY(recv_all(s, s->fd[r], r, (char *)all + (size_t)r * bytes, bytes));
    for (int r = 1; r < s->world; r++)
        TBI_TRY(send_all(s, s->fd[r], r, all, total));
    return 0;
}

int tbi_star_bcast(struct tbi_star *s, void *x, size_t bytes, int root)
{
    if (s->rank == root && root)
        return send_all(s, s->fd[0], 0, x, bytes);
    if (s->rank)
        return recv_all(s, s->fd[0], 0, x, bytes);
    if (root)
        TBI_TRY(recv_all(s, s->fd[root], root, x, bytes));
    for (int r = 1; r < s->world; r++)
        if (r != root)
            TBI_TRY(send_all(s, s->fd[r], r, x, bytes));
    return 0;
}

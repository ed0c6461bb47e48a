/* src/dist/star.h - a process group over TCP for processes that no MPI connects (torchrun's,
 * srun's without MPI): rank 0 listens at the meeting point (MASTER_ADDR:MASTER_PORT) and every
 * other rank connects to it; each collective goes through rank 0, which combines the
 * contributions in rank order, so every process gets the same bits. Collectives are called by
 * every process in the same order. A peer that stops closes its connection: the others' next
 * collective fails naming it; a peer that hangs fails them after the timeout
 * (TUBELET_DIST_TIMEOUT seconds, default 1800; joining, 300 by default). Memory: a 256 KiB
 * buffer. Tests:
 * tests/test_launch.c. */
#ifndef TUBELET_DIST_STAR_H
#define TUBELET_DIST_STAR_H

#include <stddef.h>

struct tbi_star;

enum tbi_star_type { TBI_STAR_F32, TBI_STAR_F64, TBI_STAR_I32 };
enum tbi_star_op { TBI_STAR_SUM, TBI_STAR_MAX };

/* Joins (rank 0: opens) the group of world processes meeting at addr:port, waiting up to the
 * timeout for all of them. */
int tbi_star_open(struct tbi_star **out, int rank, int world, const char *addr, int port);
void tbi_star_close(struct tbi_star **s);
/* x (n elements of type) = op over all processes' x, in place: ((x0 op x1) op x2) ... */
int tbi_star_reduce(struct tbi_star *s, void *x, size_t n, enum tbi_star_type type,
                    enum tbi_star_op op);
/* all (world * bytes) = every process's x (bytes), in rank order; all may not overlap x. */
int tbi_star_gather(struct tbi_star *s, const void *x, size_t bytes, void *all);
/* x (bytes) = root's x (another root's goes through rank 0). */
int tbi_star_bcast(struct tbi_star *s, void *x, size_t bytes, int root);

#endif /* TUBELET_DIST_STAR_H */

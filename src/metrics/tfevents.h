/* src/metrics/tfevents.h - TensorBoard event files of scalars, written without a protobuf
 * library: TFRecord framing with masked CRC32C, Event and Summary messages encoded by hand.
 * Internal: the training loop's `--tensorboard` output. It writes scalars only (no images,
 * histograms, graphs) and reads nothing back. Tests: tests/test_tfevents.c. */
#ifndef TUBELET_METRICS_TFEVENTS_H
#define TUBELET_METRICS_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h" /* tbi_crc32c */

typedef struct tbi_tfevents tbi_tfevents;

/* The longest tag a scalar may have, in bytes: every record fits one fixed buffer. */
#define TBI_TFEVENTS_TAG_MAX 256

/* Create a new event file in dir (which must exist), named as TensorBoard looks for them:
 * events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>, never an existing file's name;
 * its first record says the file version ("brain.Event:2"). On failure *out is NULL and
 * the message (TB_EIO, TB_ENOMEM) names the path. */
int tbi_tfevents_open(tbi_tfevents **out, const char *dir);

/* One Event at step with this process's wall-clock time, its Summary one value: tag (1 to
 * TBI_TFEVENTS_TAG_MAX bytes, else TB_EINVAL) and value as a float. Buffered until
 * tbi_tfevents_flush. After a write error every call returns TB_EIO naming the file. */
int tbi_tfevents_scalar(tbi_tfevents *w, const char *tag, int64_t step, float value);

/* Hand the buffered records to the operating system (TensorBoard reads the file while it
 * grows). 0 or TB_EIO naming the file. */
int tbi_tfevents_flush(tbi_tfevents *w);

/* The file's path (owned by w). */
const char *tbi_tfevents_path(const tbi_tfevents *w);

/* Flush, close and free; NULL-safe, sets *p to NULL. A failure here is not reported: callers
 * that care flush first. */
void tbi_tfevents_close(tbi_tfevents **p);

/* TFRecord's masked form of a CRC-32C (core/internal.h's tbi_crc32c):
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t tbi_crc32c_mask(uint32_t crc);

#endif /* TUBELET_METRICS_TFEVENTS_H */

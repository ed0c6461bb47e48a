/* tests/fuzz/fuzz.h - what the libFuzzer targets share: inputs handed to the library as files
 * that live in memory (memfd, named /proc/self/fd/N: no disk, nothing left behind), a scratch
 * directory for targets that need a prepared video's layout (removed at exit), and checks of
 * the library's contract that abort, so libFuzzer keeps the input as a crash.
 * Each target is tests/fuzz/fuzz_<name>.c (fuzz_ann.c builds three, one per annotation
 * format); tests/fuzz/run.sh runs them (docs/ROBUSTNESS.md). */
#ifndef TUBELET_FUZZ_H
#define TUBELET_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "tubelet/base.h"

/* libFuzzer's entry points: each target defines LLVMFuzzerTestOneInput; fuzz.c's
 * LLVMFuzzerInitialize installs a log sink that reads every line (so a formatting bug shows)
 * and prints none. */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Memory-backed files: slot 0..TBF_SLOTS-1, each created on first use. Writes data[0..size)
 * as the whole file and returns a path the library can open (valid until the next put to
 * that slot). */
#define TBF_SLOTS 4
const char *tbf_put(int slot, const void *data, size_t size);

/* A directory of this process under $TMPDIR (or /tmp), made on first use and removed with
 * what is in it when the process exits normally. */
const char *tbf_dir(void);
/* Write (or replace) dir/name with data. */
void tbf_write(const char *name, const void *data, size_t size);
/* dir/name as a symbolic link to target. */
void tbf_link(const char *name, const char *target);

/* A broken contract: print what and abort (libFuzzer saves the input). */
void tbf_fail(const char *fmt, ...) TB_PRINTF(1, 2) __attribute__((noreturn));

/* After a call that returned rc: a failure must be a TB_E* code with a message, which names
 * what (a path) when what is not NULL. */
void tbf_check_error(int rc, const char *call, const char *what);

/* Count a call's result (rc < 0: failed) under its name; tbf_check_error does it for every
 * call it sees. With TBF_REPORT=FILE set the counts are written there at exit, to say how
 * deep a corpus reaches. */
void tbf_count(int rc, const char *call);

/* An opened .npy (or pickled array) header as npy.h promises it: dimensions within
 * TBI_NPY_MAX_DIMS whose product is n, 4- or 8-byte items; else tbf_fail. */
struct tbi_npy;
void tbf_check_npy_header(const struct tbi_npy *h);

/* Bytes of data[0..size) folded into a value a compiler cannot drop, so every byte of a
 * returned buffer is read (ASan then sees one that is shorter than it claims). */
uint64_t tbf_touch(const void *data, size_t size);

/* The fixed split the MIR targets read their inputs against: data/mir_split.csv (5 clips, 3
 * sentences: "cut onion", "wash pan", "open tap"), loaded on first use. */
struct tb_annotations;
struct tb_mir_sentences;
void tbf_mir_split(const struct tb_annotations **ann, const struct tb_mir_sentences **s);

#endif /* TUBELET_FUZZ_H */

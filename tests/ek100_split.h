/* tests/ek100_split.h - a synthetic EK-100-sized training split, shared by tests/test_captions.c
 * and bench/bench_captions.c so that the test and the benchmark measure the same file. */
#ifndef TUBELET_TESTS_EK100_SPLIT_H
#define TUBELET_TESTS_EK100_SPLIT_H

/* An EPIC CSV of n clips, the same rows for the same n: clip i's verb among 97 classes and
 * its noun among 300, drawn long-tailed (Zipf, exponent 1) under TB_RNG_TEST (100, i), a
 * second noun for about one clip in ten; narrations "verbV nounN" ("verbV nounN and nounM" for two),
 * or with distinct "verbV nounN clipI" (every clip its own sentence). 0, or -1. */
int tbt_write_ek100_split(const char *path, int n, int distinct);

#endif /* TUBELET_TESTS_EK100_SPLIT_H */

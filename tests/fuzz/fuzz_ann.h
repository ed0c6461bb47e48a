/* tests/fuzz/fuzz_ann.h - the annotation targets' shared body (fuzz_ann.c): fuzz_ek100.c,
 * fuzz_kinetics.c and fuzz_narration.c each hand it their format; the MIR targets
 * (fuzz_relevancy.c, fuzz_sentences.c) share its split. */
#ifndef TUBELET_FUZZ_ANN_H
#define TUBELET_FUZZ_ANN_H

#include "tubelet/data.h"

/* Load data[0..size) as an annotation file of format with and without skip_bad_rows and check
 * what comes back; then what `tubelet ann stats` and the MIR sentences compute from it. */
void tbf_annotations(const uint8_t *data, size_t size, enum tb_ann_format format);

/* The fixed split the MIR targets read their inputs against: data/mir_split.csv (5 clips, 3
 * sentences: "cut onion", "wash pan", "open tap"), loaded once. */
struct tb_mir_sentences;
void tbf_mir_split(const struct tb_annotations **ann, const struct tb_mir_sentences **s);

#endif /* TUBELET_FUZZ_ANN_H */

/* include/tubelet/metrics.h - EPIC-Kitchens-100 metrics. Multi-instance retrieval (MIR): mAP
 * and nDCG from a similarity and a relevancy matrix, in both directions; the sentence list and
 * the relevancy of a split built from its EPIC annotations; the relevancy file (.npy); the
 * relevant captions a training clip draws from (AVION's EK-100 MIR fine-tuning). Action
 * classification as AVION reports it: views averaged, action top-1/top-5, verb and noun by
 * marginalising the actions, mean class accuracy. docs/METRICS.md gives the definitions, where
 * they were read, the tie rules and how they depart from the official code; docs/FORMATS.md
 * the files. Tests: tests/test_mir.c (against tests/ref/mir_ref.py), tests/test_cls_metrics.c
 * (against tests/ref/ek100_cls_ref.py), tests/test_captions.c. */
#ifndef TUBELET_METRICS_H
#define TUBELET_METRICS_H

#include "tubelet/base.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scores ------------------------------------------------------------------------------ */

enum tb_mir_dir {
    TB_MIR_V2T, /* each video ranks the texts (a row of the matrices) */
    TB_MIR_T2V, /* each text ranks the videos (a column) */
    TB_MIR_AVG, /* the mean of the two */
};

struct tb_mir_scores {
    double map[3];      /* mean average precision, indexed by enum tb_mir_dir */
    double ndcg[3];     /* normalised discounted cumulative gain */
    int64_t n_map[2];   /* queries in the mAP mean: those with an item of relevancy exactly 1 */
    int64_t n_ndcg[2];  /* queries in the nDCG mean: those with an item of relevancy > 0 */
};

/* Score the similarities sim against the relevancies rel, both (n_video, n_text) row-major;
 * sim must be finite and rel in [0, 1]. EPIC-Kitchens-100's definitions: average precision
 * counts the items of relevancy 1 and accumulates graded relevancy into its precisions; nDCG
 * keeps the first K ranks, K being the query's items of relevancy > 0. Items of equal
 * similarity score the mean over every order of them, so a constant matrix scores the
 * expected value of a random ranking. A query with no item of relevancy 1 (mAP) or > 0
 * (nDCG) is left out of that mean and the counts say how many stayed in; a direction left
 * with none is TB_EINVAL. Scratch memory is O(n_video + n_text) per thread; rows and columns
 * are scored in parallel, with the same result for any number of threads. Errors name the
 * offending element. */
TB_API int tb_mir_evaluate(const float *sim, const float *rel, int64_t n_video, int64_t n_text,
                           struct tb_mir_scores *out);

/* ---- sentences and relevancy from annotations -------------------------------------------- */

struct tb_mir_sentences {
    int n;              /* sentences */
    int *item;          /* (n) the annotation item whose narration, verb class and noun set
                           the sentence carries */
    const char **text;  /* (n) that item's narration: borrowed from the annotations */
};

/* The sentences of a split as EPIC-Kitchens-100 builds them (JPoSE's create_sentence_df,
 * which made EPIC_100_retrieval_test_sentence.csv): the distinct narrations in order of first
 * appearance, each carrying its first clip; then, for every action class (verb_class,
 * noun_class) no sentence carries yet, the narration of the first clip of that class, in order
 * of that clip (EK-100 appends these in Python's set order, which no program can reproduce:
 * docs/METRICS.md). ann must be EPIC annotations with a narration on every item; it must
 * outlive the list. */
TB_API int tb_mir_sentences_build(struct tb_mir_sentences **out,
                                  const struct tb_annotations *ann);

/* The sentences of a sentence CSV, in its order (EPIC_100_retrieval_test_sentence.csv: a
 * header naming a `narration_id` column, each row naming a clip of ann by it). A sentence is
 * its clip's narration and classes, as AVION and LaViLa take it; a `narration` column that
 * says otherwise is logged as a warning (EK-100's test file pairs its last 7 ids with the
 * previous row's narration). Use it with the relevancy EK-100 ships, whose columns are in
 * that file's order. Errors name the file and line. */
TB_API int tb_mir_sentences_load(struct tb_mir_sentences **out, const char *path,
                                 const struct tb_annotations *ann);

TB_API void tb_mir_sentences_free(struct tb_mir_sentences **s);

/* Rows first .. first + n_rows - 1 of the split's relevancy (ann->n_items, s->n) into rel
 * (n_rows, s->n): for clip i and sentence j, the mean of the verb IoU (1 if the verb classes
 * are equal, else 0) and the IoU of the clip's noun set with the sentence's (struct
 * tb_ann_item's nouns), as EK-100's caption relevancy (JPoSE's create_relevancy_files). */
TB_API int tb_mir_relevancy(const struct tb_annotations *ann, const struct tb_mir_sentences *s,
                            int64_t first, int64_t n_rows, float *rel);

/* Read the relevancy file at path into rel (ann->n_items, s->n): a .npy file, 2-D float32 or
 * float64 in C order, whose shape must be the split's (the error names the file, the shape
 * found and the shape expected), every value in [0, 1], and every sentence's own clip at
 * relevancy 1 with it (else its columns are in another sentence order). */
TB_API int tb_mir_relevancy_load(const char *path, const struct tb_annotations *ann,
                                 const struct tb_mir_sentences *s, float *rel);

/* ---- relevant captions (training) -------------------------------------------------------- */

/* For every clip of a training split, the sentences whose relevancy with it is above a
 * threshold: AVION's EK-100 MIR fine-tuning trains each clip on one of them, drawn uniformly
 * (clip_dataset.py, ek100_mir: np.where(relevancy_mat[i] > 0.1), random.sample of one).
 * Stored sparse, never as the dense (clips, sentences) matrix: clips whose rows are equal share
 * one list; from the classes, the list holds groups of sentences with equal classes (equal
 * relevancy to every clip). Read-only once built: any number of threads may draw. */
typedef struct tb_mir_captions tb_mir_captions;

struct tb_mir_captions_stats {
    int64_t n_items, n_sentences;
    int64_t n_rows;        /* distinct rows stored */
    int64_t n_groups;      /* sentence groups: classes (computed) or single sentences (file) */
    int64_t n_entries;     /* (row, group) entries stored: those above the threshold */
    int64_t n_pairs;       /* (clip, sentence) pairs above the threshold: the dense count */
    int64_t n_empty;       /* clips with no sentence above it */
    int64_t bytes;         /* memory held */
};

/* Build the relevant sentences of every clip of ann among s (the split's sentences:
 * tb_mir_sentences_build or _load, on ann) for threshold in [0, 1): those of relevancy
 * strictly above it. path NULL or "": the relevancy from the classes (tb_mir_relevancy's
 * definition, compared in double precision as EK-100's float64 file). Else the relevancy file
 * at path, of shape (ann->n_items, s->n), read a row at a time (memory: one row): a .npy
 * (tb_mir_relevancy_load's) or a pickle of one NumPy array (AVION's
 * caption_relevancy_EPIC_100_retrieval_train.pkl: protocols 3 to 5), float32 (compared in
 * float32, as NumPy compares a float32 array with a Python float) or float64; every value in
 * [0, 1] and every sentence at 1 with its own clip, else TB_EFORMAT naming the file, the row
 * and the column. ann and s are only read; s may be freed after. */
TB_API int tb_mir_captions_open(tb_mir_captions **out, const struct tb_annotations *ann,
                                const struct tb_mir_sentences *s, double threshold,
                                const char *path);

/* The number of sentences above the threshold for clip item (0 .. n_items - 1). */
TB_API int64_t tb_mir_captions_count(const tb_mir_captions *c, int64_t item);

/* The k-th (0 <= k < count) of them in ascending order: a sentence index of s. The same for
 * a relevancy file as for the classes it was computed from; O(groups x log) per call from
 * the classes. */
TB_API int tb_mir_captions_sentence(const tb_mir_captions *c, int64_t item, int64_t k);

/* All of them, ascending, into out (room for count); returns count. O(count log count). */
TB_API int64_t tb_mir_captions_list(const tb_mir_captions *c, int64_t item, int *out);

/* One of them drawn uniformly with rng (one tb_rng_below), or -1 when there is none (AVION
 * has no rule for that case: its loader fails; the caller keeps the clip's own narration). */
TB_API int tb_mir_captions_draw(const tb_mir_captions *c, int64_t item, tb_rng *rng);

TB_API void tb_mir_captions_stats(const tb_mir_captions *c, struct tb_mir_captions_stats *st);

/* NULL-safe; sets *c to NULL. */
TB_API void tb_mir_captions_close(tb_mir_captions **c);

/* ---- EPIC-Kitchens-100 action classification --------------------------------------------- */

/* How a clip's views (temporal clips x spatial crops) become one score row; AVION reports
 * both, and so does tb_eval_cls (train.h), whose plain top1/top5 are the second's. */
enum tb_cls_avg {
    TB_CLS_AVG_LOGITS, /* the views' logits averaged, then one softmax */
    TB_CLS_AVG_PROBS,  /* a softmax per view, then the probabilities averaged */
};

/* The per-item probabilities prob (n_items, n_classes) of the logits (n_items, n_views,
 * n_classes) by mode, in double precision with the maximum subtracted before exp. A
 * non-finite logit is TB_ERANGE naming its item, view and class. */
TB_API int tb_cls_average_views(const float *logits, int64_t n_items, int n_views,
                                int n_classes, enum tb_cls_avg mode, double *prob);

/* The action list of annotation sets numbered by tb_ann_map_actions (give it the same sets):
 * verb[a] and noun[a] (n_actions each) of every action a, read from the items that carry it.
 * An item's action outside [0, n_actions), an action no item carries, or two items of one
 * action with different classes (sets numbered separately) is TB_EINVAL naming the line. */
TB_API int tb_cls_actions(struct tb_annotations *const *sets, int n_sets, int n_actions,
                          int *verb, int *noun);

/* An action list as one object, for tb_eval_cls (train.h): verb[a], noun[a] of every action
 * a of 0 .. n_actions - 1. */
struct tb_cls_action_list {
    int n_actions;
    int *verb, *noun; /* (n_actions) */
};

/* The action list of sets numbered together by tb_ann_map_actions (AVION's: train + val):
 * n_actions is the largest action id + 1, the rest as tb_cls_actions (whose errors it
 * returns); an item without an action id (not numbered) is TB_EINVAL naming its line. The sets
 * are only read. Free with tb_cls_action_list_free (NULL-safe; sets *l to NULL). */
TB_API int tb_cls_action_list_build(struct tb_cls_action_list **out,
                                    const struct tb_annotations *const *sets, int n_sets);
TB_API void tb_cls_action_list_free(struct tb_cls_action_list **l);

/* One label level's scores; fractions in [0, 1]. */
struct tb_cls_part {
    double top1, top5;   /* the true class among the k best, ties as the mean over their
                            orders (docs/METRICS.md), averaged over the items */
    double mean_class;   /* per-class recall of the best class (ties to the lower index),
                            averaged over the classes some item has as truth or as its
                            prediction; a class only predicted counts 0 (AVION's rule) */
    int n_classes;       /* columns ranked: the actions; verbs and nouns: the largest class
                            in the action list + 1 */
    int n_placeholders;  /* verb or noun columns no action has, each scored as action 0's
                            probability (AVION's placeholder); 0 for actions */
    int n_mean_classes;  /* classes in mean_class's mean */
};

struct tb_cls_scores {
    struct tb_cls_part verb, noun, action;
    int64_t n_items;
};

/* Score the action probabilities prob (n_items, n_actions) row-major (finite and >= 0: a
 * softmax, e.g. tb_cls_average_views'), AVION's EPIC-Kitchens-100 way: action top-1/top-5
 * and mean class accuracy on the rows; verbs and nouns the same on the marginals, each verb's
 * (noun's) column the sum of its actions' probabilities, summed in action order. The action
 * list is verb[a], noun[a] (n_actions each, classes >= 0, no pair twice: tb_cls_actions');
 * truth is (n_items, 3): each item's true verb, noun and action (tb_batch's label layout),
 * its verb and noun those of its action. Scratch memory is O(n_actions + classes). Errors
 * name the offending item, class or action. */
TB_API int tb_cls_evaluate(const double *prob, int64_t n_items, int n_actions, const int *verb,
                           const int *noun, const int *truth, struct tb_cls_scores *out);

/* One level alone, without marginals: prob (n_items, n_classes) as above scored against truth
 * (n_items) classes, top-1/top-5 and mean class accuracy by the same rules (n_placeholders 0).
 * For a model of verbs or nouns, or of Kinetics classes. Errors name the item or class. */
TB_API int tb_cls_evaluate_level(const double *prob, int64_t n_items, int n_classes,
                                 const int *truth, struct tb_cls_part *out);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_METRICS_H */

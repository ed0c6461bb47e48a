/* include/tubelet/data.h - from annotation files to batches of clips.
 *
 * annotations  EPIC-Kitchens-100 CSVs, Kinetics/VideoMAE lists (`path num_frames label`) and
 *              narration CSVs (`video_id,start_s,end_s,text`, or a captions column of JSON
 *              lists), split as RFC 4180 and pandas split them, validated row by row, and
 *              their statistics (tb_ann_stats_compute);
 * randaug      timm's increasing op set on a clip's frames, as VideoMAE applies it, with
 *              Pillow's arithmetic;
 * dataset      annotations + a prepared-video root + sampler + crop + output size (+ training
 *              clips' RandAugment);
 * loader       worker threads decode clips into a fixed pool of batch buffers and hand the
 *              batches out in order. Deterministic: every random choice for sample i of epoch e
 *              comes from a generator keyed by (seed, TB_RNG_CLIP, e, i) (rng.h), so batches
 *              are the same for any number of workers. A clip that fails is replaced by another
 *              sample chosen the same way (TB_RNG_SUBSTITUTE); past a failure rate the loader
 *              stops. One that runs out of memory stops it at once (TB_ENOMEM from
 *              tb_loader_next): that is no fault of the clip's, and a substitute would make
 *              the batches depend on the machine.
 * Tests: tests/test_data.c, tests/test_ann_stats.c, tests/test_augment.c. */
#ifndef TUBELET_DATA_H
#define TUBELET_DATA_H

#include "tubelet/base.h"
#include "tubelet/video.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- annotations ------------------------------------------------------------------------- */

enum tb_ann_format {
    TB_ANN_EPIC,      /* EPIC-Kitchens-100 action CSV */
    TB_ANN_KINETICS,  /* "path num_frames label" lines (VideoMAE lists) */
    TB_ANN_NARRATION, /* "video_id,start_s,end_s,text" CSV, for video-text pairs; under a
                         header, columns by name, and a captions column of JSON lists */
};

struct tb_ann_item {
    char *video;          /* EPIC/narration: video id; Kinetics: path as written */
    double start_s, end_s;/* EPIC/narration: the action's time window; Kinetics: 0, 0 */
    int64_t n_frames;     /* Kinetics: the num_frames column; else 0 */
    int verb, noun;       /* EPIC classes; Kinetics: the label in verb; else -1 */
    int action;           /* EPIC: id of "verb:noun" (tb_ann_map_actions), else -1 */
    char *text;           /* EPIC narration or narration text; NULL for Kinetics */
    int line;             /* 1-based line of the file */
    char *id;             /* EPIC: the narration_id column; NULL where the file has none */
    int *nouns;           /* EPIC: the all_noun_classes column as a set (ascending, repeats
                             dropped), or {noun} where the file has no such column; NULL
                             for the other formats */
    int n_nouns;
    char *verb_name;      /* EPIC: the verb and noun columns (the classes' names) where the */
    char *noun_name;      /* file has them, else NULL */
    char *captions;       /* narration: the row's captions column, a list of several captions
                             (LaViLa's rephrased and narrated ones), as n_captions strings
                             each NUL-terminated, one after another; NULL where the row has
                             none (its caption is text, which is otherwise the first) */
    int n_captions;
    char *cell_error;     /* a cell of an optional column that only some readers read
                             (EPIC's all_noun_classes) and that does not parse: its message,
                             naming the file, line and column; the field is left unset (nouns
                             NULL). What reads the column refuses the row with it (MIR). NULL
                             when every cell parsed */
};

/* A skipped row: its line and why. */
struct tb_ann_bad_row {
    int line;
    char message[512];
};
#define TB_ANN_BAD_KEPT 4

struct tb_annotations {
    struct tb_ann_item *items;
    int n_items;
    int n_skipped;        /* bad rows skipped (skip_bad_rows, tb_ann_drop_unreadable) */
    char first_error[512];/* the first skipped row's message */
    char path[1024];
    enum tb_ann_format format;
    int n_untimed;        /* of the skipped rows, those with an empty start or end time */
    int n_unreadable;     /* of the skipped rows, those tb_ann_drop_unreadable removed */
    int n_bad_kept;       /* min(n_skipped, TB_ANN_BAD_KEPT) */
    struct tb_ann_bad_row bad[TB_ANN_BAD_KEPT]; /* the first skipped rows, in file order */
    int n_clamped;        /* rows kept whose window runs past their video's end or before its
                             start (tb_ann_drop_unreadable): their clips come from the part
                             inside it */
    int n_clamped_kept;   /* min(n_clamped, TB_ANN_BAD_KEPT) */
    struct tb_ann_bad_row clamped[TB_ANN_BAD_KEPT]; /* the first of them, in file order */
    int *skipped_lines;   /* every skipped row's line, in the order they were skipped (n_skipped
                             of them; tb_ann_row_lines puts them in the file's order) */
    int skipped_cap;      /* skipped_lines' room; -1: a line could not be kept (out of memory) */
};

struct tb_ann_opts {
    enum tb_ann_format format;
    int skip_bad_rows;    /* 1: skip and count rows that do not parse; 0: fail on the first */
};

/* Load an annotation file. Errors name the file, line and column (a malformed
 * all_noun_classes list too: "[2, 15]", one class or more). */
TB_API int tb_ann_load(struct tb_annotations **out, const char *path,
                       const struct tb_ann_opts *opts);
TB_API void tb_ann_free(struct tb_annotations **a);

/* The lines of every row of the file a was loaded from, kept and skipped, in the file's order
 * (a row that spans lines: its first), into lines (room for n_items + n_skipped; NULL: only
 * count them). Returns their number, or TB_ENOMEM when a skipped row's line was lost. */
TB_API int tb_ann_row_lines(const struct tb_annotations *a, int *lines);

/* A classes CSV (EPIC_100_verb_classes.csv: a header, then id,key,... rows, row k naming
 * class k; the id and key columns by name where the header names them, else the first two):
 * the keys into *keys (n, malloc'ed). TB_EFORMAT names the file and line of a row with
 * another field count or an id out of order. */
TB_API int tb_classes_load(const char *path, char ***keys, int *n);
TB_API void tb_classes_free(char ***keys, int *n);

/* Caption k of an item: the k-th of its list, or its text where it has none (k = 0); NULL
 * out of range. */
TB_API const char *tb_ann_caption(const struct tb_ann_item *it, int k);
/* The caption sample i of epoch shows in training: one of the item's list drawn uniformly
 * from (seed, TB_RNG_CAPTION, epoch, i) alone, a new draw at every visit (AVION's
 * random.choice of a clip's captions), the same after a resume; 0 without a list. */
TB_API int tb_ann_caption_draw(const struct tb_ann_item *it, uint64_t seed, int64_t epoch,
                               int64_t i);

/* Give every EPIC item an action id: the "verb:noun" pairs of all the sets together, sorted
 * as strings, numbered in that order (AVION's mapping over train + val). Returns the number
 * of actions. */
TB_API int tb_ann_map_actions(struct tb_annotations **sets, int n_sets);

/* ---- annotation statistics --------------------------------------------------------------- */

/* What `tubelet ann stats` reports about a loaded file: how many rows, videos and classes,
 * how long the clips are, which clips are shorter than the sampler's span, which windows run
 * outside their video, which rows repeat another (in the file, or from another split), and
 * which rows' videos a prepared root lacks or the loader cannot read. */
struct tb_ann_stats_opts {
    const char *root;      /* prepared videos: each is opened as the loader opens it; rows
                              whose video is not there or cannot be read are counted, and a
                              readable video's own rate and length are used; NULL or "": no
                              root */
    const char *ext;       /* their suffix ("mp4" when NULL or "") */
    int64_t span_frames;   /* frames the sampler spans (segments: T; dense: (T - 1) * stride
                              + 1); clips holding fewer are counted; 0: none counted */
    int fps_num, fps_den;  /* the rate windows map to frames at where no prepared video gives
                              its own (30/1 when 0) */
    const struct tb_annotations *other; /* another split of the same format (validation for
                              a training file): its rows whose clip (video and window; a
                              Kinetics path) is one of this file's are counted; NULL: none */
};

struct tb_ann_class_count {
    int id;
    int64_t count;
    int verb, noun;        /* an action's pair; -1 in the verb and noun histograms */
};

struct tb_ann_hist {
    struct tb_ann_class_count *classes; /* most frequent first; ties: the smaller id first */
    int n_classes;         /* distinct classes */
    int64_t n_rows;        /* rows with a class (>= 0) */
};

struct tb_ann_missing {
    char *video;           /* the name as the file writes it */
    int64_t n_rows;        /* rows naming it */
    int first_line;
    char *reason;          /* unreadable videos: the reader's message; NULL for missing ones */
};

struct tb_ann_stats {
    int64_t n_rows;          /* items (the rows loaded) */
    int64_t n_videos;        /* distinct videos */
    int64_t n_timed;         /* rows with a duration: EPIC and narration rows (the window);
                                Kinetics rows whose frame count is known (the prepared video's,
                                else the num_frames column), at the rate */
    double total_s, min_s, median_s, max_s; /* of those durations; 0 when n_timed is 0 */
    int64_t n_counted;       /* rows whose frame count is known (every EPIC/narration row) */
    int64_t n_short;         /* of those, clips holding fewer than span_frames frames */
    int first_short_line;    /* 0 when none */
    int64_t n_outside;       /* windows holding no frame of their prepared video (past its
                                end, or ending before its start), counted in n_short too */
    int first_outside_line;
    int64_t n_past_end;      /* windows holding frames of their prepared video that run past
                                its end (training clamps them to it) */
    int first_past_end_line;
    int64_t n_past_start;    /* windows that start before their video (a negative start, at
                                the video's rate or fps), outside ones apart */
    int first_past_start_line;
    int64_t n_duplicates;    /* rows repeating an earlier row: the same video, window, classes,
                                noun set, text and captions (narration_id aside) */
    int first_duplicate_line, first_duplicate_of; /* the first repeat, and the row it repeats */
    int64_t n_cell_errors;   /* rows whose optional cell does not parse (cell_error) */
    int first_cell_error_line;
    char first_cell_error[512]; /* its message */
    int other_checked;       /* 1 when opts had another split */
    int64_t n_overlap;       /* rows of that split whose clip is one of this file's */
    int first_overlap_line, first_overlap_of; /* the first of them (its line in the other
                                file), and the line of the clip it repeats here */
    struct tb_ann_hist verb;   /* Kinetics: the label */
    struct tb_ann_hist noun;
    struct tb_ann_hist action; /* rows with an action id (tb_ann_map_actions) */
    int root_checked;        /* 1 when opts had a root */
    int64_t n_prepared;      /* distinct videos under root the reader opens: prepared ones */
    int64_t n_plain;         /* ... and plain files (which it decodes once to index them) */
    int64_t n_missing_rows;  /* rows whose video is not there at all */
    int n_missing;           /* distinct videos missing */
    struct tb_ann_missing *missing; /* all of them, by name */
    int64_t n_unreadable_rows; /* rows whose video is there but the reader refuses it (a
                                  rotated plain file, an unfinished prep, a broken index) */
    int n_unreadable;        /* distinct videos unreadable */
    struct tb_ann_missing *unreadable; /* all of them, by name, each with its reason */
};

/* The statistics of a into *out (tb_ann_stats_free). Memory grows with the number of rows
 * only. With a root, each distinct video is opened once with the clip reader, as the loader
 * will (tb_reader_info: a prepared video's index; a plain file decoded once), and counted as
 * prepared, plain, missing or unreadable. Errors: TB_EINVAL (bad opts), TB_ENOMEM. */
TB_API int tb_ann_stats_compute(struct tb_ann_stats **out, const struct tb_annotations *a,
                                const struct tb_ann_stats_opts *opts);
TB_API void tb_ann_stats_free(struct tb_ann_stats **s);

/* ---- RandAugment ------------------------------------------------------------------------- */

/* timm's RandAugment with its increasing op set (rand_augment_transform("rand-mM-nN-mstdS-
 * inc1")), as VideoMAE's fine-tuning applies it to a clip: N ops chosen uniformly with
 * replacement, each applied with probability 0.5 at a magnitude drawn from N(M, S) clipped to
 * [0, 10] and a random sign where the op has one; one draw per clip, the same op and argument
 * on every frame (statistics such as autocontrast's range are each frame's own). Pixels follow
 * Pillow's arithmetic exactly; the geometric ops are Pillow's affine transform (bicubic: the
 * a = -1 cubic VideoMAE's --train_interpolation bicubic selects) with pixels that come from
 * outside the frame filled with a colour (timm's default (128, 128, 128), which VideoMAE's
 * hparams keep). */
enum tb_ra_op {
    TB_RA_AUTO_CONTRAST,   /* ImageOps.autocontrast, per channel */
    TB_RA_EQUALIZE,        /* ImageOps.equalize, per channel */
    TB_RA_INVERT,
    TB_RA_ROTATE,          /* arg: degrees counter-clockwise about the centre, +-30 M/10 */
    TB_RA_POSTERIZE,       /* PosterizeIncreasing; arg: bits kept, 4 - int(4 M/10) */
    TB_RA_SOLARIZE,        /* SolarizeIncreasing; arg: threshold, 256 - int(256 M/10) */
    TB_RA_SOLARIZE_ADD,    /* arg: added to values below 128 (saturating), int(110 M/10) */
    TB_RA_COLOR,           /* ColorIncreasing; arg: the factor of the blend with the grey
                              frame, 1 +- 0.9 M/10 */
    TB_RA_CONTRAST,        /* ... with the frame's mean grey */
    TB_RA_BRIGHTNESS,      /* ... with black */
    TB_RA_SHARPNESS,       /* ... with the frame smoothed (ImageFilter.SMOOTH, border kept) */
    TB_RA_SHEAR_X,         /* arg: shear factor, +-0.3 M/10 */
    TB_RA_SHEAR_Y,
    TB_RA_TRANSLATE_X,     /* TranslateXRel; arg: a fraction of the width, +-0.45 M/10 */
    TB_RA_TRANSLATE_Y,     /* TranslateYRel; of the height */
    /* pytorchvideo's RandAugment (family TB_RA_PYTORCHVIDEO, src/data/randaug_pv.c), in its
     * table's order: torchvision's tensor ops on the clip as floats in [0, 1], bilinear, fill
     * 0.5; resample and fill are not read. Args: the blends' factor 1 +- 0.9 M/10, degrees
     * +-30 M/10, bits 4 - int(4 M/10), threshold 1 - M/10, shear +-0.3 M/10, translation
     * +-0.45 M/10 of the side. */
    TB_RA_PV_BRIGHTNESS, TB_RA_PV_CONTRAST, TB_RA_PV_SATURATION, TB_RA_PV_SHARPNESS,
    TB_RA_PV_AUTO_CONTRAST, TB_RA_PV_EQUALIZE, TB_RA_PV_INVERT, TB_RA_PV_ROTATE,
    TB_RA_PV_POSTERIZE, TB_RA_PV_SOLARIZE, TB_RA_PV_SHEAR_X, TB_RA_PV_SHEAR_Y,
    TB_RA_PV_TRANSLATE_X, TB_RA_PV_TRANSLATE_Y,
    TB_RA_N_OPS
};
enum tb_ra_family { TB_RA_TIMM, TB_RA_PYTORCHVIDEO };
/* pytorchvideo's magnitude draws (its sampling_type; uniform: its sampling_data_type) */
enum tb_ra_sampling { TB_RA_GAUSSIAN, TB_RA_UNIFORM_INT, TB_RA_UNIFORM_FLOAT };

enum tb_resample { TB_RESAMPLE_BICUBIC, TB_RESAMPLE_BILINEAR };

#define TB_RA_MAX_OPS 16

struct tb_randaug_opts {
    int n_ops;                 /* N, 0..TB_RA_MAX_OPS; 0: off */
    double magnitude;          /* M, 0..10 */
    double magnitude_std;      /* S: the magnitude's noise per op and clip; 0: none */
    enum tb_resample resample; /* the geometric ops' filter */
    uint8_t fill[3];           /* the geometric ops' colour outside the frame */
    enum tb_ra_family family;  /* whose ops and draws (0: timm's) */
    double prob;               /* pytorchvideo: each op's probability (its prob) */
    enum tb_ra_sampling sampling; /* pytorchvideo: the magnitude's draw; gaussian's std is
                                  magnitude_std */
    double sampling_min;       /* pytorchvideo: uniform draws from here to M */
};

/* "mM-nN" or "mM-nN-mstdS" (timm's form "rand-m7-n4-mstd0.5-inc1" too) into *o: S is 0.5
 * unless given (VideoMAE's), bicubic, fill (128, 128, 128). "pytorchvideo-mM-nN" with
 * optional -pP, -mstdS, -uniform (integers), -uniform-float, -minK: pytorchvideo's
 * (prob 0.5, gaussian, std 0.5, min 0 unless given). "none", "" or NULL: off. Errors
 * (TB_EINVAL) name the bad part. */
TB_API int tb_randaug_parse(const char *spec, struct tb_randaug_opts *o);
/* 0, or TB_EINVAL for settings out of range. */
TB_API int tb_randaug_check(const struct tb_randaug_opts *o);
/* timm's name of an op ("AutoContrast", ..., "PosterizeIncreasing", ..., "TranslateYRel"). */
TB_API const char *tb_randaug_op_name(enum tb_ra_op op);
/* timm's level-to-argument rule of op at magnitude (0..10), negated when negate and the op
 * has a sign; 0 for the ops that take no argument. */
TB_API double tb_randaug_level_arg(enum tb_ra_op op, double magnitude, int negate);

/* One clip's draws. */
struct tb_ra_step {
    enum tb_ra_op op;
    int apply;                 /* 0: skipped (each op runs with probability 0.5) */
    double magnitude;          /* drawn and clipped to [0, 10] */
    int negate;
    double arg;                /* tb_randaug_level_arg(op, magnitude, negate) */
};
struct tb_ra_plan {
    int n;
    struct tb_ra_step step[TB_RA_MAX_OPS];
};

/* Draw sample i of epoch's ops from (seed, TB_RNG_RAND_AUGMENT, epoch, i) alone. */
TB_API void tb_randaug_draw(const struct tb_randaug_opts *o, uint64_t seed, int64_t epoch,
                            int64_t i, struct tb_ra_plan *plan);
/* Apply plan's ops, in order, to every frame of clip (n_frames, height, width, 3) in place.
 * Allocates one frame of scratch when an op needs it: 0 or TB_ENOMEM. */
TB_API int tb_randaug_apply(const struct tb_ra_plan *plan, const struct tb_randaug_opts *o,
                            uint8_t *clip, int n_frames, int width, int height);
/* One op with its argument on every frame of clip, in place: 0, TB_EINVAL, TB_ENOMEM. */
TB_API int tb_randaug_op(uint8_t *clip, int n_frames, int width, int height, enum tb_ra_op op,
                         double arg, enum tb_resample resample, const uint8_t fill[3]);

/* ---- dataset ----------------------------------------------------------------------------- */

enum tb_sampler {
    TB_SAMPLE_SEGMENTS, /* AVION: T segments of the annotated window (whole video: Kinetics) */
    TB_SAMPLE_DENSE,    /* VideoMAE: T frames at a stride from a random (train) start */
    TB_SAMPLE_DENSE_JITTER, /* AVION's VideoMAE pretraining: the same, each frame moved within
                           its stride, wrapped at the end (tb_sample_dense_jitter) */
};
#define TB_N_SAMPLERS 3

/* A sampler's name ("segments", "dense", "dense-jitter": flags, checkpoints), and back: 0 or
 * TB_EINVAL naming the names. */
TB_API const char *tb_sampler_name(enum tb_sampler s);
TB_API int tb_sampler_parse(const char *name, enum tb_sampler *out);
/* The frames a clip of T frames spans under s at stride (segments: T; dense: (T - 1) x stride
 * + 1; dense-jitter: T x stride). */
TB_API int64_t tb_sampler_span(enum tb_sampler s, int frames, int stride);

struct tb_dataset_opts {
    const char *root;          /* where the videos are: ROOT/<video>.<ext> (EPIC, narration),
                                  ROOT/<path> (Kinetics; "" for paths as written) */
    const char *ext;           /* prepared videos' suffix, e.g. "mp4" */
    enum tb_sampler sampler;
    int n_frames;              /* T */
    int stride;                /* dense sampling */
    int train;                 /* 1: jittered frames, the crop as given; 0: evaluation views */
    int n_views;               /* evaluation: temporal views per item (>= 1) */
    int n_crops;               /* evaluation: spatial crops per view: 1 (centre) or 3 (the
                                  centre and both ends of the long side) */
    struct tb_crop_spec crop;  /* training crop; evaluation uses the centre crop */
    int width, height;         /* output frame size */
    struct tb_randaug_opts rand_augment; /* training: RandAugment on each clip after its crop
                                  (draws: tb_randaug_draw's); n_ops 0: off */
};

typedef struct tb_dataset tb_dataset;

struct tb_sample_info {
    int64_t item;              /* annotation item */
    int view;                  /* evaluation view (0 in training) */
    int label[3];              /* verb, noun, action (-1 where absent) */
    const char *text;          /* narration, or NULL; owned by the annotations */
    struct tb_clip_stats clip;
};

/* ann is borrowed and must outlive the dataset. */
TB_API int tb_dataset_open(tb_dataset **out, const struct tb_annotations *ann,
                           const struct tb_dataset_opts *opts);
TB_API void tb_dataset_close(tb_dataset **ds);
/* Samples: items, times views and crops in evaluation. */
TB_API int64_t tb_dataset_size(const tb_dataset *ds);
/* Bytes of one sample: T * H * W * 3. */
TB_API size_t tb_dataset_sample_bytes(const tb_dataset *ds);
/* The rows no clip can be made of, found before the first: those whose video under root
 * (ext as tb_dataset_opts) is missing or does not open (r's tb_reader_info: a prepared
 * video's index, a plain file's streams; a rotated video read raw, say), and those whose
 * window holds no frame of their video. Each is removed from a and counted among its skipped
 * rows (n_skipped, bad[], n_unreadable) with its cause, naming the file and line. The rows
 * kept whose window runs past their video's end or before its start are counted afresh in
 * n_clamped and clamped[] (their clips come from the part inside the video). Each distinct
 * video is opened once. Returns how many were removed, TB_ENOMEM, or TB_EFORMAT when no row
 * is left (naming the first cause). */
TB_API int tb_ann_drop_unreadable(struct tb_annotations *a, tb_reader *r, const char *root,
                                  const char *ext);
/* Sample i of epoch into out (T, H, W, 3) with reader r (one per thread). Its random choices
 * come from a generator keyed by (seed, TB_RNG_CLIP, epoch, i) alone. */
TB_API int tb_dataset_get(const tb_dataset *ds, tb_reader *r, uint64_t seed, int64_t epoch,
                          int64_t i, uint8_t *out, struct tb_sample_info *info);

/* ---- loader ------------------------------------------------------------------------------ */

typedef struct tb_loader tb_loader;

struct tb_loader_opts {
    int batch_size;
    int n_workers;             /* decoding threads */
    int prefetch;              /* batches in flight; the buffer pool holds prefetch + 1 */
    uint64_t seed;
    int shuffle;               /* a new order every epoch (seed, TB_RNG_SHUFFLE, epoch) */
    int drop_last;             /* drop the last, partial batch */
    int rank, world;           /* this process's shard of every epoch */
    double max_failure_rate;   /* a failed clip is replaced by another sample (training) until
                                * more than this share fail (after 10 failures); 0: none is
                                * replaced, the first failure is the loader's error
                                * (evaluation: every item scored as it is, or none) */
    double clip_timeout_s;     /* a clip taking longer fails (0: no limit) */
};

struct tb_batch {
    uint8_t *video;            /* (B, T, H, W, 3) */
    int32_t *label;            /* (B, 3): verb, noun, action; -1 where absent */
    int64_t *index;            /* (B) dataset sample delivered, after any substitution */
    const char **text;         /* (B) narrations or NULL */
    uint8_t *flip;             /* (B) 1 where the clip was flipped */
    int n;                     /* clips; < B only for a last partial batch */
    int64_t epoch, number;     /* which batch of which epoch */
};

struct tb_loader_stats {
    int64_t clips;             /* delivered */
    int64_t failures;          /* clips that failed (each replaced) */
    int64_t timeouts;          /* of those, over the time limit */
    int64_t frames_decoded;    /* frames the decoders returned for delivered clips */
    double wait_s;             /* time tb_loader_next spent waiting for workers */
};

/* ds is borrowed. The pool of prefetch + 1 batch buffers is allocated here, once. */
TB_API int tb_loader_open(tb_loader **out, tb_dataset *ds, const struct tb_loader_opts *opts);
/* Start epoch (any order of epochs). Returns the number of batches it holds for this rank. */
TB_API int64_t tb_loader_epoch(tb_loader *l, int64_t epoch);
/* The same, starting at batch first (resuming inside an epoch): the batches delivered are
 * those an uninterrupted epoch would deliver from there on. */
TB_API int64_t tb_loader_epoch_from(tb_loader *l, int64_t epoch, int64_t first);
/* The next batch of the epoch, in order, or TB_EOF at its end. The batch stays valid until
 * tb_loader_release; errors (too many failures, a clip out of memory) name the last failed
 * file. One consumer. */
TB_API int tb_loader_next(tb_loader *l, struct tb_batch **batch);
TB_API void tb_loader_release(tb_loader *l, struct tb_batch *batch);
TB_API void tb_loader_get_stats(const tb_loader *l, struct tb_loader_stats *stats);
/* Takes batch's video buffer (a batch of this loader, delivered or not) out of the pool so
 * that it outlives the loader: ends the epoch, waits until no worker writes, and returns the
 * buffer, which the caller frees with free(). The loader is then good only for more takes and
 * tb_loader_close (the Python binding's arrays outlive a closed loader this way). */
TB_API uint8_t *tb_loader_take(tb_loader *l, struct tb_batch *batch);
/* Stops the workers (a worker stuck in a system call is left behind, detached) and frees the
 * pool. */
TB_API void tb_loader_close(tb_loader **l);

/* ---- augmentation ------------------------------------------------------------------------ */

/* AVION's "openai" normalisation on the 0-255 scale, and ImageNet's. */
extern TB_API const float tb_mean_openai[3], tb_std_openai[3];
extern TB_API const float tb_mean_imagenet[3], tb_std_imagenet[3];

/* Clips are normalised (and laid out as (B, 3, T, H, W)) by the model's backend:
 * tb_vit_set_clips (model.h). */

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_DATA_H */

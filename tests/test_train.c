/* tests/test_train.c - `tubelet train --task cls` and `tubelet eval` on a small synthetic
 * dataset with a tiny model:
 * - a run interrupted by Ctrl-C and resumed gives, step for step, the same losses as an
 *   uninterrupted run (checkpoint, optimizer state and loader position restored exactly);
 * - metrics.jsonl, config.txt and the checkpoint are written; `tubelet eval` on the checkpoint
 *   agrees with the run's own final evaluation;
 * - a diverging run stops with a message naming the step;
 * - the metric cannot flatter a broken model: with the head zeroed (every logit equal) only
 *   the classes a tie goes to count (top-1 = the share of label 0), and a NaN logit is an
 *   error naming the clip;
 * - `tubelet eval` makes clips the way the run did (sampler, stride, normalisation from the
 *   checkpoint);
 * - the guarded backend (memory unreadable outside its ops) trains to the same bits;
 * - --task mae: the same checkpoint for 1, 2 and 4 workers, an exact resume with Lion's
 *   state, fine-tuning from it (--init, --layer-decay, --drop-path), bad settings;
 * - fine-tuning's augmentation (mixup, cutmix, erasing, drop path, head dropout) under SGD:
 *   the same checkpoint for 1 and 4 workers, an exact resume, bad settings;
 * - --task clip: the same checkpoint for 1 and 3 workers, an exact resume, the zero-shot
 *   evaluation and its random baseline in metrics.jsonl, bad captions naming their lines;
 * - --fused-update (each gradient span applied as the backward completes it): the same
 *   checkpoint as the run without it, for cls (drop path and AdamW), mae (Lion, decoder
 *   masking) and clip (a learned temperature); a NaN head stops it at the first span, named;
 *   with clipping on it is refused;
 * - --label action: EK-100's verb, noun and action scores of both averaging modes in
 *   metrics.jsonl, and the same from `tubelet eval --train`; without --train a note and action
 *   scores only; tb_eval_cls over 5 views x 3 crops equal to tb_cls_evaluate on the model's
 *   own logits, collected clip by clip and averaged by tb_cls_average_views, and to
 *   tests/ref/ek100_cls_ref.py on them (skipped without numpy). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "core/npy.h"
#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"
#include "tubelet/video.h"

#ifndef PYTHON
#define PYTHON TB_TEST_PYTHON
#endif

static char data[4200], train_csv[4400], val_csv[4400];

static const char *model_flags = "--dim 32 --depth 2 --heads 2 --patch 16 --tubelet 2 "
                                 "--frames 4 --size 32 --batch 4 --workers 2 "
                                 "--flip false --log-every 1 --eval-every 0";

/* Losses of metrics.jsonl by step (index step - 1); returns the number of steps found. */
static int read_losses(const char *run, double *loss, int cap)
{
    char path[4400];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *text = tbt_read(path, NULL);
    int n = 0;
    for (char *p = text; p && (p = strstr(p, "{\"step\": ")); p++) {
        int step = atoi(p + 9);
        char *l = strstr(p, "\"loss\": ");
        if (step >= 1 && step <= cap && l) {
            loss[step - 1] = strtod(l + 8, NULL);
            n = step > n ? step : n;
        }
    }
    free(text);
    return n;
}

/* run's checkpoint, trained for `epochs`, into dir (made) with a NaN in head.bias and its
 * epoch set back to 0: a run started there trains again from a broken head. */
static void nan_head_copy(const char *run, const char *dir, const char *epochs)
{
    char src[4400], dst[4400], key[64], zero[64];
    snprintf(src, sizeof(src), "%s/last.safetensors", run);
    snprintf(dst, sizeof(dst), "%s/last.safetensors", dir);
    snprintf(key, sizeof(key), "\"epoch\":\"%s\"", epochs);
    snprintf(zero, sizeof(zero), "%-*s", (int)strlen(key), "\"epoch\":\"0\""); /* same length */
    tbt_run(NULL, 10, "mkdir -p %s", dir);
    struct tb_st_file *f = NULL;
    CHECK_EQ(tb_st_read(&f, src), 0);
    if (!f)
        return;
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, "head.bias"))
            ((float *)f->tensors[i].data)[0] = NAN;
    char *ep = strstr(f->metadata, key);
    CHECK_MSG(ep != NULL, "%s: no %s", src, key);
    if (ep)
        memcpy(ep, zero, strlen(zero));
    CHECK_EQ(tb_st_write(dst, f->tensors, f->n_tensors, f->metadata), 0);
    tb_st_free(&f);
}

/* A run of flags stopped by Ctrl-C after 4 logged steps, then the same command again: it
 * resumes, and every step's loss equals the uninterrupted run's (want, n_want steps). */
static void interrupted_run(const char *t, const char *flags, const char *run, const double *want,
                            int n_want)
{
    static double got[4096];
    char *out = NULL;
    tbt_run(&out, 600, "%s train %s --workers 2 --out %s > %s.log 2>&1 & pid=$!; "
            "while [ \"$(cat %s/metrics.jsonl 2>/dev/null | grep -c step)\" -lt 4 ]; do "
            "kill -0 $pid 2>/dev/null || exit 3; sleep 0.01; done; kill -INT $pid; "
            "wait $pid; echo status=$?", t, flags, run, run, run);
    CHECK_STR_HAS(out, "status=1");
    free(out);
    int rc = tbt_run(&out, 600, "%s train %s --workers 2 --out %s", t, flags, run);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "resuming from");
    free(out);
    int n = read_losses(run, got, 4096);
    CHECK_EQ(n, n_want);
    for (int i = 0; i < n && i < n_want; i++)
        CHECK_MSG(want[i] == got[i], "step %d: loss %.6f uninterrupted, %.6f resumed", i + 1,
                  want[i], got[i]);
}

/* --task mae: the same run for 1, 2 and 4 workers (masks and all); Lion's state through an
 * interruption; fine-tuning from it; bad settings. */
static void test_mae(const char *t, const char *d)
{
    char mae_flags[3000], run[3][4300], *out = NULL;
    snprintf(mae_flags, sizeof(mae_flags), "--task mae --data %s --train %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 --batch 4 "
             "--dec-dim 32 --dec-depth 1 --dec-heads 2 --mask-ratio 0.75 --flip false "
             "--log-every 1 --optim lion --lr 1e-4 --beta2 0.95 --wd 0.5 --epochs 6", data,
             train_csv);
    const int workers[3] = {1, 2, 4};
    static double l1[4096];
    for (int i = 0; i < 3; i++) {
        tbt_case = "mae: 1, 2 and 4 workers";
        snprintf(run[i], sizeof(run[i]), "%s/mae_w%d", d, workers[i]);
        int rc = tbt_run(&out, 600, "%s train %s --workers %d --out %s", t, mae_flags,
                         workers[i], run[i]);
        CHECK_MSG(rc == 0, "%s", out);
        if (i == 0)
            CHECK_STR_HAS(out, "2 of 8 tokens visible, 6 decoded");
        free(out);
        if (i > 0)
            tbt_same_ckpt(run[0], run[i], "mae workers");
    }
    int n1 = read_losses(run[0], l1, 4096);
    CHECK_MSG(n1 > 10 && l1[n1 - 1] < l1[0], "mae: %d steps, loss %.4f -> %.4f", n1, l1[0],
              n1 ? l1[n1 - 1] : 0);

    tbt_case = "mae: interrupted and resumed (Lion)";
    char run_i[4300];
    snprintf(run_i, sizeof(run_i), "%s/mae_int", d);
    interrupted_run(t, mae_flags, run_i, l1, n1);
    tbt_same_ckpt(run[0], run_i, "mae resumed");
    /* past the settings' check (--resume-changed), the checkpoint's own */
    int rc = tbt_run(&out, 600, "%s train %s --optim adamw --epochs 7 --resume-changed --out %s",
                     t, mae_flags, run_i);
    CHECK_MSG(rc != 0 && out && strstr(out, "its optimizer state is lion's, this run's "
                                             "optimizer is adamw"), "another optimizer: %s", out);
    free(out);

    tbt_case = "fine-tuning from mae";
    char ft[4300], cls_flags[3000];
    snprintf(ft, sizeof(ft), "%s/mae_ft", d);
    snprintf(cls_flags, sizeof(cls_flags), "--data %s --train %s --val %s %s --epochs 2", data,
             train_csv, val_csv, model_flags);
    rc = tbt_run(&out, 600, "%s train %s --init %s/last.safetensors --layer-decay 0.75 "
                 "--drop-path 0.1 --out %s", t, cls_flags, run[0], ft);
    CHECK_MSG(rc == 0, "%s", out);
    /* the encoder's 2 x 13 block tensors and the patch embedding's 2; new: fc_norm, head */
    CHECK_STR_HAS(out, "init: 28 of 32 tensors from");
    CHECK_STR_HAS(out, "new: fc_norm.weight, fc_norm.bias, head.weight, head.bias");
    CHECK_STR_HAS(out, "validation top-1");
    CHECK_MSG(out && !strstr(out, "was trained on clips normalised"), "%s", out);
    free(out);
    /* another normalisation than the pretraining's: allowed, said */
    rc = tbt_run(&out, 600, "%s train %s --init %s/last.safetensors --norm imagenet --out %s/ft2",
                 t, cls_flags, run[0], d);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "last.safetensors was trained on clips normalised with --norm openai, "
                  "this run uses --norm imagenet");
    free(out);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s", t, ft, data,
                 val_csv);
    CHECK_MSG(rc == 0, "eval of the fine-tuned model: %s", out);
    free(out);

    tbt_case = "mae: bad settings";
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s", t, run[0],
                 data, val_csv);
    CHECK_MSG(rc != 0 && out && strstr(out, "is a --task mae checkpoint, without a classifier"),
              "eval of an mae checkpoint: %s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --mask-ratio 0.2 --out %s/mae_bad", t, mae_flags, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "mask ratio 0.2 masks 0 of the 4 positions"),
              "a mask ratio masking nothing: %s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --drop-path 0.1 --out %s/mae_bad2", t, mae_flags, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "--drop-path 0.1 (the command line) would be "
                                             "ignored: only --task cls reads it"),
              "drop path in pretraining: %s", out);
    free(out);
    /* A checkpoint of another model: the fine-tuned ViT-tiny's weights into a wider model. */
    rc = tbt_run(&out, 300, "%s train %s --dim 64 --init %s/last.safetensors --out %s/ft_bad", t,
                 cls_flags, run[0], d);
    CHECK_MSG(rc != 0 && out && strstr(out, "mae_w1/last.safetensors") &&
                  strstr(out, "has shape (32,3,2,16,16), the model needs (64,3,2,16,16)"),
              "init from another model: %s", out);
    free(out);
    /* Another clip shape: sin-cos positions are made for it; learned ones do not fit. */
    rc = tbt_run(&out, 600, "%s train %s --frames 8 --epochs 1 --init %s/last.safetensors --out "
                 "%s/ft_frames8", t, cls_flags, run[0], d);
    CHECK_MSG(rc == 0 && out && strstr(out, "init: 28 of 32"), "fine-tuning on 8 frames from "
              "4: %s", out);
    free(out);
    rc = tbt_run(&out, 600, "%s train %s --pos learned --epochs 1 --out %s/cls_learned", t,
                 cls_flags, d);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --pos learned --frames 8 --init "
                 "%s/cls_learned/last.safetensors --out %s/ft_bad3", t, cls_flags, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "tensor 'pos_embed' has shape (1,8,32), the model "
                                             "needs (1,16,32): learned positions are not "
                                             "interpolated"), "learned positions of another "
              "clip shape: %s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --init %s/syn/annotations/EPIC_100_train.csv --out "
                 "%s/ft_bad2", t, cls_flags, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "EPIC_100_train.csv"), "init from a CSV: %s", out);
    free(out);
}

/* Fine-tuning's augmentation and regularisation together (mixup and cutmix switched per
 * batch, random erasing, drop path, head dropout) under SGD with momentum: the same
 * checkpoint for 1 and 4 workers, an exact resume (the momentum buffer restored), the global
 * batch and lr printed; bad settings. */
static void test_augment(const char *t, const char *d)
{
    char flags[3000], run[2][4300], *out = NULL;
    snprintf(flags, sizeof(flags), "--data %s --train %s --val %s %s --epochs 4 --mixup 0.8 "
             "--cutmix 1.0 --random-erase 0.5 --drop-path 0.1 --head-dropout 0.5 --optim sgd "
             "--wd 1e-4 --blr 0.4", data, train_csv, val_csv, model_flags);
    const int workers[2] = {1, 4};
    static double l1[4096];
    for (int i = 0; i < 2; i++) {
        tbt_case = "augmentation: 1 and 4 workers";
        snprintf(run[i], sizeof(run[i]), "%s/aug_w%d", d, workers[i]);
        int rc = tbt_run(&out, 600, "%s train %s --workers %d --out %s", t, flags, workers[i],
                         run[i]);
        CHECK_MSG(rc == 0, "%s", out);
        /* --blr 0.4 per 256 clips at a global batch of 4 */
        CHECK_STR_HAS(out, "global batch 4 (1 process x 4 clips); peak lr 0.00625 (--blr 0.4 x "
                      "4 / 256, from the command line)");
        free(out);
        if (i > 0)
            tbt_same_ckpt(run[0], run[i], "augmentation workers");
    }
    int n1 = read_losses(run[0], l1, 4096);
    CHECK_MSG(n1 > 6, "augmentation: %d steps", n1);
    char path[4400];
    snprintf(path, sizeof(path), "%s/last.safetensors", run[0]);
    struct tb_st_file *f = NULL;
    CHECK_EQ(tb_st_read(&f, path), 0);
    CHECK(f && tb_st_find(f, "optimizer.momentum_buffer.head.weight") &&
          !tb_st_find(f, "optimizer.exp_avg.head.weight"));
    tb_st_free(&f);

    tbt_case = "augmentation: interrupted and resumed (SGD)";
    char run_i[4300];
    snprintf(run_i, sizeof(run_i), "%s/aug_int", d);
    interrupted_run(t, flags, run_i, l1, n1);
    tbt_same_ckpt(run[0], run_i, "augmentation resumed");

    tbt_case = "augmentation: bad settings";
    int rc = tbt_run(&out, 300, "%s train %s --batch 3 --out %s/aug_bad", t, flags, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "the batch (3) must be even"), "odd batch: %s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train --task mae --data %s --train %s %s --mixup 0.8 --out "
                 "%s/aug_bad2", t, data, train_csv, model_flags, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "--mixup 0.8 (the command line) would be ignored: "
                                             "only --task cls reads it, not --task mae"),
              "mixup in pretraining: %s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --erase-mode cube --out %s/aug_bad3", t, flags, d);
    CHECK_MSG(rc == 2 && out && strstr(out, "--erase-mode"), "a bad erase mode: %s", out);
    free(out);
}

/* --task clip: the same run for 1 and 3 workers, an exact resume, the zero-shot evaluation
 * beside its random baseline, bad captions naming their lines. */
static void test_clip(const char *t, const char *d)
{
    char flags[3000], run[2][4300], *out = NULL;
    snprintf(flags, sizeof(flags), "--task clip --data %s --train %s --val %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --frames 2 --size 32 --batch 4 --embed 16 "
             "--text-width 32 --text-heads 2 --text-depth 1 --context 12 --log-every 1 "
             "--eval-every 0 --epochs 4 --lr 1e-3 --warmup-epochs 0", data, train_csv, val_csv);
    const int workers[2] = {1, 3};
    int rc;
    static double l1[4096];
    for (int i = 0; i < 2; i++) {
        tbt_case = "clip: 1 and 3 workers";
        snprintf(run[i], sizeof(run[i]), "%s/clip_w%d", d, workers[i]);
        rc = tbt_run(&out, 600, "%s train %s --workers %d --out %s", t, flags, workers[i], run[i]);
        CHECK_MSG(rc == 0, "%s", out);
        CHECK_STR_HAS(out, "validation retrieval mAP");
        CHECK_STR_HAS(out, "random ranking");
        free(out);
        if (i > 0)
            tbt_same_ckpt(run[0], run[i], "clip workers");
    }
    int n1 = read_losses(run[0], l1, 4096);
    CHECK_MSG(n1 > 10 && l1[n1 - 1] < l1[0], "clip: %d steps, loss %.4f -> %.4f", n1, l1[0],
              n1 ? l1[n1 - 1] : 0);
    char path[4400];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run[0]);
    char *m = tbt_read(path, NULL);
    CHECK_MSG(m && strstr(m, "\"map_random\": ") && strstr(m, "\"sentences\": "), "%s", m);

    /* tubelet eval on the checkpoint: the run's own final scores; the similarity matrix as a
     * .npy of (clips, sentences); a relevancy file of another shape refused */
    tbt_case = "clip: tubelet eval --task mir";
    char *p_map = m ? strstr(m, "\"map\": ") : NULL;
    double run_map = p_map ? atof(p_map + 7) : -1;
    char sim[4400], relf[4400];
    snprintf(sim, sizeof(sim), "%s/sim.npy", d);
    rc = tbt_run(&out, 300, "%s eval --task mir --ckpt %s/last.safetensors --data %s --val %s "
                 "--batch 4 --similarity %s", t, run[0], data, val_csv, sim);
    CHECK_MSG(rc == 0, "%s", out);
    char *e_map = out ? strstr(out, "\"map\": ") : NULL;
    CHECK_MSG(e_map && fabs(atof(e_map + 7) - run_map) < 1e-4, "eval mAP vs the run's %.4f: %s",
              run_map, out);
    free(out);
    size_t len = 0;
    char *npy = tbt_read(sim, &len);
    CHECK_MSG(npy && len > 128 && !memcmp(npy, "\x93NUMPY", 6) && strstr(npy + 10, "'<f4'"),
              "similarity file: %zu bytes", len);
    free(npy);
    snprintf(relf, sizeof(relf), "%s/rel_bad.npy", d);
    rc = tbt_run(&out, 60, "cp %s %s && %s eval --task mir --ckpt %s/last.safetensors --data %s "
                 "--val %s --batch 4 --relevancy %s", sim, relf, t, run[0], data, train_csv,
                 relf);
    CHECK_MSG(rc != 0 && out && strstr(out, "rel_bad.npy"), "a relevancy of another split: %s",
              out);
    free(out);
    free(m);
    /* a classifier's outputs asked of a dual encoder: refused, not silently left out */
    rc = tbt_run(&out, 60, "%s eval --ckpt %s/last.safetensors --data %s --val %s --scores "
                 "%s/clip_scores.npy", t, run[0], data, val_csv, d);
    CHECK_MSG(rc == 2 && out && strstr(out, "/clip_scores.npy (the command line) would be "
                                             "ignored: ") &&
                  strstr(out, "is a --task clip checkpoint, and only --task cls's read it"),
              "%s", out);
    free(out);

    tbt_case = "clip: interrupted and resumed";
    char run_i[4300];
    snprintf(run_i, sizeof(run_i), "%s/clip_int", d);
    interrupted_run(t, flags, run_i, l1, n1);
    tbt_same_ckpt(run[0], run_i, "clip resumed");

    /* Starting from CLIP's weights: a checkpoint without the projections and the temporal
     * embedding (as OpenAI's ViT-B/16 converts, docs/FORMATS.md) loads the rest by name. */
    tbt_case = "clip: --init from CLIP-style weights";
    char ckpt[4400], clipw[4400];
    snprintf(ckpt, sizeof(ckpt), "%s/last.safetensors", run[0]);
    snprintf(clipw, sizeof(clipw), "%s/clip_like.safetensors", d);
    struct tb_st_file *f = NULL;
    CHECK_EQ(tb_st_read(&f, ckpt), 0);
    int kept = 0, all = f ? f->n_tensors : 0;
    struct tb_st_tensor *ts = calloc((size_t)all + 1, sizeof(*ts));
    for (int i = 0; f && i < all; i++) {
        const char *n = f->tensors[i].name;
        if (strncmp(n, "optimizer.", 10) && strcmp(n, "visual.proj") &&
            strcmp(n, "text_projection") && strcmp(n, "visual.temporal_embedding"))
            ts[kept++] = f->tensors[i];
    }
    CHECK_EQ(tb_st_write(clipw, ts, kept, NULL), 0);
    free(ts);
    tb_st_free(&f);
    rc = tbt_run(&out, 600, "%s train %s --epochs 1 --init %s --out %s/clip_init", t, flags, clipw,
                 d);
    CHECK_MSG(rc == 0, "%s", out);
    char want[256];
    snprintf(want, sizeof(want), "init: %d of %d tensors from", kept, kept + 3);
    CHECK_STR_HAS(out, want);
    CHECK_STR_HAS(out, "new: visual.temporal_embedding, visual.proj, text_projection");
    free(out);

    /* Pretraining on a narration CSV (video_id,start_s,end_s,text), scored on the EPIC CSV. */
    tbt_case = "clip: narration CSV, EPIC validation";
    char narr[4400];
    snprintf(narr, sizeof(narr), "%s/narrations.csv", d);
    tbt_run(NULL, 30, "awk -F, 'function s(t, a) { split(t, a, \":\"); return a[1] * 3600 + "
            "a[2] * 60 + a[3] } NR == 1 { print \"video_id,start_s,end_s,text\"; next } "
            "{ print $3 \",\" s($5) \",\" s($6) \",\" $9 }' %s > %s", train_csv, narr);
    rc = tbt_run(&out, 600, "%s train %s --epochs 1 --train %s --format narration --val-format "
                 "epic --out %s/clip_narr", t, flags, narr, d);
    CHECK_MSG(rc == 0 && out && strstr(out, "validation retrieval mAP"), "%s", out);
    free(out);

    /* Captions: an empty one, and one that is not UTF-8, each named by its line. */
    tbt_case = "clip: bad captions";
    char bad[4400];
    snprintf(bad, sizeof(bad), "%s/bad_captions.csv", d);
    tbt_run(NULL, 30, "awk -F, 'BEGIN{OFS=\",\"} NR == 3 {$9 = \"\"} {print}' %s > %s", train_csv,
            bad);
    rc = tbt_run(&out, 120, "%s train %s --train %s --out %s/clip_bad", t, flags, bad, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "bad_captions.csv:3: empty caption"), "%s", out);
    free(out);
    tbt_run(NULL, 30, "awk -F, 'BEGIN{OFS=\",\"} NR == 4 {$9 = \"caf\\351\"} {print}' %s > %s",
            train_csv, bad);
    rc = tbt_run(&out, 120, "%s train %s --train %s --out %s/clip_bad2", t, flags, bad, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "bad_captions.csv:4: the narration"), "%s", out);
    free(out);
}

/* ---- --label action: EK-100's scores ------------------------------------------------------ */

/* The number after "key": in text, or NAN. */
static double json_num(const char *text, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    const char *p = text ? strstr(text, pat) : NULL;
    return p ? atof(p + strlen(pat)) : NAN;
}

/* The classification keys of an eval line with the action list: key k of 18 into buf. */
static const char *cls_key(int k, char *buf, size_t size)
{
    static const char *const level[3] = {"verb", "noun", "action"};
    static const char *const what[3] = {"%s_top1%s", "%s_top5%s", "mean_class_%s%s"};
    snprintf(buf, size, what[k % 3], level[k / 3 % 3], k < 9 ? "" : "_logits");
    return buf;
}

static void same_part(const struct tb_cls_part *a, const struct tb_cls_part *b, double tol,
                      const char *what)
{
    CHECK_MSG(fabs(a->top1 - b->top1) <= tol && fabs(a->top5 - b->top5) <= tol &&
              fabs(a->mean_class - b->mean_class) <= tol, "%s: top-1 %.17g / %.17g, top-5 "
              "%.17g / %.17g, mean class %.17g / %.17g", what, a->top1, b->top1, a->top5,
              b->top5, a->mean_class, b->mean_class);
    CHECK_MSG(a->n_classes == b->n_classes && a->n_placeholders == b->n_placeholders &&
              a->n_mean_classes == b->n_mean_classes, "%s: classes %d / %d, placeholders "
              "%d / %d, in the mean %d / %d", what, a->n_classes, b->n_classes,
              a->n_placeholders, b->n_placeholders, a->n_mean_classes, b->n_mean_classes);
}

static void same_scores(const struct tb_cls_scores *a, const struct tb_cls_scores *b,
                        double tol, const char *mode)
{
    char what[96];
    const struct tb_cls_part *pa[3] = {&a->verb, &a->noun, &a->action};
    const struct tb_cls_part *pb[3] = {&b->verb, &b->noun, &b->action};
    static const char *const level[3] = {"verb", "noun", "action"};
    for (int v = 0; v < 3; v++) {
        snprintf(what, sizeof(what), "%s, %s", mode, level[v]);
        same_part(pa[v], pb[v], tol, what);
    }
}

/* The model's logits (n_items, 15, K) for the items of ann, 5 views x 3 crops made by the
 * dataset clip by clip and forwarded 4 at a time (as the evaluation's batches: the same
 * clips in each product, so the same bits). */
static float *own_logits(tb_vit *m, const struct tb_annotations *ann,
                         const struct tb_dataset_opts *d, enum tb_norm norm)
{
    const struct tb_vit_config *c = tb_vit_config(m);
    struct tb_dataset_opts o = *d;
    o.train = 0;
    o.n_views = 5;
    o.n_crops = 3;
    o.n_frames = c->frames;
    o.width = c->width;
    o.height = c->height;
    tb_dataset *ds = NULL;
    tb_reader *rd = NULL;
    const float *mean, *std;
    tb_norm_values(norm, &mean, &std);
    CHECK_EQ(tb_dataset_open(&ds, ann, &o), 0);
    CHECK_EQ(tb_reader_open(&rd, NULL), 0);
    if (!ds || !rd) {
        tb_dataset_close(&ds);
        return NULL;
    }
    int64_t n = tb_dataset_size(ds);
    size_t bytes = tb_dataset_sample_bytes(ds);
    CHECK_EQ(n, (int64_t)ann->n_items * 15);
    uint8_t *clips = malloc(4 * bytes);
    float *z = malloc(sizeof(float) * (size_t)n * c->classes);
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i += 4) {
        int b = n - i < 4 ? (int)(n - i) : 4;
        struct tb_sample_info info;
        for (int j = 0; j < b && rc == 0; j++)
            rc = tb_dataset_get(ds, rd, 0, 0, i + j, clips + (size_t)j * bytes, &info);
        if (rc == 0)
            rc = tb_vit_forward_clips(m, clips, NULL, b, mean, std, NULL, 0, NULL);
        if (rc == 0)
            rc = tb_vit_logits(m, z + (size_t)i * c->classes);
    }
    CHECK_MSG(rc == 0, "%s", tb_errmsg());
    free(clips);
    tb_reader_close(&rd);
    tb_dataset_close(&ds);
    if (rc < 0) {
        free(z);
        return NULL;
    }
    return z;
}

/* Whether any score of a differs from b's. */
static int scores_differ(const struct tb_cls_scores *a, const struct tb_cls_scores *b)
{
    const struct tb_cls_part *pa[3] = {&a->verb, &a->noun, &a->action};
    const struct tb_cls_part *pb[3] = {&b->verb, &b->noun, &b->action};
    int differ = 0;
    for (int v = 0; v < 3; v++)
        differ |= pa[v]->top1 != pb[v]->top1 || pa[v]->top5 != pb[v]->top5 ||
                  pa[v]->mean_class != pb[v]->mean_class;
    return differ;
}

/* tb_eval_cls of m on ann (label action, the list given), 5 views x 3 crops, into *r, against
 * m's own logits scored independently: tb_cls_average_views and tb_cls_evaluate (to the bit:
 * one process adds the views in tb_cls_average_views' order), and ek100_cls_ref.py. */
static void eval_check(tb_vit *m, const struct tb_annotations *ann,
                       const struct tb_cls_action_list *list, const struct tb_dataset_opts *d,
                       enum tb_norm norm, int have_numpy, struct tb_eval_result *r)
{
    int n = ann->n_items, K = tb_vit_config(m)->classes;
    float *probs = malloc(sizeof(float) * (size_t)n * K);
    int *truth = malloc(sizeof(int) * 3 * (size_t)n);
    double *prob[2] = {malloc(sizeof(double) * (size_t)n * K),
                       malloc(sizeof(double) * (size_t)n * K)};
    static const char *const mode_name[2] = {"logits averaged", "probabilities averaged"};
    float *z = NULL;
    CHECK_EQ(tb_eval_cls(m, ann, d, TB_LABEL_ACTION, norm, 5, 3, 4, 2, list, r, probs), 0);
    CHECK_EQ(r->cls_parts, 7);
    CHECK_EQ(r->n_items, n);
    if (!(z = own_logits(m, ann, d, norm)))
        goto end;
    for (int i = 0; i < n; i++) {
        truth[3 * i] = ann->items[i].verb;
        truth[3 * i + 1] = ann->items[i].noun;
        truth[3 * i + 2] = ann->items[i].action;
    }
    for (int mode = 0; mode < 2; mode++) {
        struct tb_cls_scores sc;
        CHECK_EQ(tb_cls_average_views(z, n, 15, K, (enum tb_cls_avg)mode, prob[mode]), 0);
        CHECK_EQ(tb_cls_evaluate(prob[mode], n, K, list->verb, list->noun, truth, &sc), 0);
        same_scores(&r->cls[mode], &sc, 0, mode_name[mode]);
    }
    /* top1/top5: the averaged probabilities under argmax's rule, and those probabilities
     * handed out; the losses: each mode's mean cross-entropy. */
    int top1 = 0, top5 = 0, probs_ok = 1;
    double apart = 0, loss[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        const double *p = prob[TB_CLS_AVG_PROBS] + (size_t)i * K;
        int y = truth[3 * i + 2], rank = 0;
        for (int mode = 0; mode < 2; mode++)
            loss[mode] -= log(fmax(prob[mode][(size_t)i * K + y], 1e-12)) / n;
        for (int q = 0; q < K; q++) {
            rank += p[q] > p[y] || (p[q] == p[y] && q < y);
            probs_ok &= probs[(size_t)i * K + q] == (float)p[q];
            apart = fmax(apart, fabs(p[q] - prob[TB_CLS_AVG_LOGITS][(size_t)i * K + q]));
        }
        top1 += rank < 1;
        top5 += rank < 5;
    }
    CHECK_MSG(r->top1 == (double)top1 / n && r->top5 == (double)top5 / n, "top-1 %g, top-5 %g; "
              "the probabilities give %d and %d of %d", r->top1, r->top5, top1, top5, n);
    CHECK(probs_ok);
    CHECK_MSG(fabs(r->loss - loss[TB_CLS_AVG_PROBS]) <= 1e-12 * loss[TB_CLS_AVG_PROBS] &&
              fabs(r->loss_logits - loss[TB_CLS_AVG_LOGITS]) <= 1e-12 * loss[TB_CLS_AVG_LOGITS],
              "losses %.17g, %.17g; the probabilities give %.17g, %.17g", r->loss,
              r->loss_logits, loss[TB_CLS_AVG_PROBS], loss[TB_CLS_AVG_LOGITS]);
    CHECK_MSG(apart > 1e-2, "the modes' probabilities differ by %.3g at most", apart);
    if (!have_numpy)
        goto end;
    FILE *f = fopen(tbt_path("own_logits.f32"), "wb");
    CHECK(f && fwrite(z, sizeof(float), (size_t)n * 15 * K, f) == (size_t)n * 15 * K);
    if (f)
        fclose(f);
    char *out = NULL, mode[16];
    int rc = tbt_run(&out, 120, PYTHON " %s/tests/ref/ek100_cls_ref.py score %s %s %s %s 15",
                     TB_SOURCE_DIR, train_csv, val_csv, train_csv, tbt_path("own_logits.f32"));
    CHECK_MSG(rc == 0, "ek100_cls_ref.py score: %s", out);
    const char *at = out;
    int lines = 0, used;
    double w[18];
    while (rc == 0 && at && sscanf(at, "%15s%n", mode, &used) == 1) {
        at += used;
        int k = 0;
        for (; k < 18 && sscanf(at, "%lf%n", &w[k], &used) == 1; k++)
            at += used;
        CHECK_EQ(k, 18);
        if (k < 18)
            break;
        struct tb_cls_scores want = {.n_items = n};
        struct tb_cls_part *part[3] = {&want.verb, &want.noun, &want.action};
        for (int v = 0; v < 3; v++)
            *part[v] = (struct tb_cls_part){w[6 * v], w[6 * v + 1], w[6 * v + 2],
                                            (int)w[6 * v + 3], (int)w[6 * v + 4],
                                            (int)w[6 * v + 5]};
        int avg = strcmp(mode, "logits") ? TB_CLS_AVG_PROBS : TB_CLS_AVG_LOGITS;
        same_scores(&r->cls[avg], &want, 1e-12, mode);
        lines++;
    }
    CHECK_EQ(lines, 2);
    free(out);
end:
    free(z);
    free(probs);
    free(truth);
    free(prob[0]);
    free(prob[1]);
}

/* The action run's checkpoint on the training items, which it has learnt (scores away from
 * 0); then with a random head 10 times the usual scale, whose views disagree so that the two
 * modes score differently (a mix-up of the modes would show). */
static void eval_against_logits(const char *ckpt)
{
    struct tb_ckpt_info info;
    struct tb_annotations *sets[2] = {NULL, NULL};
    struct tb_ann_opts epic = {.format = TB_ANN_EPIC};
    struct tb_cls_action_list *list = NULL;
    tb_vit *m = NULL;
    struct tb_eval_result r;
    int have_numpy = tbt_run(NULL, 60, PYTHON " -c 'import numpy'") == 0;
    if (!have_numpy)
        fprintf(stderr, "skip: the comparisons with tests/ref/ek100_cls_ref.py (%s has no "
                "numpy)\n", PYTHON);
    CHECK_EQ(tb_ckpt_info(ckpt, &info), 0);
    info.model.backend = "cpu";
    CHECK_EQ(tb_vit_open(&m, &info.model), 0);
    CHECK_EQ(tb_ckpt_load(ckpt, tb_vit_params(m), NULL, NULL), 0);
    CHECK_EQ(tb_vit_plan(m, 4, NULL), 0);
    CHECK_EQ(tb_ann_load(&sets[0], train_csv, &epic), 0);
    CHECK_EQ(tb_ann_load(&sets[1], val_csv, &epic), 0);
    const struct tb_annotations *read[2] = {sets[0], sets[1]};
    if (!m || !sets[0] || !sets[1] || tb_ann_map_actions(sets, 2) < 1 ||
        tb_cls_action_list_build(&list, read, 2) < 0) {
        TBT_FAIL("%s", tb_errmsg());
        goto end;
    }
    CHECK_EQ(list->n_actions, info.model.classes);
    struct tb_dataset_opts d = {.root = data, .ext = "mp4", .sampler = info.sampler,
                                .stride = info.stride};
    tbt_case = "label action: tb_eval_cls against the model's own logits";
    eval_check(m, sets[0], list, &d, info.norm, have_numpy, &r);
    CHECK_MSG(r.cls[TB_CLS_AVG_PROBS].action.top1 > 0.5, "action top-1 %g on the items it "
              "learnt", r.cls[TB_CLS_AVG_PROBS].action.top1);

    tbt_case = "label action: a random head, where the modes part";
    tb_params *pr = tb_vit_params(m);
    int iw = tb_params_find(pr, "head.weight");
    int64_t nw = iw >= 0 ? tb_params_at(pr, iw)->n : 0;
    float *h = malloc(sizeof(float) * (size_t)(nw + 1));
    tb_rng g;
    tb_rng_init(&g, 7, 3);
    for (int64_t k = 0; k < nw; k++)
        h[k] = (float)(10 * (tb_rng_uniform(&g) - 0.5));
    CHECK_EQ(iw >= 0 ? tb_params_write(pr, iw, h) : -1, 0);
    free(h);
    eval_check(m, sets[0], list, &d, info.norm, have_numpy, &r);
    CHECK_MSG(scores_differ(&r.cls[TB_CLS_AVG_LOGITS], &r.cls[TB_CLS_AVG_PROBS]),
              "both modes score alike: the case cannot tell them apart");

    tbt_case = "label action: tb_eval_cls refuses a list that does not fit";
    CHECK_EQ(tb_eval_cls(m, sets[0], &d, TB_LABEL_VERB, info.norm, 1, 1, 4, 2, list, &r, NULL),
             TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "an action list scores a model of actions, not of verbs");
    list->n_actions--;
    CHECK_EQ(tb_eval_cls(m, sets[0], &d, TB_LABEL_ACTION, info.norm, 1, 1, 4, 2, list, &r, NULL),
             TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "the action list has");
    list->n_actions++;
end:
    tb_cls_action_list_free(&list);
    tb_vit_close(&m);
    tb_ann_free(&sets[0]);
    tb_ann_free(&sets[1]);
}

/* The one table of settings (src/train/settings.c, settings.h): a checkpoint's settings as
 * JSON, with its numbers as the checkpoint's; a setting chosen by flag is written only where
 * it is not its default, and both commands take its flag and refuse a value it lacks. */
static void test_settings(const char *t, const char *ckpt)
{
    tbt_case = "settings: a checkpoint's as JSON";
    struct tb_ckpt_info info;
    char *json = NULL, *other = NULL, want[64], *out = NULL;
    CHECK_EQ(tb_ckpt_info(ckpt, &info), 0);
    CHECK_EQ(tb_ckpt_settings_json(&info, &json), 0);
    CHECK_STR_HAS(json, "{\"task\":\"cls\",");
    snprintf(want, sizeof(want), "\"dim\":%d,", info.model.dim);
    CHECK_STR_HAS(json, want);
    snprintf(want, sizeof(want), "\"frames\":%d,", info.model.frames);
    CHECK_STR_HAS(json, want);
    CHECK_MSG(json && !strstr(json, "attention"), "the default attention written: %s", json);
    info.model.attention = TB_ATTENTION_N; /* not a default: written (as a number it lacks) */
    CHECK_EQ(tb_ckpt_settings_json(&info, &other), 0);
    CHECK_STR_HAS(other, ",\"attention\":\"1\"}");
    free(json);
    free(other);

    tbt_case = "settings: the flag of a setting, in both commands";
    int rc = tbt_run(&out, 60, "%s train --data x --train y --out z --attention global "
                     "--print-config", t);
    CHECK_MSG(rc == 0 && out && strstr(out, "attention = global"), "%s", out);
    free(out);
    rc = tbt_run(&out, 60, "%s train --data x --train y --out z --attention window", t);
    CHECK_MSG(rc == 2 && out && strstr(out, "--attention: 'window' is none of global"), "%s",
              out);
    free(out);
    rc = tbt_run(&out, 60, "%s step --attention window", t);
    CHECK_MSG(rc == 2 && out && strstr(out, "--attention: 'window' is none of global"), "%s",
              out);
    free(out);
}

/* A --label action run: its eval line, tubelet eval with and without the action list. */
static void test_action(const char *t, const char *d)
{
    char run[4300], flags[3000], path[4400], key[64], *out = NULL;
    tbt_case = "label action: the run's evaluation";
    snprintf(run, sizeof(run), "%s/run_action", d);
    snprintf(flags, sizeof(flags), "--data %s --train %s --val %s %s --epochs 40 --lr 0.005 "
             "--label-smoothing 0 --label action --val-views 2", data, train_csv, val_csv,
             model_flags);
    int rc = tbt_run(&out, 600, "%s train %s --out %s", t, flags, run);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "  probabilities averaged: verb top-1 ");
    CHECK_STR_HAS(out, "  logits averaged: verb top-1 ");
    CHECK_STR_HAS(out, "; action top-1 ");
    free(out);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *metrics = tbt_read(path, NULL);
    const char *line = metrics ? strstr(metrics, "{\"eval_epoch\": 40, ") : NULL;
    CHECK_MSG(line != NULL, "no final eval line: %s", metrics);
    for (int k = 0; k < 18; k++)
        CHECK_MSG(!isnan(json_num(line, cls_key(k, key, sizeof(key)))), "no %s: %s", key, line);

    tbt_case = "label action: tubelet eval --train";
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --train %s "
                 "--batch 4 --views 2", t, run, data, val_csv, train_csv);
    CHECK_MSG(rc == 0, "%s", out);
    for (int k = 0; k < 20; k++) {
        const char *name = k < 18 ? cls_key(k, key, sizeof(key)) : k == 18 ? "top1" : "top5";
        double a = json_num(out, name), b = json_num(line, name);
        CHECK_MSG(a == b, "%s: %g from tubelet eval, %g in the run's metrics", name, a, b);
    }
    CHECK_MSG(fabs(json_num(out, "loss") - json_num(line, "val_loss")) < 1e-5 &&
              fabs(json_num(out, "loss_logits") - json_num(line, "val_loss_logits")) < 1e-5,
              "losses: %s\nthe run's: %s", out, line);
    CHECK(!strstr(out, "note:"));
    free(out);

    /* the checkpoint carries its action list (and its classes' names): the same numbers
     * without --train */
    tbt_case = "label action: tubelet eval of the checkpoint alone";
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --batch 4 "
                 "--views 2", t, run, data, val_csv);
    CHECK_MSG(rc == 0, "%s", out);
    for (int k = 0; k < 20; k++) {
        const char *name = k < 18 ? cls_key(k, key, sizeof(key)) : k == 18 ? "top1" : "top5";
        double a = json_num(out, name), b = json_num(line, name);
        CHECK_MSG(a == b, "%s: %g from tubelet eval, %g in the run's metrics", name, a, b);
    }
    CHECK(out && !strstr(out, "note:"));
    free(out);

    /* a CSV whose classes mean something else to the model: refused, the difference named */
    tbt_case = "label action: a CSV of other classes";
    char other[4400];
    snprintf(other, sizeof(other), "%s/other_names.csv", d);
    rc = tbt_run(&out, 30, "awk -F, 'BEGIN{OFS=\",\"} NR==1{for(i=1;i<=NF;i++) if($i==\"verb\") "
                 "c=i} NR>1{$c=$c \"_x\"} {print}' %s > %s", val_csv, other);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --batch 4", t,
                 run, data, other);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "other_names.csv:2: action ");
    CHECK_STR_HAS(out, "_x:");
    CHECK_STR_HAS(out, "to the model: another class list");
    free(out);

    /* a checkpoint that carries no label space (written before tubelet kept one): a note, and
     * the action scores only */
    tbt_case = "label action: tubelet eval without --train or a label space";
    char bare[4400];
    snprintf(path, sizeof(path), "%s/last.safetensors", run);
    snprintf(bare, sizeof(bare), "%s/bare.safetensors", d);
    struct tb_st_file *f = NULL;
    CHECK_EQ(tb_st_read(&f, path), 0);
    char *ls = f && f->metadata ? strstr(f->metadata, ",\"label_space\":\"") : NULL;
    CHECK_MSG(ls != NULL, "%s carries no label space", path);
    if (ls) {
        char *e = strchr(ls + 16, '"');
        memmove(ls, e + 1, strlen(e + 1) + 1);
        CHECK_EQ(tb_st_write(bare, f->tensors, f->n_tensors, f->metadata), 0);
    }
    tb_st_free(&f);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s --data %s --val %s --batch 4", t, bare, data,
                 val_csv);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "note: no action list without --train");
    CHECK_STR_HAS(out, "\"action_top1\": ");
    CHECK_STR_HAS(out, "\"mean_class_action_logits\": ");
    CHECK_MSG(out && !strstr(out, "verb_top1") && !strstr(out, "noun_top1"), "%s", out);
    free(out);

    tbt_case = "label action: tubelet eval --train of another run";
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --train %s "
                 "--batch 4", t, run, data, val_csv, val_csv);
    /* its numbering of the actions is not the run's: the checkpoint's label space says so */
    CHECK_MSG(rc != 0 && out && strstr(out, "EPIC_100_validation.csv:") &&
              strstr(out, "here, but verb ") && strstr(out, "to the model"), "%s", out);
    free(out);
    free(metrics);

    snprintf(path, sizeof(path), "%s/last.safetensors", run);
    eval_against_logits(path);
}

/* --fused-update gives the bits of the same run without it (no clipping: --clip-grad 0), in
 * every task; clipping with it is refused. */
static void test_fused(const char *t, const char *d)
{
    char flags[3][3000], run[4300], run_f[4300], *out = NULL;
    snprintf(flags[0], sizeof(flags[0]), "--data %s --train %s --val %s %s --epochs 3 "
             "--drop-path 0.1", data, train_csv, val_csv, model_flags);
    snprintf(flags[1], sizeof(flags[1]), "--task mae --data %s --train %s --dim 32 --depth 2 "
             "--heads 2 --patch 8 --tubelet 2 --frames 4 --size 32 --batch 4 "
             "--dec-dim 32 --dec-depth 2 --dec-heads 2 --mask-ratio 0.75 --decoder-mask "
             "running-cell --flip false --log-every 1 --optim lion --lr 1e-4 --beta2 0.95 "
             "--epochs 3", data, train_csv);
    snprintf(flags[2], sizeof(flags[2]), "--task clip --data %s --train %s --dim 32 --depth 2 "
             "--heads 2 --patch 16 --frames 2 --size 32 --batch 4 --embed 16 "
             "--text-width 32 --text-heads 2 --text-depth 2 --context 12 --log-every 1 "
             "--eval-every 0 --epochs 3 --lr 1e-3 --learn-temperature true", data, train_csv);
    const char *name[3] = {"cls", "mae", "clip"};
    for (int k = 0; k < 3; k++) {
        tbt_case = "fused updates";
        snprintf(run, sizeof(run), "%s/fused_%s_plain", d, name[k]);
        snprintf(run_f, sizeof(run_f), "%s/fused_%s", d, name[k]);
        int rc = tbt_run(&out, 600, "%s train %s --clip-grad 0 --out %s", t, flags[k], run);
        CHECK_MSG(rc == 0, "%s: %s", name[k], out);
        free(out);
        rc = tbt_run(&out, 600, "%s train %s --clip-grad 0 --fused-update --out %s", t,
                     flags[k], run_f);
        CHECK_MSG(rc == 0, "%s fused: %s", name[k], out);
        free(out);
        static double l0[4096], l1[4096];
        int n0 = read_losses(run, l0, 4096), n1 = read_losses(run_f, l1, 4096);
        CHECK_MSG(n0 > 4 && n0 == n1, "%s: %d and %d steps", name[k], n0, n1);
        tbt_same_ckpt(run, run_f, name[k]);
    }
    /* a NaN head: the first span's gradient stops the run before any update */
    tbt_case = "fused updates: a non-finite gradient";
    char run_n[4300];
    snprintf(run_n, sizeof(run_n), "%s/fused_nan", d);
    snprintf(run, sizeof(run), "%s/fused_cls", d);
    nan_head_copy(run, run_n, "3");
    int rc = tbt_run(&out, 300, "%s train %s --clip-grad 0 --fused-update --out %s", t,
                     flags[0], run_n);
    CHECK_MSG(rc == 1 && out && strstr(out, "norm.weight (and the rest of its span) is not "
                                           "finite at step"), "%s", out);
    free(out);

    tbt_case = "fused updates: with clipping";
    rc = tbt_run(&out, 300, "%s train %s --fused-update --out %s/fused_bad", t, flags[0], d);
    CHECK_MSG(rc != 0 && out && strstr(out, "add --clip-grad 0"), "%s", out);
    free(out);
}

/* --accum-steps 4 with batch 2 is batch 8 (the same clips, their gradients averaged): the
 * same loss at every step (1e-5) and the same weights after 4 steps, to float rounding (5e-5,
 * relative L2 per tensor: AdamW divides each step by the gradient's running RMS, so where a
 * small bias's gradient changes sign between steps the summation order's 1e-7 grows; mae's
 * decoder v_bias measured 1.4-1.9e-5 on the reader's frames, 2.4e-6 on swscale's; a wrongly
 * weighted micro-batch would also show in the later steps' losses), for cls and for mae (its masks
 * drawn per clip). The key third of
 * a qkv bias is left out: its gradient is zero but for rounding (softmax ignores a constant
 * per query), which AdamW turns into steps of about lr either way. Refused with
 * --fused-update and for clip, naming why. */
static void test_accum(const char *t, const char *d)
{
    static const char *const tasks[2][2] = {
        {"cls", ""},
        {"mae", "--task mae --mask-ratio 0.75 --dec-dim 32 --dec-depth 1 --dec-heads 2"}};
    char *out = NULL;
    for (int k = 0; k < 2; k++) {
        char flags[3000], run[2][4300], what[64];
        snprintf(what, sizeof(what), "%s: --accum-steps 4 x batch 2 against batch 8",
                 tasks[k][0]);
        tbt_case = what;
        snprintf(flags, sizeof(flags), "--data %s --train %s %s --workers 1 --flip false "
                 "--log-every 1 --eval-every 0 --seed 5 --epochs 2 --lr 0.001 %s", data,
                 train_csv, model_flags, tasks[k][1]);
        const char *mode[2] = {"--batch 8", "--batch 2 --accum-steps 4"};
        for (int m = 0; m < 2; m++) {
            snprintf(run[m], sizeof(run[m]), "%s/accum_%s%d", d, tasks[k][0], m);
            int rc = tbt_run(&out, 300, "%s train %s %s --out %s", t, flags, mode[m], run[m]);
            CHECK_MSG(rc == 0, "%s: %s", mode[m], out);
            free(out);
        }
        static double l0[256], l1[256];
        int n0 = read_losses(run[0], l0, 256), n1 = read_losses(run[1], l1, 256);
        CHECK_MSG(n0 >= 3 && n0 == n1, "%d and %d steps", n0, n1);
        for (int i = 0; i < n0 && i < n1; i++)
            CHECK_MSG(fabs(l0[i] - l1[i]) <= 1e-5 * fabs(l0[i]), "step %d: loss %.7f and %.7f",
                      i + 1, l0[i], l1[i]);
        char pa[4400], pb[4400];
        snprintf(pa, sizeof(pa), "%s/last.safetensors", run[0]);
        snprintf(pb, sizeof(pb), "%s/last.safetensors", run[1]);
        struct tb_st_file *fa = NULL, *fb = NULL;
        CHECK_EQ(tb_st_read(&fa, pa), 0);
        CHECK_EQ(tb_st_read(&fb, pb), 0);
        double worst = 0;
        int n = 0;
        for (int i = 0; fa && fb && i < fa->n_tensors; i++) {
            const struct tb_st_tensor *a = &fa->tensors[i], *b = tb_st_find(fb, a->name);
            if (a->dtype != TB_ST_F32 || strncmp(a->name, "optimizer.", 10) == 0)
                continue;
            CHECK_MSG(b && b->n == a->n, "%s missing", a->name);
            if (!b || b->n != a->n)
                continue;
            double diff = 0, norm = 0;
            int key = strstr(a->name, "attn.qkv.bias") != NULL;
            for (int64_t q = 0; q < a->n; q++) {
                if (key && q >= a->n / 3 && q < 2 * (a->n / 3))
                    continue;
                double x = ((const float *)a->data)[q], y = ((const float *)b->data)[q];
                diff += (x - y) * (x - y), norm += x * x;
            }
            double e = sqrt(diff) / (sqrt(norm) + 1e-30);
            CHECK_MSG(e <= 5e-5, "%s: relative difference %.2e", a->name, e);
            worst = fmax(worst, e);
            n++;
        }
        CHECK_MSG(n > 10, "%d tensors compared", n);
        fprintf(stderr, "%s: %d steps, %d tensors, worst relative difference %.2e\n", what, n0,
                n, worst);
        tb_st_free(&fa);
        tb_st_free(&fb);
    }
    tbt_case = "--accum-steps refused where it cannot hold";
    char flags[3000];
    snprintf(flags, sizeof(flags), "--data %s --train %s %s --batch 2 --accum-steps 2", data,
             train_csv, model_flags);
    CHECK_EQ(tbt_run(&out, 60, "%s train %s --clip-grad 0 --fused-update --out %s/accum_bad", t,
                     flags, d), 1);
    CHECK_STR_HAS(out, "before the micro-batches are summed");
    free(out);
    CHECK_EQ(tbt_run(&out, 60, "%s train %s --task clip --embed 16 --text-width 32 --text-heads "
                     "2 --text-depth 1 --context 12 --out %s/accum_bad", t, flags, d), 1);
    CHECK_STR_HAS(out, "negatives from one batch");
    free(out);
}

/* The validation CSV with two rows that make no clip: line 3's start time mistyped (a row
 * that does not parse) and line 4's video one the data root lacks. 0, or -1. */
static int write_bad_rows(const char *from, const char *to)
{
    char *text = tbt_read(from, NULL);
    FILE *f = text ? fopen(to, "w") : NULL;
    int line = 1, rc = f ? 0 : -1;
    for (char *s = text, *nl; f && s && *s; s = nl ? nl + 1 : NULL, line++) {
        nl = strchr(s, '\n');
        int len = nl ? (int)(nl - s) : (int)strlen(s), field = 0, i = 0;
        for (; i < len; i++) { /* the first six fields hold no quotes */
            if ((line == 3 && field == 4) || (line == 4 && field == 2))
                break;
            field += s[i] == ',';
        }
        if (line == 3 && i < len) { /* 00:00:01.50 -> 00:0x:01.50 */
            fprintf(f, "%.*s00:0x%.*s\n", i, s, len - i - 5, s + i + 5);
        } else if (line == 4 && i < len) { /* the video_id column */
            const char *end = memchr(s + i, ',', (size_t)(len - i));
            fprintf(f, "%.*sP99_99%.*s\n", i, s, end ? len - (int)(end - s) : 0, end ? end : "");
        } else {
            fprintf(f, "%.*s\n", len, s);
        }
    }
    if (line < 6)
        rc = -1;
    if (f && fclose(f) != 0)
        rc = -1;
    free(text);
    return rc;
}

/* Rows that make no clip are never dropped without a word: evaluation refuses the file,
 * naming each row and its own cause once, unless --skip-bad-rows (then it scores the others
 * and says how many it skipped); training skips them, says so and records the counts in
 * metrics.jsonl; a --val with such rows is refused before the run starts. */
static void test_bad_rows(const char *t, const char *d, const char *ckpt)
{
    tbt_case = "rows that make no clip";
    char bad[4300], run[4300], path[4400], *out = NULL;
    snprintf(bad, sizeof(bad), "%s/bad_rows.csv", d);
    snprintf(run, sizeof(run), "%s/run_bad", d);
    CHECK_EQ(write_bad_rows(val_csv, bad), 0);
    struct tb_annotations *va = NULL;
    struct tb_ann_opts vo = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&va, val_csv, &vo), 0);
    int n = va ? va->n_items : 0;
    tb_ann_free(&va);
    char want[4600];

    int rc = tbt_run(&out, 300, "%s eval --ckpt %s --data %s --val %s --batch 4", t, ckpt, data,
                     bad);
    CHECK_EQ(rc, 1);
    snprintf(want, sizeof(want), "%s: 2 of %d rows cannot be scored:\n  %s:3: ", bad, n, bad);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "\n  %s:4: ", bad);
    CHECK_STR_HAS(out, want);
    CHECK_STR_HAS(out, "P99_99");
    CHECK_STR_HAS(out, "--skip-bad-rows");
    CHECK_MSG(out && !strstr(out, "\"top1\"") && !strstr(out, "views"), "%s", out);
    free(out);

    char scores[4400], lines[4400];
    snprintf(scores, sizeof(scores), "%s/bad_scores.npy", d);
    snprintf(lines, sizeof(lines), "%s/bad_scores.lines.npy", d);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s --data %s --val %s --batch 4 --skip-bad-rows "
                 "--scores %s", t, ckpt, data, bad, scores);
    CHECK_MSG(rc == 0, "%s", out);
    snprintf(want, sizeof(want), "%s: skipping 2 of %d rows (1 for their video):\n  %s:3: ", bad,
             n, bad);
    CHECK_STR_HAS(out, want);
    snprintf(want, sizeof(want), "\"items\": %d,", n - 2);
    CHECK_STR_HAS(out, want);
    free(out);
    /* issue 42's S5: one row of scores per row of the file, in its order, NaN for the two
     * skipped (a bad time at line 3, a missing video at 4), and each row's line beside */
    struct tbi_npy h;
    CHECK_EQ(tbi_npy_open(&h, scores), 0);
    int64_t K = h.n_dims == 2 ? h.shape[1] : 0;
    CHECK_MSG(h.n_dims == 2 && h.shape[0] == n && K > 1, "scores of shape (%lld, %lld) for %d "
              "rows", (long long)h.shape[0], (long long)K, n);
    float *sc = h.n_dims == 2 && h.shape[0] == n ? malloc(sizeof(float) * (size_t)h.n) : NULL;
    if (sc)
        CHECK_EQ(tbi_npy_read_f32(&h, scores, sc), 0);
    tbi_npy_close(&h);
    for (int r = 0; sc && r < n; r++) {
        double sum = 0;
        int nans = 0;
        for (int64_t q = 0; q < K; q++) {
            nans += isnan(sc[r * K + q]);
            sum += sc[r * K + q];
        }
        if (r == 1 || r == 2) /* lines 3 and 4 */
            CHECK_MSG(nans == K, "row %d (line %d, skipped): %d of %lld NaN", r, r + 2, nans,
                      (long long)K);
        else
            CHECK_MSG(nans == 0 && fabs(sum - 1) < 1e-4, "row %d (line %d): %d NaN, sum %g", r,
                      r + 2, nans, sum);
    }
    free(sc);
    size_t len = 0;
    char *raw = tbt_read(lines, &len);
    size_t at = raw && len > 10 ? 10 + ((size_t)(uint8_t)raw[8] | (size_t)(uint8_t)raw[9] << 8)
                                : 0;
    snprintf(want, sizeof(want), "'shape': (%d,)", n);
    CHECK_MSG(raw && strstr(raw + 10, "'<i8'") && strstr(raw + 10, want) &&
                  len == at + 8 * (size_t)n, "%s: %zu bytes", lines, len);
    for (int r = 0; raw && len == at + 8 * (size_t)n && r < n; r++) {
        int64_t v;
        memcpy(&v, raw + at + 8 * (size_t)r, 8);
        CHECK_EQ(v, r + 2); /* the header is line 1 */
    }
    free(raw);

    /* the same file to train on: skipped, said, counted */
    rc = tbt_run(&out, 600, "%s train --data %s --train %s %s --epochs 1 --out %s", t, data, bad,
                 model_flags, run);
    CHECK_MSG(rc == 0, "%s", out);
    snprintf(want, sizeof(want), "tubelet train: %s: skipping 2 of %d rows (1 for their video)",
             bad, n);
    CHECK_STR_HAS(out, want);
    free(out);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *metrics = tbt_read(path, NULL);
    snprintf(want, sizeof(want), "{\"start_step\": 0, \"train_rows\": %d, "
             "\"train_rows_skipped\": 2, \"train_rows_unreadable\": 1, "
             "\"train_rows_clamped\": 0, \"val_rows\": 0, \"val_rows_skipped\": 0, "
             "\"val_rows_clamped\": 0}\n", n - 2);
    CHECK_STR_HAS(metrics, want);
    free(metrics);

    /* ... and as the run's --val: refused before anything is written */
    snprintf(run, sizeof(run), "%s/run_bad_val", d);
    rc = tbt_run(&out, 300, "%s train --data %s --train %s --val %s %s --epochs 1 --out %s", t,
                 data, train_csv, bad, model_flags, run);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "2 of ");
    CHECK_STR_HAS(out, "cannot be scored");
    CHECK_MSG(!tbt_exists(run), "%s was made", run);
    free(out);
}

/* A resume under settings that alter the run is refused, naming each change with its old and
 * new value, and nothing of the run changes; settings that alter nothing (workers, logging)
 * resume; --resume-changed resumes and records the changes in metrics.jsonl. */
static void test_resume_changed(const char *t, const char *d, const char *done_run,
                                const char *common)
{
    tbt_case = "a resume with changed settings";
    char run[4300], path[4400], *out = NULL;
    snprintf(run, sizeof(run), "%s/run_changed", d);
    int rc = tbt_run(&out, 60, "cp -r %s %s", done_run, run);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *before = tbt_read(path, NULL);
    rc = tbt_run(&out, 300, "%s train %s --out %s --batch 8 --lr 0.002 --seed 3", t, common,
                 run);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "was trained with other settings");
    CHECK_STR_HAS(out, "batch 4 -> 8");
    CHECK_STR_HAS(out, "lr 0.001 -> 0.002");
    CHECK_STR_HAS(out, "seed 0 -> 3");
    CHECK_STR_HAS(out, "--resume-changed");
    free(out);
    char *now = tbt_read(path, NULL);
    CHECK_MSG(before && now && !strcmp(before, now), "a refused resume changed metrics.jsonl");
    free(now);
    free(before);
    /* workers and logging alter nothing: resumed (the run is complete: nothing to do) */
    rc = tbt_run(&out, 300, "%s train %s --out %s --workers 1 --log-every 5", t, common, run);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    /* one more epoch, asked for: resumed, the change said and recorded */
    rc = tbt_run(&out, 300, "%s train %s --out %s --epochs 41 --resume-changed", t, common, run);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "resuming with changed settings or data: epochs 40 -> 41");
    free(out);
    now = tbt_read(path, NULL);
    CHECK_STR_HAS(now, "\"resume_changed\": \"epochs 40 -> 41\"}");
    CHECK_STR_HAS(now, "{\"eval_epoch\": 41, ");
    free(now);
}

/* Writes src's header and its rows from..to (0-based, to exclusive) to dst; with retext, the
 * first row written gets "then " before its narration (the 9th column). */
static void copy_rows(const char *src, const char *dst, int from, int to, int retext)
{
    char *text = tbt_read(src, NULL);
    FILE *f = fopen(dst, "w");
    CHECK(text && f);
    int row = -1;
    for (char *line = text; f && line && *line; row++) {
        char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) + 1 : strlen(line), cut = 0;
        if (row >= 0 && (row < from || row >= to)) {
            line = eol ? eol + 1 : NULL;
            continue;
        }
        for (int commas = 0; retext && row == from && cut < n && commas < 8; cut++)
            commas += line[cut] == ',';
        fwrite(line, 1, cut, f);
        fprintf(f, "%s%.*s", cut ? "then " : "", (int)(n - cut), line + cut);
        line = eol ? eol + 1 : NULL;
    }
    if (f)
        fclose(f);
    free(text);
}

/* The "epoch" of a checkpoint's metadata, or -1. */
static int ckpt_epoch(const char *path)
{
    struct tb_st_file *f = NULL;
    int epoch = -1;
    if (tb_st_read(&f, path) == 0 && f->metadata) {
        const char *e = strstr(f->metadata, "\"epoch\":\"");
        epoch = e ? atoi(e + 9) : -1;
    }
    tb_st_free(&f);
    return epoch;
}

/* AVION's checkpoints: best.safetensors is the first evaluation of the highest top-1, also
 * across a resume (the epochs after it run at lr 0, so they tie the epoch before and must not
 * take its place); checkpoint_EPOCH every --save-every epochs. */
static void test_best_and_every(const char *t, const char *d)
{
    tbt_case = "best.safetensors and --save-every";
    char run[4300], common[9000], path[4500], *out = NULL;
    snprintf(run, sizeof(run), "%s/run_best", d);
    snprintf(common, sizeof(common), "--data %s --train %s --val %s %s --eval-every 1 "
             "--save-every 2 --warmup-epochs 0 --lr 0.01 --out %s", data, train_csv, val_csv,
             model_flags, run);
    int rc = tbt_run(&out, 300, "%s train %s --epochs 3", t, common);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    rc = tbt_run(&out, 300, "%s train %s --epochs 6 --lr 0 --resume-changed", t, common);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *m = tbt_read(path, NULL);
    double top = -1;
    int first = 0, n = 0;
    for (const char *p = m; p && (p = strstr(p, "{\"eval_epoch\": ")); p++, n++) {
        int e = atoi(p + 15);
        const char *v = strstr(p, "\"top1\": ");
        double x = v ? strtod(v + 8, NULL) : -1;
        if (x > top) {
            top = x;
            first = e;
        }
    }
    free(m);
    CHECK_MSG(n == 6 && first >= 1 && first <= 3, "%d evaluations, the best first at %d", n,
              first);
    snprintf(path, sizeof(path), "%s/best.safetensors", run);
    CHECK_EQ(ckpt_epoch(path), first);
    for (int e = 1; e <= 6; e++) {
        snprintf(path, sizeof(path), "%s/checkpoint_%05d.safetensors", run, e);
        CHECK_MSG(tbt_exists(path) == (e % 2 == 0), "%s: %s", path,
                  tbt_exists(path) ? "there" : "missing");
        if (e % 2 == 0)
            CHECK_EQ(ckpt_epoch(path), e);
    }
}

/* Issue 42's S4: a resume on changed data (rows added, rows dropped, a row's content, the
 * validation set) is refused like a changed setting, naming the rows before and after;
 * --resume-changed resumes and records it. */
static void test_resume_data(const char *t, const char *d)
{
    tbt_case = "a resume on changed data";
    char csv[4300], vcsv[4300], run[4300], common[9000], path[4400], *out = NULL;
    snprintf(csv, sizeof(csv), "%s/changing.csv", d);
    snprintf(vcsv, sizeof(vcsv), "%s/changing_val.csv", d);
    snprintf(run, sizeof(run), "%s/run_data", d);
    copy_rows(train_csv, csv, 0, 14, 0);
    copy_rows(val_csv, vcsv, 0, 1000, 0);
    snprintf(common, sizeof(common), "--data %s --train %s --val %s %s --epochs 1 --out %s",
             data, csv, vcsv, model_flags, run);
    int rc = tbt_run(&out, 300, "%s train %s", t, common);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *before = tbt_read(path, NULL);
    static const struct {
        int from, to, retext;
        const char *says;
    } changes[] = {
        {0, 18, 0, "data train 14 rows "},   /* rows added (the 102 -> 122) */
        {3, 14, 0, "data train 14 rows "},   /* rows dropped */
        {0, 14, 1, "data train 14 rows "},   /* as many rows, one narration changed */
    };
    for (int k = 0; k < 3; k++) {
        copy_rows(train_csv, csv, changes[k].from, changes[k].to, changes[k].retext);
        rc = tbt_run(&out, 300, "%s train %s", t, common);
        CHECK_MSG(rc == 1, "change %d: %s", k, out);
        CHECK_STR_HAS(out, "was trained with other settings or data");
        CHECK_STR_HAS(out, changes[k].says);
        char want[64];
        snprintf(want, sizeof(want), " -> train %d rows ", changes[k].to - changes[k].from);
        CHECK_STR_HAS(out, want);
        free(out);
    }
    char *now = tbt_read(path, NULL);
    CHECK_MSG(before && now && !strcmp(before, now), "a refused resume changed metrics.jsonl");
    free(now);
    free(before);
    /* the validation set too (a classifier's classes are numbered over both) */
    copy_rows(train_csv, csv, 0, 14, 0);
    copy_rows(val_csv, vcsv, 1, 1000, 0);
    rc = tbt_run(&out, 300, "%s train %s", t, common);
    CHECK_MSG(rc == 1, "%s", out);
    CHECK_STR_HAS(out, "; val ");
    free(out);
    /* the run's own data again: resumed (complete: nothing to do) */
    copy_rows(val_csv, vcsv, 0, 1000, 0);
    rc = tbt_run(&out, 300, "%s train %s", t, common);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    /* asked for: resumed on grown data, the change said and recorded */
    copy_rows(train_csv, csv, 0, 18, 0);
    rc = tbt_run(&out, 300, "%s train %s --resume-changed", t, common);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "resuming with changed settings or data: data train 14 rows ");
    free(out);
    now = tbt_read(path, NULL);
    CHECK_STR_HAS(now, "\"resume_changed\": \"data train 14 rows ");
    free(now);
}

int main(void)
{
    tbt_begin("train");
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char *out = NULL;
    snprintf(data, sizeof(data), "%s/data", d);
    snprintf(train_csv, sizeof(train_csv), "%s/syn/annotations/EPIC_100_train.csv", d);
    snprintf(val_csv, sizeof(val_csv), "%s/syn/annotations/EPIC_100_validation.csv", d);
    int rc = tbt_run(&out, 300, "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s --short-side 48 --preset veryfast",
                     t, d, t, d, data);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    tbt_case = "uninterrupted run";
    char run_a[4300], run_b[4300], common[2048];
    snprintf(run_a, sizeof(run_a), "%s/run_a", d);
    snprintf(run_b, sizeof(run_b), "%s/run_b", d);
    snprintf(common, sizeof(common), "--data %s --train %s --val %s %s --epochs 40", data,
             train_csv, val_csv, model_flags);
    /* Under the loader's log: training on the CPU (--device auto on a machine with no GPU
     * driver, or cpu) maps no CUDA library. */
    char ld_log[4400], cuda_libs[512];
    snprintf(ld_log, sizeof(ld_log), "%s/ld-train", d);
    rc = tbt_run(&out, 600, "LD_DEBUG=files LD_DEBUG_OUTPUT=%s %s train %s --out %s", ld_log, t,
                 common, run_a);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_MSG(tbt_cuda_libs_mapped(ld_log, cuda_libs, sizeof(cuda_libs)) > 0 && !cuda_libs[0],
              "a CPU training run mapped CUDA libraries: %s", cuda_libs);
    CHECK_STR_HAS(out, "validation top-1");
    char *top1 = out ? strstr(out, "top-1 ") : NULL;
    double run_top1 = top1 ? atof(top1 + 6) : -1;
    free(out);
    static double la[4096], lb[4096];
    char path0[4400];
    int na = read_losses(run_a, la, 4096);
    CHECK_MSG(na > 6, "only %d steps logged", na);

    /* A verb classifier scored against noun labels: refused, naming both (the class counts
     * of this data would fit); with its own label kind, or none given, it is scored. */
    tbt_case = "eval: the checkpoint's label kind";
    rc = tbt_run(&out, 120, "%s eval --ckpt %s/last.safetensors --data %s --val %s --label noun",
                 t, run_a, data, val_csv);
    CHECK_MSG(rc == 1 && out && strstr(out, "--label noun, but ") &&
              strstr(out, "is a verb classifier (trained with --label verb)"), "%s", out);
    free(out);
    rc = tbt_run(&out, 120, "%s eval --ckpt %s/last.safetensors --data %s --val %s --label verb",
                 t, run_a, data, val_csv);
    CHECK_MSG(rc == 0 && out && strstr(out, "\"top1\""), "%s", out);
    free(out);
    /* a dual encoder's outputs, or the action list, asked of a verb classifier: refused */
    rc = tbt_run(&out, 120, "%s eval --ckpt %s/last.safetensors --data %s --val %s "
                 "--similarity %s/sim.npy", t, run_a, data, val_csv, d);
    CHECK_MSG(rc == 2 && out && strstr(out, "is a --task cls checkpoint, and only --task clip's "
                                             "read it"), "%s", out);
    free(out);
    rc = tbt_run(&out, 120, "%s eval --ckpt %s/last.safetensors --data %s --val %s --train %s",
                 t, run_a, data, val_csv, train_csv);
    CHECK_MSG(rc == 2 && out && strstr(out, "would be ignored: it numbers the actions of --label "
                                             "action, and this is --label verb"), "%s", out);
    free(out);

    snprintf(path0, sizeof(path0), "%s/last.safetensors", run_a);
    test_bad_rows(t, d, path0);
    test_settings(t, path0);

    tbt_case = "interrupted and resumed run";
    /* Ctrl-C once a few steps are logged; then the same command again. */
    rc = tbt_run(&out, 600, "%s train %s --out %s > %s/b1.log 2>&1 & pid=$!; "
                 "while [ \"$(cat %s/metrics.jsonl 2>/dev/null | grep -c step)\" -lt 3 ]; do "
                 "kill -0 $pid 2>/dev/null || exit 3; sleep 0.01; done; kill -INT $pid; "
                 "wait $pid; echo status=$?; cat %s/b1.log", t, common, run_b, d, run_b, d);
    CHECK_STR_HAS(out, "status=1");
    CHECK_STR_HAS(out, "run the same command to resume");
    free(out);
    int interrupted_at = read_losses(run_b, lb, 4096);
    CHECK_MSG(interrupted_at >= 3 && interrupted_at < na, "interrupted after %d of %d steps",
              interrupted_at, na);
    rc = tbt_run(&out, 600, "%s train %s --out %s", t, common, run_b);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "resuming from");
    free(out);
    int nb = read_losses(run_b, lb, 4096);
    CHECK_EQ(nb, na);
    for (int i = 0; i < na && i < nb; i++)
        CHECK_MSG(la[i] == lb[i], "step %d: loss %.6f uninterrupted, %.6f resumed (interrupted "
                  "after step %d)", i + 1, la[i], lb[i], interrupted_at);

    tbt_case = "run directory";
    char path[4400];
    snprintf(path, sizeof(path), "%s/config.txt", run_a);
    char *cfg = tbt_read(path, NULL);
    CHECK_STR_HAS(cfg, "\nepochs = 40 ");
    CHECK_STR_HAS(cfg, "\ndim = 32 ");
    /* A refused resume (another width or depth than the checkpoint's) leaves the run
     * directory as it was: config.txt still the run's own, byte for byte, and metrics.jsonl
     * too. */
    tbt_case = "a refused resume changes nothing";
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run_a);
    char *metrics_before = tbt_read(path, NULL);
    const char *bad[2] = {"--dim 48", "--depth 3"};
    for (int k = 0; k < 2; k++) {
        rc = tbt_run(&out, 300, "%s train %s %s --out %s", t, common, bad[k], run_a);
        CHECK_MSG(rc != 0, "%s was accepted: %s", bad[k], out);
        free(out);
        snprintf(path, sizeof(path), "%s/config.txt", run_a);
        char *now = tbt_read(path, NULL);
        CHECK_MSG(cfg && now && !strcmp(cfg, now), "%s rewrote config.txt:\n%s", bad[k], now);
        free(now);
        snprintf(path, sizeof(path), "%s/metrics.jsonl", run_a);
        now = tbt_read(path, NULL);
        CHECK_MSG(metrics_before && now && !strcmp(metrics_before, now), "%s changed "
                  "metrics.jsonl", bad[k]);
        free(now);
    }
    free(metrics_before);
    free(cfg);
    test_resume_changed(t, d, run_a, common);
    test_resume_data(t, d);
    test_best_and_every(t, d);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run_a);
    char *metrics = tbt_read(path, NULL);
    CHECK_STR_HAS(metrics, "{\"eval_epoch\": 40, \"top1\": ");
    free(metrics);

    tbt_case = "eval";
    char pred[4400], npy[4400];
    snprintf(pred, sizeof(pred), "%s/pred.csv", d);
    snprintf(npy, sizeof(npy), "%s/scores.npy", d);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --batch 4 "
                 "--predictions %s --scores %s", t, run_a, data, val_csv, pred, npy);
    CHECK_MSG(rc == 0, "%s", out);
    char *e = out ? strstr(out, "\"top1\": ") : NULL;
    CHECK_MSG(e && fabs(100 * atof(e + 8) - run_top1) < 0.01, "eval top-1 %s vs the run's %.2f",
              e ? e : "(none)", run_top1);
    double eval_top1 = e ? atof(e + 8) : -1;
    free(out);
    /* The predictions file: one row per validation item, its label from the CSV, and a top-1
     * share equal to the reported top-1; the scores file: each item's
     * averaged probabilities, summing to 1, their first largest the predicted class with the
     * probability the CSV gives. */
    struct tbi_npy h;
    float *sc = NULL;
    CHECK_EQ(tbi_npy_open(&h, npy), 0);
    int K = h.f && h.n_dims == 2 ? (int)h.shape[1] : 0;
    if (K > 0 && (sc = malloc(sizeof(float) * (size_t)h.n)))
        CHECK_EQ(tbi_npy_read_f32(&h, npy, sc), 0);
    tbi_npy_close(&h);
    struct tb_annotations *va = NULL;
    struct tb_ann_opts vo = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&va, val_csv, &vo), 0);
    char *pc = tbt_read(pred, NULL);
    CHECK(pc && !strncmp(pc, "line,label,predicted,probability\n", 33));
    int rows = 0, right = 0, labels_ok = 1, scores_ok = sc != NULL;
    for (char *ln = pc ? strchr(pc, '\n') : NULL; ln && ln[1]; ln = strchr(ln + 1, '\n')) {
        int line, y, p;
        double prob;
        if (sscanf(ln + 1, "%d,%d,%d,%lf", &line, &y, &p, &prob) != 4 || !va ||
            rows >= va->n_items || !sc || rows >= h.shape[0])
            break;
        labels_ok &= line == va->items[rows].line && y == va->items[rows].verb;
        right += y == p;
        const float *row = sc + (size_t)rows * K;
        double sum = 0;
        int best = 0;
        for (int q = 0; q < K; q++) {
            sum += row[q];
            best = row[q] > row[best] ? q : best;
        }
        scores_ok &= fabs(sum - 1) < 1e-5 && best == p && fabs(row[best] - prob) < 1e-6;
        rows++;
    }
    CHECK_MSG(va && rows == va->n_items && sc && h.shape[0] == va->n_items,
              "%d prediction rows, %lld score rows", rows, sc ? (long long)h.shape[0] : -1LL);
    CHECK(labels_ok);
    CHECK(scores_ok);
    CHECK_MSG(rows && fabs((double)right / rows - eval_top1) < 1e-4, "predictions give %.2f%%, "
              "the evaluation %.2f%%", rows ? 100.0 * right / rows : 0, 100 * eval_top1);
    free(sc);
    free(pc);
    tb_ann_free(&va);

    tbt_case = "a loss that is not finite";
    /* A checkpoint with a NaN weight, set back to the start of training. */
    char run_c[4300], src[4400], dst[4400];
    snprintf(run_c, sizeof(run_c), "%s/run_c", d);
    snprintf(src, sizeof(src), "%s/last.safetensors", run_a);
    snprintf(dst, sizeof(dst), "%s/last.safetensors", run_c);
    nan_head_copy(run_a, run_c, "40");
    rc = tbt_run(&out, 300, "%s train %s --out %s", t, common, run_c);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "the loss is nan at step 161 (epoch 1, batch 1); stopping");
    free(out);
    /* The flag is read once per log interval: four more steps run (their updates skipped on
     * the backend), and the error still names the first step; nothing was saved. */
    tbt_case = "a loss that is not finite, read 4 steps later";
    char run_c5[4400], ck5[4500];
    snprintf(run_c5, sizeof(run_c5), "%s/run_c5", d);
    snprintf(ck5, sizeof(ck5), "%s/last.safetensors", run_c5);
    nan_head_copy(run_a, run_c5, "40");
    size_t n_before = 0, n_after = 0;
    char *before = tbt_read(ck5, &n_before);
    rc = tbt_run(&out, 300, "%s train %s --log-every 5 --out %s", t, common, run_c5);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "the loss is nan at step 161 (epoch 1, batch 1); stopping");
    free(out);
    char *after = tbt_read(ck5, &n_after);
    CHECK_MSG(before && after && n_before == n_after && !memcmp(before, after, n_before),
              "%s changed", ck5);
    free(before);
    free(after);

    tbt_case = "eval of a NaN model";
    rc = tbt_run(&out, 300, "%s eval --ckpt %s --data %s --val %s --batch 4", t, dst, data,
                 val_csv);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "has a logit that is nan: the model is broken");
    CHECK_STR_HAS(out, "EPIC_100_validation.csv:");
    free(out);

    tbt_case = "eval of a zeroed head";
    char zero[4400];
    struct tb_st_file *f = NULL;
    snprintf(zero, sizeof(zero), "%s/zero.safetensors", d);
    CHECK_EQ(tb_st_read(&f, src), 0);
    if (f) {
        for (int i = 0; i < f->n_tensors; i++)
            if (!strncmp(f->tensors[i].name, "head.", 5))
                memset(f->tensors[i].data, 0, sizeof(float) * (size_t)f->tensors[i].n);
        CHECK_EQ(tb_st_write(zero, f->tensors, f->n_tensors, f->metadata), 0);
        tb_st_free(&f);
    }
    rc = tbt_run(&out, 300, "%s eval --ckpt %s --data %s --val %s --batch 4", t, zero, data,
                 val_csv);
    CHECK_MSG(rc == 0, "%s", out);
    int n_val = 0, n_zero = 0, n_low = 0;
    CHECK_EQ(tb_ann_load(&va, val_csv, &vo), 0);
    for (int i = 0; va && i < va->n_items; i++) {
        n_val++;
        n_zero += va->items[i].verb == 0;
        n_low += va->items[i].verb < 5;
    }
    tb_ann_free(&va);
    e = out ? strstr(out, "\"top1\": ") : NULL;
    char *e5 = out ? strstr(out, "\"top5\": ") : NULL;
    CHECK_MSG(e && n_val && fabs(atof(e + 8) - (double)n_zero / n_val) < 1e-4,
              "top-1 %s, but only the %d of %d items of class 0 may count", e ? e : "(none)",
              n_zero, n_val);
    CHECK_MSG(e5 && n_val && fabs(atof(e5 + 8) - (double)n_low / n_val) < 1e-4,
              "top-5 %s, but only the %d of %d items of classes 0-4 may count",
              e5 ? e5 : "(none)", n_low, n_val);
    CHECK_MSG(n_zero < n_val, "every validation item is of class 0: the check proves nothing");
    free(out);

    tbt_case = "eval makes clips as the run did";
    char run_d[4300], dense[2048];
    snprintf(run_d, sizeof(run_d), "%s/run_d", d);
    snprintf(dense, sizeof(dense), "--data %s --train %s --val %s %s --epochs 3 --sampler dense "
             "--stride 3 --norm imagenet --val-views 2", data, train_csv, val_csv, model_flags);
    rc = tbt_run(&out, 600, "%s train %s --out %s", t, dense, run_d);
    CHECK_MSG(rc == 0, "%s", out);
    top1 = out ? strstr(out, "top-1 ") : NULL;
    double dense_top1 = top1 ? atof(top1 + 6) : -1;
    char *loss_d = NULL;
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run_d);
    metrics = tbt_read(path, NULL);
    loss_d = metrics ? strstr(metrics, "\"val_loss\": ") : NULL;
    double run_loss = loss_d ? atof(loss_d + 12) : -1;
    free(metrics);
    free(out);
    rc = tbt_run(&out, 300, "%s eval --ckpt %s/last.safetensors --data %s --val %s --batch 4 "
                 "--views 2", t, run_d, data, val_csv);
    CHECK_MSG(rc == 0, "%s", out);
    e = out ? strstr(out, "\"top1\": ") : NULL;
    char *el = out ? strstr(out, "\"loss\": ") : NULL;
    CHECK_MSG(e && fabs(100 * atof(e + 8) - dense_top1) < 0.01, "eval top-1 %s vs the run's "
              "%.2f", e ? e : "(none)", dense_top1);
    CHECK_MSG(el && fabs(atof(el + 8) - run_loss) < 1e-5, "eval loss %s vs the run's %.6f",
              el ? el : "(none)", run_loss);
    free(out);

    tbt_case = "the guarded backend";
    char run_g[4300], run_p[4300], gcommon[2048];
    snprintf(run_g, sizeof(run_g), "%s/run_g", d);
    snprintf(run_p, sizeof(run_p), "%s/run_p", d);
    snprintf(gcommon, sizeof(gcommon), "--data %s --train %s --val %s %s --epochs 2", data,
             train_csv, val_csv, model_flags);
    rc = tbt_run(&out, 600, "%s train %s --out %s", t, gcommon, run_p);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    rc = tbt_run(&out, 600, "%s train %s --backend cpu-guarded --out %s", t, gcommon, run_g);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    static double lp[4096], lg[4096];
    int np_ = read_losses(run_p, lp, 4096), ng = read_losses(run_g, lg, 4096);
    CHECK_MSG(np_ > 3 && np_ == ng, "%d steps plain, %d guarded", np_, ng);
    for (int i = 0; i < np_ && i < ng; i++)
        CHECK_MSG(lp[i] == lg[i], "step %d: loss %.6f plain, %.6f guarded", i + 1, lp[i], lg[i]);
    struct tb_st_file *fp = NULL, *fg = NULL;
    snprintf(src, sizeof(src), "%s/last.safetensors", run_p);
    snprintf(dst, sizeof(dst), "%s/last.safetensors", run_g);
    CHECK_EQ(tb_st_read(&fp, src), 0);
    CHECK_EQ(tb_st_read(&fg, dst), 0);
    for (int i = 0; fp && fg && i < fp->n_tensors; i++) {
        const struct tb_st_tensor *a = &fp->tensors[i], *b = tb_st_find(fg, a->name);
        CHECK_MSG(b && b->n == a->n && !memcmp(a->data, b->data, sizeof(float) * (size_t)a->n),
                  "%s differs between the backends", a->name);
    }
    tb_st_free(&fp);
    tb_st_free(&fg);
    test_augment(t, d);
    test_action(t, d);
    test_mae(t, d);
    test_clip(t, d);
    test_fused(t, d);
    test_accum(t, d);
    TBT_EXIT();
}

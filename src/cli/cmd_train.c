/* src/cli/cmd_train.c - `tubelet train --task cls|mae` and `tubelet eval`: the CLI around
 * tb_train (the training loop, --task) / tb_eval_cls: flags, the run directory's config.txt,
 * a progress bar on a terminal (plain lines otherwise), Ctrl-C. Tests: tests/test_train.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tubelet/dist.h"
#include "tubelet/safetensors.h"
#include "tubelet/train.h"
#include "train/settings.h"

struct train_config {
    char *task, *data, *train, *val, *format, *val_format, *label, *out, *ext;
    int dim, depth, heads, patch, tubelet, frames, input_size, classes;
    char *pool, *pos, *sampler, *norm, *device, *backend, *precision;
    const char *use_backend; /* --device and --backend resolved (cli_device) */
    int stride, epochs, batch, workers, prefetch, seed, eval_every, val_views, val_crops;
    int log_every, flip, recompute, recompute_mlp, tensorboard, fused_update, accum_steps, zero;
    int skip_bad_rows, resume_changed, save_every;
    double lr, min_lr, warmup_epochs, wd, smoothing, clip_grad, scale_min, beta1, beta2, eps;
    char *optim, *crop, *decoder_mask, *init, *qv_bias;
    double layer_decay, drop_path, head_init_scale;
    double mixup, cutmix, mixup_prob, mixup_switch_prob, head_dropout, random_erase;
    char *erase_mode, *cls_backbone, *inflate_temporal;
    char *rand_augment;
    double blr, warmup_lr, mask_ratio, decoder_ratio;
    int dec_dim, dec_depth, dec_heads, norm_target;
    int embed, ctx, text_width, text_heads, text_depth;
    double temperature, margin, relevant_captions;
    char *class_names, *prompt, *relevancy, *loss, *train_relevancy, *train_sentences;
    int learn_temperature;
    struct tb_ckpt_info set; /* the settings chosen by flag (train/settings.h) */
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct train_config, field, def, meta, help, __VA_ARGS__)
#define SETTING(...) CLI_SETTING(struct train_config, __VA_ARGS__),
static const struct cli_flag train_flags[] = {
    F("task", CLI_STR, task, "cls", "cls|mae|clip",
      "cls (supervised classification), mae (VideoMAE "
      "pretraining) or clip (video-text contrastive pretraining on narrations)",
      CLI_NO_RANGE),
    F("device", CLI_STR, device, "auto", "cpu|cuda|auto", CLI_DEVICE_HELP, CLI_NO_RANGE),
    F("backend", CLI_STR, backend, "", "NAME", CLI_BACKEND_HELP, CLI_NO_RANGE),
    F("precision", CLI_STR, precision, "auto", "auto|fp32|bf16", CLI_PRECISION_HELP, CLI_NO_RANGE),
    F("data", CLI_STR, data, NULL, "DIR", "prepared videos (tubelet prep --out)", CLI_NO_RANGE),
    F("ext", CLI_STR, ext, "mp4", "EXT", "prepared videos' suffix", CLI_NO_RANGE),
    F("train", CLI_STR, train, NULL, "FILE", "training annotations", CLI_NO_RANGE),
    F("val", CLI_STR, val, "", "FILE", "validation annotations", CLI_NO_RANGE),
    F("format", CLI_STR, format, "epic", "epic|kinetics|narration", "epic, kinetics or narration",
      CLI_NO_RANGE),
    F("val-format", CLI_STR, val_format, "", "epic|kinetics|narration",
      "--val's format, when it differs (clip: "
      "narration pretraining scored on EPIC CSVs); default: --format's",
      CLI_NO_RANGE),
    F("label", CLI_STR, label, "verb", "verb|noun|action",
      "the class to learn: verb, noun or action", CLI_NO_RANGE),
    F("out", CLI_STR, out, NULL, "DIR", "run directory: config, checkpoints, metrics.jsonl",
      CLI_NO_RANGE),
    F("dim", CLI_INT, dim, "192", "D", "width (ViT-T 192, -S 384, -B 768)", 8, 65536),
    F("depth", CLI_INT, depth, "12", "L", "blocks", 1, 1024),
    F("heads", CLI_INT, heads, "3", "NH", "attention heads", 1, 1024),
    F("patch", CLI_INT, patch, "16", "P", "patch size", 1, 1024),
    F("tubelet", CLI_INT, tubelet, "0", "TU",
      "frames per patch (0: 2; clip: 1, AVION's "
      "per-frame patches)",
      0, 64),
    F("frames", CLI_INT, frames, "16", "T", "frames per clip", 1, 1024),
    F("size", CLI_INT, input_size, "224", "PX", "clip frame size (square: PX x PX)", 8, 4096),
    F("classes", CLI_INT, classes, "0", "K", "classes; 0: the largest label + 1", 0, 1000000),
    F("pool", CLI_STR, pool, "mean", "mean|cls", "mean (fc_norm) or cls", CLI_NO_RANGE),
    F("pos", CLI_STR, pos, "sincos", "sincos|learned", "sincos or learned positions", CLI_NO_RANGE),
    TBI_SETTING_FLAGS(SETTING)
    F("sampler", CLI_STR, sampler, "auto", "auto|segments|dense|dense-jitter",
      "segments (AVION), dense (VideoMAE), dense-jitter (AVION's VideoMAE pretraining: each "
      "frame moved within its stride) or auto (cls: segments, mae: dense)",
      CLI_NO_RANGE),
    F("crop-mode", CLI_STR, crop, "auto", "auto|rrc|multiscale",
      "rrc (random resized crop), multiscale "
      "(VideoMAE's) or auto (cls: rrc, mae: multiscale)",
      CLI_NO_RANGE),
    F("stride", CLI_INT, stride, "4", "N", "frame stride of dense sampling", 1, 1000),
    F("norm", CLI_STR, norm, "openai", "openai|imagenet",
      "normalisation: openai (AVION's, CLIP's) or "
      "imagenet",
      CLI_NO_RANGE),
    F("scale-min", CLI_DOUBLE, scale_min, "0.5", "S", "random resized crop: smallest area", 0.01,
      1),
    F("flip", CLI_BOOL, flip, "true", "",
      "random horizontal flips (off when left/right "
      "matters)",
      CLI_NO_RANGE),
    F("recompute", CLI_BOOL, recompute, "false", "",
      "keep only block inputs; the backward "
      "reruns each block's forward (less memory, ~1.2x compute)",
      CLI_NO_RANGE),
    F("recompute-mlp", CLI_INT, recompute_mlp, "0", "K",
      "the first K blocks keep no MLP hidden "
      "layer and residual sum (45% of their activations); the backward recomputes them",
      0, 1000000),
    F("epochs", CLI_INT, epochs, "10", "N", "epochs", 1, 1000000),
    F("batch", CLI_INT, batch, "8", "B", "clips per process and micro-batch", 1, 65536),
    F("accum-steps", CLI_INT, accum_steps, "1", "K",
      "micro-batches per optimizer step, their "
      "gradients averaged: a global batch of processes x K x B clips (cls, mae)",
      1, 65536),
    F("lr", CLI_DOUBLE, lr, "0.001", "X", "peak learning rate", 0, 10),
    F("blr", CLI_DOUBLE, blr, "0", "X",
      "base learning rate per 256 clips: when set, the peak "
      "is X * global batch / 256 (VideoMAE's, AVION's rule)",
      0, 10),
    F("warmup-lr", CLI_DOUBLE, warmup_lr, "0", "X", "where the warmup starts (VideoMAE: 1e-6)", 0,
      10),
    F("init", CLI_STR, init, "", "CKPT",
      "fine-tune from these weights: a checkpoint, or a "
      "pretraining one's encoder (--task mae's, VideoMAE's in safetensors); the rest (head, "
      "fc_norm) starts new",
      CLI_NO_RANGE),
    F("qv-bias", CLI_STR, qv_bias, "auto", "auto|true|false",
      "VideoMAE's q/v attention biases: true, false "
      "or auto (as --init's weights have them; mae: always)",
      CLI_NO_RANGE),
    F("layer-decay", CLI_DOUBLE, layer_decay, "1", "X",
      "cls: layer-wise lr decay (VideoMAE "
      "fine-tuning: 0.75; 1: none)",
      0.01, 1),
    F("head-init-scale", CLI_DOUBLE, head_init_scale, "1", "X",
      "cls: the new head's initial "
      "weights times X (VideoMAE fine-tuning's init_scale: 0.001)",
      1e-9, 1000),
    F("drop-path", CLI_DOUBLE, drop_path, "0", "R",
      "cls: stochastic depth, rate R at the top "
      "block (0 at the first; VideoMAE fine-tuning: 0.1), per clip",
      0, 0.99),
    F("mixup", CLI_DOUBLE, mixup, "0", "A",
      "cls: mixup with the batch's reverse (timm's, one "
      "draw per batch), lam ~ Beta(A, A), soft targets with --label-smoothing (AVION, "
      "VideoMAE fine-tuning: 0.8; 0: off)",
      0, 100),
    F("cutmix", CLI_DOUBLE, cutmix, "0", "A",
      "cls: cutmix, lam ~ Beta(A, A), one box through "
      "every frame (AVION, VideoMAE fine-tuning: 1.0; 0: off)",
      0, 100),
    F("mixup-prob", CLI_DOUBLE, mixup_prob, "1", "P", "cls: the share of batches mixed", 0, 1),
    F("mixup-switch-prob", CLI_DOUBLE, mixup_switch_prob, "0.5", "P",
      "cls: with both on, the "
      "share of mixed batches that use cutmix",
      0, 1),
    F("head-dropout", CLI_DOUBLE, head_dropout, "0", "P",
      "cls: dropout before the head, per "
      "clip (AVION's EK-100 classifier: 0.5)",
      0, 0.99),
    F("random-erase", CLI_DOUBLE, random_erase, "0", "P",
      "cls: random erasing (normal noise in "
      "a box), each clip with probability P (VideoMAE fine-tuning: 0.25)",
      0, 1),
    F("erase-mode", CLI_STR, erase_mode, "clip", "clip|frame",
      "cls: clip (one box through the clip: "
      "VideoMAE's cube) or frame (each frame its own: timm's per image)",
      CLI_NO_RANGE),
    F("rand-augment", CLI_STR, rand_augment, "none", "mM-nN",
      "cls: RandAugment on each "
      "training clip after its crop, every frame alike: mM-nN[-mstdS] timm's increasing ops "
      "as VideoMAE applies them, N ops of magnitude M (0-10), noise S (default 0.5; VideoMAE "
      "fine-tuning: m7-n4); pytorchvideo-mM-nN pytorchvideo's on the clip as floats, N "
      "distinct ops, with -pP (each op's probability, 0.5), -mstdS (0.5), -uniform[-float]"
      "[-minK] (AVION's K400 fine-tuning: pytorchvideo-m7-n4); none: off",
      CLI_NO_RANGE),
    F("cls-backbone", CLI_STR, cls_backbone, "vit", "vit|clip",
      "cls: vit (timm's ViT, VideoMAE's "
      "names) or clip (AVION's classifier: the CLIP video tower of a --task clip run, class "
      "token and ln_post, the head on it; --init takes its visual.* weights)",
      CLI_NO_RANGE),
    F("inflate-temporal", CLI_STR, inflate_temporal, "none", "none|bilinear",
      "--init's temporal "
      "embedding of another frame count: none (must fit) or bilinear (AVION's: interpolated "
      "over time, e.g. a 4-frame pretraining fine-tuned at 16)",
      CLI_NO_RANGE),
    F("optim", CLI_STR, optim, "adamw", "adamw|sgd|lion",
      "adamw, sgd (momentum --beta1, coupled decay: "
      "AVION's EK-100 classification) or lion (AVION's for MAE: lr ~1/10, "
      "wd ~10x AdamW's)",
      CLI_NO_RANGE),
    F("min-lr", CLI_DOUBLE, min_lr, "1e-06", "X", "learning rate at the end of the cosine", 0, 10),
    F("warmup-epochs", CLI_DOUBLE, warmup_epochs, "1", "N", "linear warmup", 0, 1000000),
    F("wd", CLI_DOUBLE, wd, "0.05", "Y", "weight decay", 0, 10),
    F("beta1", CLI_DOUBLE, beta1, "0.9", "B1", "AdamW / Lion beta1; SGD's momentum", 0, 0.999999),
    F("beta2", CLI_DOUBLE, beta2, "0.999", "B2", "AdamW / Lion beta2 (VideoMAE, AVION: 0.95)", 0,
      0.999999),
    F("eps", CLI_DOUBLE, eps, "1e-08", "E", "AdamW epsilon", 1e-30, 1),
    F("label-smoothing", CLI_DOUBLE, smoothing, "0.1", "Z", "label smoothing", 0, 1),
    F("clip-grad", CLI_DOUBLE, clip_grad, "1", "N", "gradient norm limit (0: none)", 0, 1e9),
    F("fused-update", CLI_BOOL, fused_update, "false", "",
      "apply each gradient span's update "
      "as soon as the backward completes it: the gradients take one span's memory, not the "
      "parameters' (needs --clip-grad 0: no global norm to clip by)",
      CLI_NO_RANGE),
    F("zero", CLI_BOOL, zero, "false", "",
      "with several processes, each updates its share of "
      "the parameters and holds only their optimizer state, then sends the weights to the "
      "others (AVION's --use-zero, ZeRO stage 1); checkpoints stay whole",
      CLI_NO_RANGE),
    F("workers", CLI_INT, workers, "2", "N", "decoding threads", 1, 256),
    F("prefetch", CLI_INT, prefetch, "2", "N", "batches decoded ahead", 0, 64),
    F("seed", CLI_INT, seed, "0", "K", "random seed", 0, 2147483647),
    F("eval-every", CLI_INT, eval_every, "1", "N", "epochs between evaluations (0: at the end)", 0,
      1000000),
    F("val-views", CLI_INT, val_views, "1", "N", "temporal views per validation clip", 1, 64),
    F("val-crops", CLI_INT, val_crops, "1", "N", "spatial crops per view: 1 or 3", 1, 3),
    F("log-every", CLI_INT, log_every, "10", "N", "steps between metrics lines", 1, 1000000),
    F("save-every", CLI_INT, save_every, "0", "N",
      "also keep DIR/checkpoint_EPOCH.safetensors "
      "every N epochs (AVION's --save-freq; 0: none); every run keeps last.safetensors, and "
      "best.safetensors of its best evaluation (retrieval's mean mAP, else top-1)",
      0, 1000000),
    F("tensorboard", CLI_BOOL, tensorboard, "false", "",
      "also write metrics.jsonl's numbers "
      "as TensorBoard scalars (DIR/events.out.tfevents.*)",
      CLI_NO_RANGE),
    F("mask-ratio", CLI_DOUBLE, mask_ratio, "0.9", "R",
      "mae: tube masking's share of each "
      "frame's positions",
      0, 1),
    F("decoder-mask", CLI_STR, decoder_mask, "none", "none|running-cell",
      "mae: none, or running-cell "
      "(VideoMAE v2: the decoder decodes half the tokens)",
      CLI_NO_RANGE),
    F("decoder-ratio", CLI_DOUBLE, decoder_ratio, "0.5", "R",
      "mae: the running cell's dropped "
      "share",
      0, 1),
    F("dec-dim", CLI_INT, dec_dim, "384", "D", "mae: decoder width", 8, 65536),
    F("dec-depth", CLI_INT, dec_depth, "4", "L", "mae: decoder blocks", 1, 1024),
    F("dec-heads", CLI_INT, dec_heads, "6", "NH", "mae: decoder heads", 1, 1024),
    F("norm-target", CLI_BOOL, norm_target, "true", "",
      "mae: each tube's pixels normalised "
      "per channel (VideoMAE's target)",
      CLI_NO_RANGE),
    F("embed", CLI_INT, embed, "256", "E", "clip: the towers' projection width (LaViLa: 256)", 1,
      65536),
    F("context", CLI_INT, ctx, "77", "N", "clip: tokens a caption (longer ones are cut)", 2, 4096),
    F("text-width", CLI_INT, text_width, "512", "D", "clip: text tower width", 8, 65536),
    F("text-heads", CLI_INT, text_heads, "8", "NH", "clip: text tower heads", 1, 1024),
    F("text-depth", CLI_INT, text_depth, "12", "L", "clip: text tower blocks", 1, 1024),
    F("temperature", CLI_DOUBLE, temperature, "0.07", "X",
      "clip: InfoNCE's temperature "
      "(frozen)",
      1e-4, 100),
    F("learn-temperature", CLI_BOOL, learn_temperature, "false", "",
      "clip: learn CLIP's "
      "logit_scale (from --temperature, clamped at 100), as AVION's pretraining does by "
      "default; else it stays frozen",
      CLI_NO_RANGE),
    F("loss", CLI_STR, loss, "infonce", "infonce|max-margin",
      "clip: infonce (LaViLa's pretraining) or "
      "max-margin (AVION's EK-100 MIR fine-tuning)",
      CLI_NO_RANGE),
    F("margin", CLI_DOUBLE, margin, "0.2", "M", "clip: the max-margin loss's margin", 0, 10),
    F("class-names", CLI_STR, class_names, "", "FILE",
      "clip: a classes CSV (id,key,...: "
      "EPIC_100_verb_classes.csv) for zero-shot classification of --label at evaluation",
      CLI_NO_RANGE),
    F("prompt", CLI_STR, prompt, "{}", "TEXT", "clip: the zero-shot prompt, {} the class name",
      CLI_NO_RANGE),
    F("relevancy", CLI_STR, relevancy, "", "FILE.npy",
      "clip: the validation split's relevancy "
      "(default: computed from its verb and noun classes, as EK-100's)",
      CLI_NO_RANGE),
    F("relevant-captions", CLI_DOUBLE, relevant_captions, "0", "X",
      "clip: train each clip on "
      "a sentence of the training split drawn among those of relevancy above X with it, not on "
      "its own narration (AVION's EK-100 MIR fine-tuning: 0.1); 0: off",
      0, 1),
    F("train-relevancy", CLI_STR, train_relevancy, "", "FILE",
      "clip: --relevant-captions' "
      "relevancy, (train clips, sentences), as .npy or AVION's pickle (caption_relevancy_EPIC_"
      "100_retrieval_train.pkl) (default: computed from the verb and noun classes)",
      CLI_NO_RANGE),
    F("train-sentences", CLI_STR, train_sentences, "", "FILE",
      "clip: --relevant-captions' "
      "sentences in their order, the relevancy's columns: a CSV naming a clip of --train per "
      "row by narration_id (EPIC_100_retrieval_train_sentence.csv; default: built from --train "
      "as EK-100 builds it)",
      CLI_NO_RANGE),
    F("skip-bad-rows", CLI_BOOL, skip_bad_rows, "false", "",
      "evaluate --val without its rows "
      "that make no clip (unparsable, video missing or unreadable, window outside it) rather "
      "than refuse it; --train's are always skipped, counted in metrics.jsonl",
      CLI_NO_RANGE),
    F("resume-changed", CLI_BOOL, resume_changed, "false", "",
      "resume a run with settings "
      "that alter its data order, schedule or model (refused without it, each change named); "
      "the changes are recorded in metrics.jsonl",
      CLI_NO_RANGE),
};
#undef F

static int tty;

static void fmt_time(char *buf, size_t size, double s)
{
    int t = s < 0 || s > 1e7 ? 0 : (int)(s + 0.5);
    snprintf(buf, size, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
}

static void on_step(void *user, const struct tb_train_progress *p)
{
    int log_every = *(int *)user;
    char eta[32], el[32];
    fmt_time(eta, sizeof(eta), p->eta_s);
    fmt_time(el, sizeof(el), p->elapsed_s);
    if (tty) {
        int width = 24, done = (int)((double)p->step / (double)p->steps * width);
        char bar[32];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '#' : '.';
        bar[width] = '\0';
        fprintf(stderr, "\r[%s] epoch %lld/%lld step %lld/%lld loss %.4f lr %.2e %.1f clips/s "
                "ETA %s ", bar, (long long)p->epoch + 1, (long long)p->epochs,
                (long long)p->step, (long long)p->steps, p->loss, p->lr, p->clips_per_s, eta);
    } else if (p->step % log_every == 0 || p->step == p->steps) {
        fprintf(stderr, "epoch %lld/%lld step %lld/%lld loss %.4f lr %.2e grad %.3f %.1f "
                "clips/s elapsed %s ETA %s\n", (long long)p->epoch + 1, (long long)p->epochs,
                (long long)p->step, (long long)p->steps, p->loss, p->lr, p->grad_norm,
                p->clips_per_s, el, eta);
    }
}

/* A classifier's scores (struct tb_eval_result's cls), a line for each averaging mode. */
static void print_cls_scores(const struct tb_eval_result *r)
{
    static const char *const level[3] = {"verb", "noun", "action"}; /* enum tb_label_kind */
    static const enum tb_cls_avg modes[2] = {TB_CLS_AVG_PROBS, TB_CLS_AVG_LOGITS};
    for (int k = 0; k < 2 && r->cls_parts; k++) {
        const struct tb_cls_scores *s = &r->cls[modes[k]];
        const struct tb_cls_part *part[3] = {&s->verb, &s->noun, &s->action};
        const char *sep = "";
        fprintf(stderr, "  %s averaged:", modes[k] == TB_CLS_AVG_PROBS ? "probabilities" :
                "logits");
        for (int v = 0; v < 3; v++)
            if (r->cls_parts & 1 << v) {
                fprintf(stderr, "%s %s top-1 %.2f%%, top-5 %.2f%%, mean class %.2f%%", sep,
                        level[v], 100 * part[v]->top1, 100 * part[v]->top5,
                        100 * part[v]->mean_class);
                sep = ";";
            }
        fputc('\n', stderr);
    }
}

static void on_eval(void *user, const struct tb_eval_result *r)
{
    (void)user;
    if (r->retrieval) {
        fprintf(stderr, "%seval after epoch %lld: retrieval mAP %.2f (v->t %.2f, t->v %.2f), "
                "nDCG %.2f on %lld clips x %lld sentences; random ranking: mAP %.2f, nDCG "
                "%.2f\n", tty ? "\n" : "", (long long)r->epoch, 100 * r->map[2],
                100 * r->map[0], 100 * r->map[1], 100 * r->ndcg[2], (long long)r->n_items,
                (long long)r->n_sentences, 100 * r->map_random, 100 * r->ndcg_random);
        if (r->zeroshot)
            fprintf(stderr, "  zero-shot classification: top-1 %.2f%%, top-5 %.2f%%\n",
                    100 * r->top1, 100 * r->top5);
        return;
    }
    fprintf(stderr, "%seval after epoch %lld: top-1 %.2f%%, top-5 %.2f%% on %lld clips (loss "
            "%.4f)\n", tty ? "\n" : "", (long long)r->epoch, 100 * r->top1, 100 * r->top5,
            (long long)r->n_items, r->loss);
    print_cls_scores(r);
}

static int parse_label(const char *s, enum tb_label_kind *out)
{
    if (!strcmp(s, "verb"))
        *out = TB_LABEL_VERB;
    else if (!strcmp(s, "noun"))
        *out = TB_LABEL_NOUN;
    else if (!strcmp(s, "action"))
        *out = TB_LABEL_ACTION;
    else
        return -1;
    return 0;
}

static int max_label(const struct tb_annotations *a, enum tb_label_kind k)
{
    int mx = -1;
    for (int i = 0; a && i < a->n_items; i++) {
        int y = tb_item_label(&a->items[i], k);
        mx = y > mx ? y : mx;
    }
    return mx;
}

/* ---- settings that a choice fixes or leaves unread -------------------------------------- */

/* The one task that reads flag f, or NULL when every task may: its help starts "TASK: " (cls,
 * mae, clip), so the help and this rule cannot disagree. */
static const char *flag_task(const struct cli_flag *f)
{
    static const char *const tasks[] = {"cls", "mae", "clip"};
    size_t n = strcspn(f->help, ":");
    for (int t = 0; t < 3; t++)
        if (f->help[n] == ':' && n == strlen(tasks[t]) && !strncmp(f->help, tasks[t], n))
            return tasks[t];
    return NULL;
}

/* --lr and --blr both set the peak learning rate: the one from the later source wins (the
 * command line over --config's file); both from one source contradict each other. */
static int resolve_lr(struct train_config *c)
{
    const struct cli_command *cmd = &cli_cmd_train;
    enum cli_from lr = cli_flag_from(cmd, "lr", NULL), blr = cli_flag_from(cmd, "blr", NULL);
    char a[8500], b[8500], why[17500];
    if (c->blr == 0)
        return cli_flag_unread(cmd, c, "blr", "--lr sets the peak");
    if (lr == CLI_FROM_DEFAULT)
        return cli_flag_unread(cmd, c, "lr", "--blr sets the peak (x global batch / 256)");
    cli_flag_said(cmd, c, "lr", a, sizeof(a));
    cli_flag_said(cmd, c, "blr", b, sizeof(b));
    if (lr == blr) {
        fprintf(stderr, "tubelet train: %s and %s both set the peak learning rate: give one "
                "(--blr is per 256 clips of the global batch)\n", a, b);
        return -1;
    }
    snprintf(why, sizeof(why), "%s wins over %s", lr > blr ? a : b, lr > blr ? b : a);
    cli_flag_overridden(cmd, lr > blr ? "blr" : "lr", why);
    return 0;
}

/* The rules between train's settings (cli_command.resolve): what --task and --cls-backbone
 * fix, what they leave unread, the peak learning rate's two spellings. */
static int train_resolve(void *config)
{
    struct train_config *c = config;
    const struct cli_command *cmd = &cli_cmd_train;
    int mae = !strcmp(c->task, "mae"), clip = !strcmp(c->task, "clip");
    char why[256];
    for (int i = 0; i < cmd->n_flags; i++) {
        const char *task = flag_task(&cmd->flags[i]);
        snprintf(why, sizeof(why), "only --task %s reads it, not --task %s", task, c->task);
        if (task && strcmp(task, c->task) && cli_flag_unread(cmd, c, cmd->flags[i].name, why) < 0)
            return -1;
    }
    static const char tower[] = "AVION's CLIP video tower pools by its class token and "
                                "learns its positions";
    const char *layout = clip ? "--task clip: " : "--cls-backbone clip: ";
    if (clip || (!mae && !strcmp(c->cls_backbone, "clip"))) {
        snprintf(why, sizeof(why), "%s%s", layout, tower);
        if (cli_flag_fix(cmd, c, "pool", "cls", why) < 0 ||
            cli_flag_fix(cmd, c, "pos", "learned", why) < 0)
            return -1;
    }
    if (clip && cli_flag_fix(cmd, c, "flip", "false", "--task clip: AVION's pretraining does "
                             "not flip (a mirrored clip contradicts its narration's left)") < 0)
        return -1;
    if ((mae || clip) && cli_flag_unread(cmd, c, "classes", mae ? "--task mae has no "
                                         "classifier head" : "--task clip has no "
                                         "classifier head") < 0)
        return -1;
    static const char no_eval[] = "--task mae evaluates nothing (VideoMAE's pretraining is "
                                  "judged by fine-tuning it)";
    static const char *const val[] = {"val", "val-format", "val-views", "val-crops"};
    for (int i = 0; mae && i < 4; i++)
        if (cli_flag_unread(cmd, c, val[i], no_eval) < 0)
            return -1;
    if (mae && cli_flag_fix(cmd, c, "eval-every", "0", no_eval) < 0)
        return -1;
    if (mae && (cli_flag_unread(cmd, c, "pool", "--task mae's encoder does not pool") < 0 ||
                cli_flag_fix(cmd, c, "pos", "sincos", "--task mae: VideoMAE's fixed sin-cos "
                             "positions") < 0))
        return -1;
    if (mae && (cli_flag_unread(cmd, c, "label", "--task mae learns no labels") < 0 ||
                (strcmp(c->qv_bias, "auto") &&
                 cli_flag_fix(cmd, c, "qv-bias", "true", "--task mae: VideoMAE's encoder "
                              "always has q/v biases") < 0)))
        return -1;
    return resolve_lr(c);
}

/* The settings a resume may change: they alter neither the order of the data, nor the
 * schedule, nor the model (where the run is written, how fast and how often it reports, how it
 * evaluates, the memory plan). Every other key of config.txt does. */
static const char *const resume_free[] = {
    "out",         "workers", "prefetch",         "log-every",     "eval-every",
    "save-every",  "val",     "val-format",       "val-views",     "val-crops",
    "tensorboard", "backend", "recompute",        "recompute-mlp", "fused-update",
    "zero",        "init",    "inflate-temporal", "skip-bad-rows", "resume-changed",
    "class-names", "prompt",  "relevancy",
};

/* A resume (out/last.safetensors there) under other settings than out/config.txt's, where a
 * key outside resume_free differs, or on other data than the checkpoint records (its rows or
 * their content): "key old -> new; ...; data: old -> new" into note (empty when none). */
static void resume_changes(const char *out, const struct train_config *c,
                           const struct tb_train_opts *o, char *note, size_t size)
{
    char ckpt[4200], cfg[4200], now[TB_DATA_ID_MAX];
    struct tb_ckpt_info info;
    note[0] = '\0';
    snprintf(ckpt, sizeof(ckpt), "%s/last.safetensors", out);
    snprintf(cfg, sizeof(cfg), "%s/config.txt", out);
    if (access(ckpt, F_OK) != 0)
        return;
    /* The batch a process and its micro-batches may change with the process count where the
     * global batch stays (the data order and schedule follow the global batch). */
    enum { N_FREE = sizeof(resume_free) / sizeof(resume_free[0]) };
    const char *free_keys[N_FREE + 2];
    memcpy(free_keys, resume_free, sizeof(resume_free));
    int n_free = N_FREE, have_info = tb_ckpt_info(ckpt, &info) == 0;
    if (have_info && info.global_batch ==
                         (int64_t)tb_dist_world() * c->accum_steps * c->batch) {
        free_keys[n_free++] = "batch";
        free_keys[n_free++] = "accum-steps";
    }
    if (access(cfg, R_OK) == 0)
        cli_config_diff(&cli_cmd_train, c, cfg, free_keys, n_free, note, size);
    tb_train_data_id(o, now);
    size_t used = strlen(note);
    if (have_info && info.data[0] && strcmp(info.data, now))
        snprintf(note + used, size - used, "%sdata %s -> %s", used ? "; " : "", info.data, now);
}

/* The flags that copy into the options as they are (int, int to int64, int to uint64,
 * double, string): one row each, so no flag is copied twice or forgotten. The rest take a
 * choice (enums, --task's and --cls-backbone's rules) and are set by hand below. */
struct copy {
    size_t from, to;
    char type;
};
#define CP(cf, of, t) {offsetof(struct train_config, cf), offsetof(struct tb_train_opts, of), t}
static const struct copy train_copies[] = {
    CP(task, task, 's'), CP(dim, model.dim, 'i'), CP(depth, model.depth, 'i'),
    CP(heads, model.heads, 'i'), CP(patch, model.patch, 'i'), CP(frames, model.frames, 'i'),
    CP(input_size, model.height, 'i'), CP(input_size, model.width, 'i'),
    CP(recompute, model.recompute, 'i'), CP(recompute_mlp, model.recompute_mlp, 'i'),
    CP(head_init_scale, model.head_init_scale, 'd'), CP(data, data.root, 's'),
    CP(ext, data.ext, 's'), CP(stride, data.stride, 'i'),
    CP(batch, batch, 'i'), CP(workers, workers, 'i'), CP(prefetch, prefetch, 'i'),
    CP(epochs, epochs, 'I'), CP(lr, lr, 'd'), CP(min_lr, min_lr, 'd'),
    CP(warmup_epochs, warmup_epochs, 'd'), CP(wd, weight_decay, 'd'),
    CP(smoothing, smoothing, 'd'), CP(clip_grad, clip_grad, 'd'),
    CP(fused_update, fused_update, 'i'), CP(zero, zero, 'i'), CP(accum_steps, accum_steps, 'i'),
    CP(beta1, beta1, 'd'), CP(beta2, beta2, 'd'), CP(eps, adam_eps, 'd'),
    CP(warmup_lr, warmup_lr, 'd'), CP(init, init, 's'), CP(layer_decay, layer_decay, 'd'),
    CP(drop_path, drop_path, 'd'), CP(mixup, mix.mixup, 'd'), CP(cutmix, mix.cutmix, 'd'),
    CP(mixup_prob, mix.prob, 'd'), CP(mixup_switch_prob, mix.switch_prob, 'd'),
    CP(random_erase, erase, 'd'), CP(head_dropout, head_dropout, 'd'),
    CP(mask_ratio, mae.mask_ratio, 'd'), CP(decoder_ratio, mae.decoder_ratio, 'd'),
    CP(dec_dim, mae.dec_dim, 'i'), CP(dec_depth, mae.dec_depth, 'i'),
    CP(dec_heads, mae.dec_heads, 'i'), CP(norm_target, mae.norm_target, 'i'),
    CP(embed, clip.embed, 'i'), CP(ctx, clip.ctx, 'i'), CP(text_width, clip.text_width, 'i'),
    CP(text_heads, clip.text_heads, 'i'), CP(text_depth, clip.text_layers, 'i'),
    CP(temperature, clip.temperature, 'd'), CP(learn_temperature, clip.learn_temperature, 'i'),
    CP(margin, margin, 'd'), CP(class_names, class_names, 's'), CP(prompt, prompt, 's'),
    CP(relevancy, relevancy, 's'), CP(relevant_captions, relevant_captions, 'd'),
    CP(train_relevancy, train_relevancy, 's'), CP(train_sentences, train_sentences, 's'),
    CP(seed, seed, 'U'), CP(eval_every, eval_every, 'i'), CP(val_views, val_views, 'i'),
    CP(val_crops, val_crops, 'i'), CP(log_every, log_every, 'i'), CP(out, out_dir, 's'),
    CP(tensorboard, tensorboard, 'i'), CP(save_every, save_every, 'i'),
};
#undef CP

static void copy_flags(struct tb_train_opts *o, const struct train_config *c)
{
    for (size_t i = 0; i < sizeof(train_copies) / sizeof(train_copies[0]); i++) {
        const struct copy *k = &train_copies[i];
        const char *from = (const char *)c + k->from;
        char *to = (char *)o + k->to;
        int v;
        memcpy(&v, from, sizeof(v));
        if (k->type == 'I')
            *(int64_t *)(void *)to = v;
        else if (k->type == 'U')
            *(uint64_t *)(void *)to = (uint64_t)v;
        else
            memcpy(to, from, k->type == 's' ? sizeof(char *) : k->type == 'd' ? sizeof(double)
                                                                             : sizeof(int));
    }
}

/* What run_train holds from its start to its end (train_close). */
struct train_run {
    struct train_config *c;
    struct tb_annotations *train, *val;
    struct tb_label_space *labels;
    struct cli_mem cfg;
    struct tb_ann_opts ao, vo;
    enum tb_label_kind label;
    enum tb_dtype dtype;
    struct tb_randaug_opts rand_augment;
    int mae, clip, classes, qv_bias, lead;
};

/* The flags' own values are the parser's to check (their metavars list them); these are the
 * checks between them. 0, or the exit status 2 with the message printed. */
static int train_flags_check(struct train_run *t)
{
    struct train_config *c = t->c;
    if (!c->data[0] || !c->train[0] || !c->out[0]) {
        fprintf(stderr, "tubelet train: --data, --train and --out are required\n");
        return 2;
    }
    t->mae = !strcmp(c->task, "mae");
    t->clip = !strcmp(c->task, "clip");
    cli_ann_format(c->format, &t->ao.format);
    cli_ann_format(c->val_format[0] ? c->val_format : c->format, &t->vo.format);
    parse_label(c->label, &t->label);
    if (c->val_crops == 2) {
        fprintf(stderr, "tubelet train: --val-crops is 1 (the centre) or 3 (left, centre and "
                "right, AVION's), not 2\n");
        return 2;
    }
    if (cli_device("train", c->device, c->backend, c->precision, &c->use_backend, &t->dtype))
        return 2;
    if (tb_randaug_parse(c->rand_augment, &t->rand_augment) < 0) {
        fprintf(stderr, "tubelet train: --rand-augment: %s\n", tb_errmsg());
        return 2;
    }
    if (strcmp(c->cls_backbone, "vit") && (t->mae || t->clip)) {
        fprintf(stderr, "tubelet train: --cls-backbone is --task cls's\n");
        return 2;
    }
    t->qv_bias = !strcmp(c->qv_bias, "true");
    return 0;
}

/* --init's weights: a note when they were trained on clips normalised another way (allowed),
 * and --qv-bias auto's answer (whether they have q/v biases). */
static int train_init_weights(struct train_run *t)
{
    struct train_config *c = t->c;
    struct tb_ckpt_info info;
    if (!c->init[0])
        return 0;
    if (t->lead && tb_ckpt_info(c->init, &info) == 0 && info.norm_recorded &&
        (info.norm == TB_NORM_IMAGENET) != !strcmp(c->norm, "imagenet"))
        fprintf(stderr, "tubelet train: note: --init %s was trained on clips normalised with "
                "--norm %s, this run uses --norm %s: its features expect the first (pass "
                "--norm %s unless this is meant)\n", c->init,
                info.norm == TB_NORM_IMAGENET ? "imagenet" : "openai", c->norm,
                info.norm == TB_NORM_IMAGENET ? "imagenet" : "openai");
    if (strcmp(c->qv_bias, "auto"))
        return 0;
    struct tb_st_file *f = NULL;
    int rc = tb_st_read(&f, c->init);
    if (rc < 0)
        return rc;
    t->qv_bias = tb_st_find(f, "blocks.0.attn.q_bias") ||
                 tb_st_find(f, "encoder.blocks.0.attn.q_bias");
    tb_st_free(&f);
    return 0;
}

/* The annotations, the head's classes and label space (its checkpoint carries it), and the
 * rows that make no clip, once the classes and actions count every row. rc < 0 with
 * *reported 0: the caller reports it. */
static int train_sets(struct train_run *t, int *reported)
{
    struct train_config *c = t->c;
    *reported = 1;
    if (cli_ann_load(&t->train, "train", c->train, t->ao.format) < 0 ||
        (c->val[0] && cli_ann_load(&t->val, "train", c->val, t->vo.format) < 0))
        return -1;
    const struct tb_annotations *sets[2] = {t->train, t->val};
    int n_sets = t->val ? 2 : 1;
    if (t->label == TB_LABEL_ACTION)
        tb_ann_map_actions((struct tb_annotations *[2]){t->train, t->val}, n_sets);
    *reported = 0;
    int rc = train_init_weights(t);
    if (rc < 0)
        return rc;
    t->classes = c->classes;
    if (t->mae || t->clip) {
        t->classes = 0; /* no head: the decoder predicts pixels, or the towers project */
    } else {
        if (t->classes == 0) {
            int a = max_label(t->train, t->label), b = max_label(t->val, t->label);
            t->classes = (a > b ? a : b) + 1;
        }
        if ((rc = tb_label_space_build(&t->labels, t->label, t->classes, sets, n_sets)) < 0)
            return rc;
    }
    *reported = 1;
    /* every row's class is one of the head's: else the row is named, before any step */
    for (int k = 0; t->labels && k < n_sets; k++)
        if (tb_label_space_check(t->labels, sets[k]) < 0) {
            if (t->lead)
                fprintf(stderr, "tubelet train: %s (--classes %d%s)\n", tb_errmsg(), t->classes,
                        c->classes ? "" : ": the largest label + 1");
            return -1;
        }
    if (cli_ann_check(t->train, "train", c->data, c->ext, CLI_ROWS_REPORT, !t->lead) < 0 ||
        (t->val && cli_ann_check(t->val, "train", c->data, c->ext,
                                 c->skip_bad_rows ? CLI_ROWS_REPORT : CLI_ROWS_REFUSE,
                                 !t->lead) < 0))
        return -1;
    return 0;
}

/* The options of tb_train from the flags: the table's copies, then the choices. */
static void train_opts(const struct train_run *t, struct tb_train_opts *o)
{
    const struct train_config *c = t->c;
    enum tb_sampler sampler = t->mae ? TB_SAMPLE_DENSE : TB_SAMPLE_SEGMENTS; /* auto */
    int multiscale = !strcmp(c->crop, "multiscale") || (t->mae && !strcmp(c->crop, "auto"));
    int clip_tower = t->clip || (!t->mae && !strcmp(c->cls_backbone, "clip"));
    if (strcmp(c->sampler, "auto"))
        tb_sampler_parse(c->sampler, &sampler); /* the parser checked the name */
    copy_flags(o, c);
    tbi_settings_take(o, &c->set);
    o->model.tubelet = c->tubelet ? c->tubelet : clip_tower ? 1 : 2;
    o->model.classes = t->classes;
    o->model.pool = strcmp(c->pool, "cls") ? TB_POOL_MEAN : TB_POOL_CLS;
    o->model.pos = strcmp(c->pos, "learned") ? TB_POS_SINCOS : TB_POS_LEARNED;
    o->model.backend = c->use_backend;
    o->model.qv_bias = t->qv_bias;
    o->model.dtype = t->dtype;
    if (clip_tower) {
        /* AVION's CLIP video tower: a class token, learned positions (cls: its
         * VideoClassifier, per-frame patches by default) */
        if (!t->clip)
            o->model.layout = TB_LAYOUT_CLIP; /* the clip task lays out its own tower */
        o->model.pool = TB_POOL_CLS;
        o->model.pos = TB_POS_LEARNED;
    }
    o->train_ann = t->train;
    o->val_ann = t->val;
    o->label = t->label;
    o->norm = strcmp(c->norm, "imagenet") ? TB_NORM_OPENAI : TB_NORM_IMAGENET;
    o->data.sampler = sampler;
    o->data.crop = (struct tb_crop_spec){
        .mode = multiscale ? TB_CROP_MULTISCALE : TB_CROP_RANDOM_RESIZED,
        .scale_min = c->scale_min, .scale_max = 1, .ratio_min = 3.0 / 4, .ratio_max = 4.0 / 3,
        /* AVION's pretraining crops without flips (a mirrored clip contradicts "left") */
        .flip = c->flip && !t->clip ? TB_FLIP_RANDOM : TB_FLIP_NEVER};
    o->data.rand_augment = t->rand_augment;
    o->optimizer = (enum tb_optimizer)tb_optimizer_parse(c->optim);
    o->erase_mode = strcmp(c->erase_mode, "frame") ? TB_ERASE_CLIP : TB_ERASE_FRAME;
    o->inflate = strcmp(c->inflate_temporal, "bilinear") ? TB_INFLATE_NONE : TB_INFLATE_BILINEAR;
    o->mae.decoder_mask = strcmp(c->decoder_mask, "running-cell") ? TB_DECODER_MASK_NONE
                                                                   : TB_DECODER_MASK_RUNNING_CELL;
    o->clip.vocab = TB_TOKEN_VOCAB;
    o->clip.text_causal = 1;
    o->max_margin = !strcmp(c->loss, "max-margin");
    o->labels = t->labels;
    o->config_text = t->cfg.buf;
    o->cancel = &cli_cancel;
    o->on_step = on_step;
    o->on_eval = on_eval;
    o->user = &t->c->log_every;
    if (cli_flag_read(&cli_cmd_train, "blr"))
        o->lr = c->blr * c->batch * c->accum_steps * tb_dist_world() / 256.0;
}

/* A resume under settings or data that alter the run: refused, each change named, unless
 * asked. 0 (o->resume_note set to note, or NULL), or -1 with the message printed. */
static int train_resume_check(const struct train_run *t, struct tb_train_opts *o, char *note,
                              size_t size)
{
    const struct train_config *c = t->c;
    resume_changes(c->out, c, o, note, size);
    if (note[0] && !c->resume_changed) {
        if (t->lead)
            fprintf(stderr, "tubelet train: %s/last.safetensors was trained with other settings "
                    "or data (%s/config.txt, the checkpoint's data): %s. These alter the data "
                    "order, the schedule or the model: resume with the run's own settings "
                    "(--config %s/config.txt) and data, start a new run (another --out), or "
                    "pass --resume-changed to go on with the changes\n", c->out, c->out, note,
                    c->out);
        return -1;
    }
    if (note[0] && t->lead)
        fprintf(stderr, "tubelet train: resuming with changed settings or data: %s\n", note);
    o->resume_note = note[0] ? note : NULL;
    return 0;
}

/* The reproduction gap users hit most: the global batch and the lr it gives (rank 0). */
static void say_batch(const struct train_config *c, const struct tb_train_opts *o)
{
    int world = tb_dist_world(), global = world * c->accum_steps * c->batch;
    int use_blr = cli_flag_read(&cli_cmd_train, "blr");
    const char *where, *other = use_blr ? "lr" : "blr";
    fprintf(stderr, "tubelet: info: global batch %d (%d process%s x ", global, world,
            world > 1 ? "es" : "");
    if (c->accum_steps > 1)
        fprintf(stderr, "%d micro-batches x ", c->accum_steps);
    fprintf(stderr, "%d clips); peak lr %g", c->batch, o->lr);
    cli_flag_from(&cli_cmd_train, use_blr ? "blr" : "lr", &where);
    if (use_blr)
        fprintf(stderr, " (--blr %g x %d / 256, from %s)\n", c->blr, global, where);
    else
        fprintf(stderr, " (--lr, from %s)\n", where);
    if (!cli_flag_read(&cli_cmd_train, other) &&
        cli_flag_from(&cli_cmd_train, other, NULL) != CLI_FROM_DEFAULT) {
        char said[8500];
        cli_flag_said(&cli_cmd_train, c, other, said, sizeof(said));
        fprintf(stderr, "tubelet: info: %s is not used: the later source wins\n", said);
    }
    if (c->warmup_epochs > c->epochs)
        fprintf(stderr, "tubelet: info: --warmup-epochs %g is longer than the run's %d "
                "epoch%s: the learning rate never reaches its peak\n", c->warmup_epochs,
                c->epochs, c->epochs > 1 ? "s" : "");
}

/* The run's one line on stdout (rank 0). */
static void say_trained(const struct train_config *c, const struct tb_eval_result *res,
                        double seconds)
{
    printf("train: %s/last.safetensors after %.1f s", c->out, seconds);
    if (tb_dist_world() > 1)
        printf(" (%d processes, %d clips per step)", tb_dist_world(),
               tb_dist_world() * c->accum_steps * c->batch);
    if (res->retrieval)
        printf("; validation retrieval mAP %.2f, nDCG %.2f (random ranking: %.2f, %.2f)",
               100 * res->map[2], 100 * res->ndcg[2], 100 * res->map_random,
               100 * res->ndcg_random);
    if (res->retrieval && res->zeroshot)
        printf("; zero-shot top-1 %.2f%%, top-5 %.2f%%", 100 * res->top1, 100 * res->top5);
    else if (res->n_items && !res->retrieval)
        printf("; validation top-1 %.2f%%, top-5 %.2f%% on %lld clips", 100 * res->top1,
               100 * res->top5, (long long)res->n_items);
    printf("\n");
}

/* The resolved flags, as a config file that reproduces the run: tb_train writes it beside
 * the run once the run is accepted (a refused resume leaves the run's own), before any work
 * (a disk that cannot take it stops the run there). 0, or -1 on every process. */
static int train_config_text(struct train_run *t)
{
    int unsaved = cli_mem_open(&t->cfg, "train") < 0;
    if (!unsaved) {
        cli_print_config(t->cfg.f, &cli_cmd_train, t->c);
        unsaved = cli_mem_close(&t->cfg, "train") < 0;
    }
    return tb_dist_max_int(unsaved) ? -1 : 0; /* every process stops, none waits for the lead */
}

/* Flags -> annotations and labels -> options -> tb_train, under mpirun one process per rank
 * with batches of --batch each (global: world x batch). */
static int run_train(void *config, int n_args, char **args)
{
    struct train_run t = {.c = config};
    struct tb_train_opts o = {0};
    struct tb_eval_result res = {0};
    char changed[2048];
    int rc = 0, status, reported = 1;
    (void)n_args;
    (void)args;
    if ((status = train_flags_check(&t)) != 0)
        return status;
    status = 1;
    if ((rc = tb_dist_init(NULL, NULL)) < 0) {
        reported = 0;
        goto end;
    }
    t.lead = tb_dist_rank() == 0;
    if ((rc = train_sets(&t, &reported)) < 0 || (rc = train_config_text(&t)) < 0)
        goto end;
    train_opts(&t, &o);
    if ((rc = train_resume_check(&t, &o, changed, sizeof(changed))) < 0)
        goto end;
    if (t.lead)
        say_batch(t.c, &o);
    tty = t.lead && isatty(2);
    cli_device_say();
    double t0 = cli_now();
    rc = tb_train(&o, &res);
    reported = 0;
    if (tty)
        fputc('\n', stderr);
    if (rc == 0 && t.lead)
        say_trained(t.c, &res, cli_now() - t0);
    status = rc < 0;
end:
    if (rc < 0 && !reported)
        cli_report("train", rc);
    free(t.cfg.buf);
    tb_label_space_free(&t.labels);
    tb_ann_free(&t.train);
    tb_ann_free(&t.val);
    if (status)
        tb_dist_finalize_failed(); /* the others may wait in a collective: never a hang */
    else
        tb_dist_finalize();
    return status;
}

const struct cli_command cli_cmd_train = {
    .name = "train",
    .args = "",
    .summary = "train a video ViT on prepared videos (--task cls), pretrain one as VideoMAE "
               "(--task mae) or with narrations as a video-text dual encoder (--task clip)",
    .details = "Loader -> normalisation -> ViT -> cross-entropy (cls), tube masking, decoder\n"
               "and pixel reconstruction (mae), or the text tower on the narrations and\n"
               "InfoNCE over every process's pairs (clip) -> AdamW or Lion with warmup and\n"
               "cosine decay. Every epoch: a checkpoint (DIR/last.safetensors, atomic), an\n"
               "evaluation (top-1/top-5, views x crops averaged; clip: zero-shot EK-100\n"
               "retrieval mAP/nDCG beside a random ranking's, and zero-shot classification\n"
               "with --class-names), lines in DIR/metrics.jsonl. Run the same command again\n"
               "to resume exactly; Ctrl-C saves and stops.",
    .flags = train_flags,
    .n_flags = (int)(sizeof(train_flags) / sizeof(train_flags[0])),
    .config_size = sizeof(struct train_config),
    .min_args = 0,
    .max_args = 0,
    .resolve = train_resolve,
    .run = run_train,
};

/* ---- eval -------------------------------------------------------------------------------- */

struct eval_config {
    char *ckpt, *data, *ext, *train, *val, *format, *label, *predictions, *device, *backend,
        *precision;
    const char *use_backend; /* --device and --backend resolved (cli_device) */
    int views, crops, batch, workers, skip_bad_rows;
    char *class_names, *prompt, *relevancy, *similarity, *task, *scores;
};

#define E(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct eval_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag eval_flags[] = {
    E("ckpt", CLI_STR, ckpt, NULL, "FILE", "checkpoint (tubelet train's last.safetensors)",
      CLI_NO_RANGE),
    E("task", CLI_STR, task, "auto", "auto|cls|mir|zeroshot",
      "cls (top-1/top-5 of a classifier), mir (zero-shot "
      "multi-instance retrieval of a --task clip model; with --class-names also zero-shot "
      "classification), zeroshot (mir, --class-names required) or auto (the checkpoint's)",
      CLI_NO_RANGE),
    E("data", CLI_STR, data, NULL, "DIR", "prepared videos (tubelet prep --out)", CLI_NO_RANGE),
    E("ext", CLI_STR, ext, "mp4", "EXT", "prepared videos' suffix", CLI_NO_RANGE),
    E("val", CLI_STR, val, NULL, "FILE", "annotations to evaluate on", CLI_NO_RANGE),
    E("train", CLI_STR, train, "", "FILE", "label action: the run's training annotations, to "
      "number the actions over them and --val as the run did (AVION's list) and score verbs "
      "and nouns from the action probabilities", CLI_NO_RANGE),
    E("format", CLI_STR, format, "epic", "epic|kinetics|narration",
      "epic, kinetics or narration", CLI_NO_RANGE),
    E("label", CLI_STR, label, "", "verb|noun|action", "verb, noun or action (default: the run's)",
      CLI_NO_RANGE),
    E("device", CLI_STR, device, "auto", "cpu|cuda|auto", CLI_DEVICE_HELP, CLI_NO_RANGE),
    E("backend", CLI_STR, backend, "", "NAME", CLI_BACKEND_HELP, CLI_NO_RANGE),
    E("precision", CLI_STR, precision, "auto", "auto|fp32|bf16", CLI_PRECISION_HELP, CLI_NO_RANGE),
    E("views", CLI_INT, views, "1", "N", "temporal views per clip", 1, 64),
    E("crops", CLI_INT, crops, "1", "N", "spatial crops per view: 1 or 3", 1, 3),
    E("batch", CLI_INT, batch, "8", "B", "clips per forward", 1, 65536),
    E("workers", CLI_INT, workers, "2", "N", "decoding threads", 1, 256),
    E("predictions", CLI_STR, predictions, "", "FILE.csv",
      "cls: also write each item's line, label, top-1 class and its probability (views and "
      "crops averaged)", CLI_NO_RANGE),
    E("scores", CLI_STR, scores, "", "FILE.npy", "cls: also write each row's probabilities "
      "averaged over its views and crops: (rows, classes) float32, one row per --val row in "
      "the file's order, NaN for a row --skip-bad-rows skipped; and FILE.lines.npy beside it, "
      "each row's line in the file (int64)", CLI_NO_RANGE),
    E("class-names", CLI_STR, class_names, "", "FILE", "clip: a classes CSV (id,key,...) for "
      "zero-shot classification of --label", CLI_NO_RANGE),
    E("prompt", CLI_STR, prompt, "{}", "TEXT", "clip: the zero-shot prompt, {} the class name",
      CLI_NO_RANGE),
    E("relevancy", CLI_STR, relevancy, "", "FILE.npy", "clip: the split's relevancy (default: "
      "computed from its verb and noun classes)", CLI_NO_RANGE),
    E("similarity", CLI_STR, similarity, "", "FILE.npy", "clip: also write the (clips, "
      "sentences) similarity matrix", CLI_NO_RANGE),
    E("skip-bad-rows", CLI_BOOL, skip_bad_rows, "false", "", "score --val without its rows "
      "that make no clip (unparsable, video missing or unreadable, window outside it; each "
      "named) rather than refuse it", CLI_NO_RANGE),
};
#undef E

/* A --task clip checkpoint: zero-shot retrieval (and classification with --class-names) on
 * --val, as the run's own evaluation. Returns the exit status. */
static int eval_clip(const struct eval_config *c, struct tb_ckpt_info *info,
                     enum tb_label_kind label, const struct tb_ann_opts *ao)
{
    struct tb_annotations *val = NULL;
    tb_clip *m = NULL;
    tb_tokenizer *tok = NULL;
    struct tb_eval_result r;
    struct tb_clip_config cc = info->clip;
    cc.video = info->model;
    cc.video.backend = c->use_backend;
    int rc;
    cli_device_say();
    if ((rc = tb_clip_open(&m, &cc)) < 0 ||
        (rc = tb_ckpt_load(c->ckpt, tb_clip_params(m), NULL, NULL)) < 0 ||
        (rc = tb_clip_plan(m, c->batch, NULL)) < 0 || (rc = tb_tokenizer_open(&tok, NULL)) < 0)
        goto end;
    if (cli_ann_load(&val, "eval", c->val, ao->format) < 0 ||
        cli_ann_check(val, "eval", c->data, c->ext,
                      c->skip_bad_rows ? CLI_ROWS_REPORT : CLI_ROWS_REFUSE,
                      tb_dist_rank() != 0) < 0) {
        tb_ann_free(&val);
        tb_clip_close(&m);
        tb_tokenizer_close(&tok);
        return 1;
    }
    struct tb_train_opts o = {
        .label = label, .data = {.root = c->data, .ext = c->ext, .sampler = info->sampler,
                                 .stride = info->stride},
        .norm = info->norm, .batch = c->batch, .workers = c->workers, .val_views = c->views,
        .val_crops = c->crops, .class_names = c->class_names, .prompt = c->prompt,
        .relevancy = c->relevancy, .similarity = c->similarity,
    };
    if ((rc = tb_eval_clip(m, tok, val, &o, 0, &r)) < 0)
        goto end;
    if (tb_dist_rank() == 0) {
        printf("{\"ckpt\": \"%s\", \"items\": %lld, \"sentences\": %lld, \"map\": %.4f, "
               "\"ndcg\": %.4f, \"map_v2t\": %.4f, \"map_t2v\": %.4f, \"ndcg_v2t\": %.4f, "
               "\"ndcg_t2v\": %.4f, \"map_random\": %.4f, \"ndcg_random\": %.4f", c->ckpt,
               (long long)r.n_items, (long long)r.n_sentences, r.map[2], r.ndcg[2], r.map[0],
               r.map[1], r.ndcg[0], r.ndcg[1], r.map_random, r.ndcg_random);
        if (r.zeroshot)
            printf(", \"zeroshot_top1\": %.4f, \"zeroshot_top5\": %.4f", r.top1, r.top5);
        printf("}\n");
    }
end:
    if (rc < 0)
        cli_report("eval", rc);
    tb_tokenizer_close(&tok);
    tb_clip_close(&m);
    tb_ann_free(&val);
    return rc < 0 ? 1 : 0;
}

/* line,label,predicted,probability per annotation item (its top-1 of the probabilities
 * averaged over its views and crops, the first largest): the confusion matrix is one awk
 * away. Written whole or not at all. */
static int write_predictions(const char *path, const struct tb_annotations *a,
                             enum tb_label_kind k, const float *probs, int K)
{
    struct cli_mem m;
    if (cli_mem_open(&m, "eval") < 0)
        return -1;
    fprintf(m.f, "line,label,predicted,probability\n");
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        const float *p = probs + (size_t)i * K;
        int best = 0;
        for (int q = 1; q < K; q++)
            best = p[q] > p[best] ? q : best;
        fprintf(m.f, "%d,%d,%d,%.6f\n", it->line, tb_item_label(it, k), best, p[best]);
    }
    return cli_mem_save(&m, "eval", path);
}

/* --scores FILE.npy: (rows, classes) float32, one row per row of --val in the file's order,
 * NaN for a row skipped (--skip-bad-rows), and FILE.lines.npy beside it: each row's line in
 * the file (int64), so the rows line up with the CSV whatever was skipped. */
static int write_scores(const char *path, const struct tb_annotations *a, const float *probs,
                        int K)
{
    int n = tb_ann_row_lines(a, NULL), rc = n;
    int *lines = n >= 0 ? malloc(sizeof(int) * (size_t)(n + 1)) : NULL;
    int64_t *lines64 = n >= 0 ? malloc(sizeof(int64_t) * (size_t)(n + 1)) : NULL;
    float *rows = n >= 0 ? malloc(sizeof(float) * ((size_t)n * K + 1)) : NULL;
    char lpath[4200];
    size_t stem = strlen(path) > 4 && !strcmp(path + strlen(path) - 4, ".npy")
                      ? strlen(path) - 4 : strlen(path);
    snprintf(lpath, sizeof(lpath), "%.*s.lines.npy", (int)stem, path);
    if (n >= 0 && (!lines || !lines64 || !rows))
        rc = TB_ENOMEM;
    if (rc >= 0 && (rc = tb_ann_row_lines(a, lines)) >= 0) {
        for (int r = 0, i = 0; r < n; r++) {
            int kept = i < a->n_items && a->items[i].line == lines[r];
            for (int q = 0; q < K; q++)
                rows[(size_t)r * K + q] = kept ? probs[(size_t)i * K + q] : NAN;
            i += kept;
            lines64[r] = lines[r];
        }
        struct tb_st_tensor s = {.dtype = TB_ST_F32, .n_dims = 2, .shape = {n, K},
                                 .n = (int64_t)n * K, .data = rows},
                            l = {.dtype = TB_ST_I64, .n_dims = 1, .shape = {n}, .n = n,
                                 .data = lines64};
        if ((rc = tb_npy_write(path, &s)) == 0)
            rc = tb_npy_write(lpath, &l);
    }
    free(lines);
    free(lines64);
    free(rows);
    return rc < 0 ? rc : 0;
}

/* The checks between eval's flags and its checkpoint (info): a task or label the checkpoint
 * does not have, a flag for another kind of checkpoint. 0, or the exit status (the message
 * printed). */
static int eval_check(const struct eval_config *c, const struct tb_ckpt_info *info,
                      enum tb_label_kind label, enum tb_dtype dtype)
{
    static const char *const kinds[] = {"verb", "noun", "action"};
    int want_clip = !strcmp(c->task, "mir") || !strcmp(c->task, "zeroshot");
    if ((want_clip || !strcmp(c->task, "cls")) && want_clip != !strcmp(info->task, "clip")) {
        fprintf(stderr, "tubelet eval: --task %s, but %s is a --task %s checkpoint\n", c->task,
                c->ckpt, info->task);
        return 1;
    }
    if (!strcmp(c->task, "zeroshot") && !c->class_names[0]) {
        fprintf(stderr, "tubelet eval: --task zeroshot needs --class-names FILE (id,key,... "
                "lines: EPIC_100_verb_classes.csv)\n");
        return 1;
    }
    if (dtype != TB_DTYPE_F32 && (strcmp(info->task, "cls") ||
                                  info->model.layout == TB_LAYOUT_CLIP)) {
        fprintf(stderr, "tubelet eval: --precision bf16 is wired for --task cls classifiers "
                "with the ViT backbone only; %s is not one\n", c->ckpt);
        return 1;
    }
    /* a flag for the other kind of checkpoint would be ignored: refused (its help's "TASK:") */
    for (int i = 0; i < cli_cmd_eval.n_flags; i++) {
        const char *task = flag_task(&cli_cmd_eval.flags[i]);
        char why[128];
        snprintf(why, sizeof(why), "%s is a --task %s checkpoint, and only --task %s's read it",
                 c->ckpt, info->task, task);
        if (task && strcmp(task, info->task) &&
            cli_flag_unread(&cli_cmd_eval, c, cli_cmd_eval.flags[i].name, why) < 0)
            return 2;
    }
    if (c->train[0] && label != TB_LABEL_ACTION) {
        fprintf(stderr, "tubelet eval: --train %s would be ignored: it numbers the actions of "
                "--label action, and this is --label %s; leave it out\n", c->train,
                kinds[label]);
        return 2;
    }
    if (!strcmp(info->task, "cls") && info->label_recorded && label != info->label) {
        /* a head's classes are one label kind's: scored against another's, a count that
         * happens to fit would give a number that means nothing */
        fprintf(stderr, "tubelet eval: --label %s, but %s is a %s classifier (trained with "
                "--label %s): leave --label out, or give its own\n", kinds[label], c->ckpt,
                kinds[info->label], kinds[info->label]);
        return 1;
    }
    if (strcmp(info->task, "cls") && strcmp(info->task, "clip")) {
        fprintf(stderr, "tubelet eval: %s is a --task %s checkpoint, without a classifier: "
                "fine-tune it first (tubelet train --task cls --init %s)\n", c->ckpt, info->task,
                c->ckpt);
        return 1;
    }
    return 0;
}

/* What eval of a classifier holds (eval_cls). */
struct eval_run {
    const struct eval_config *c;
    struct tb_annotations *train, *val;
    struct tb_cls_action_list *actions, space_list; /* --train's, or the checkpoint's */
    const struct tb_cls_action_list *list;
    struct tb_label_space *space;
    enum tb_label_kind label;
};

/* --label action: the actions numbered as the run numbered them - over --train and --val
 * (AVION's list), by the checkpoint's own list, or over --val alone (said). rc < 0: to
 * report; 1: failed, said. */
static int eval_actions(struct eval_run *e, const struct tb_ann_opts *ao)
{
    const struct eval_config *c = e->c;
    if (e->label != TB_LABEL_ACTION)
        return 0;
    if (c->train[0]) {
        if (cli_ann_load(&e->train, "eval", c->train, ao->format) < 0)
            return 1;
        struct tb_annotations *sets[2] = {e->train, e->val};
        const struct tb_annotations *read[2] = {e->train, e->val};
        int rc = tb_ann_map_actions(sets, 2);
        if (rc >= 0 && (rc = tb_cls_action_list_build(&e->actions, read, 2)) >= 0)
            e->list = e->actions;
        return rc < 0 ? rc : 0;
    }
    if (e->space) {
        int rc = tb_label_space_map_actions(e->space, e->val);
        e->space_list = (struct tb_cls_action_list){e->space->n_classes, e->space->verb,
                                                    e->space->noun};
        e->list = &e->space_list;
        return rc < 0 ? rc : 0;
    }
    if (tb_dist_rank() == 0)
        fprintf(stderr, "tubelet eval: note: no action list without --train: the actions are "
                "numbered over --val alone (the run's numbering only where --val has every "
                "action of its training set), and only action top-1/top-5 are scored; --train "
                "FILE (the run's training CSV) numbers them over both, as the run did, and adds "
                "the verb and noun scores\n");
    int rc = tb_ann_map_actions(&e->val, 1);
    return rc < 0 ? rc : 0;
}

/* The scores of a classifier: its --predictions and --scores files and the JSON line
 * (rank 0). rc < 0: to report; 1: failed, said. */
static int eval_say(const struct eval_run *e, const struct tb_eval_result *r, const float *probs,
                    int K)
{
    const struct eval_config *c = e->c;
    char scores[1024];
    int rc = tb_eval_cls_json(r, scores, sizeof(scores));
    if (rc < 0 || tb_dist_rank() != 0)
        return rc < 0 ? rc : 0;
    if (c->predictions[0] && write_predictions(c->predictions, e->val, e->label, probs, K) < 0)
        return 1;
    if (c->scores[0] && (rc = write_scores(c->scores, e->val, probs, K)) < 0)
        return rc;
    printf("{\"ckpt\": \"%s\", \"items\": %lld, \"views\": %d, \"crops\": %d, \"top1\": %.4f, "
           "\"top5\": %.4f, \"loss\": %.6f, \"loss_logits\": %.6f%s}\n", c->ckpt,
           (long long)r->n_items, r->views, r->crops, r->top1, r->top5, r->loss, r->loss_logits,
           scores);
    return 0;
}

/* A classifier's checkpoint on --val, its clips made as the run made them (its sampler,
 * stride, normalisation, frames and size). rc < 0: to report; 1: failed, said. */
static int eval_cls_run(struct eval_run *e, struct tb_ckpt_info *info, const struct tb_ann_opts *ao,
                        enum tb_dtype dtype)
{
    const struct eval_config *c = e->c;
    tb_vit *m = NULL;
    struct tb_eval_result r;
    float *probs = NULL;
    int K = info->model.classes, rc;
    info->model.backend = c->use_backend;
    info->model.dtype = dtype;
    cli_device_say();
    if ((rc = tb_vit_open(&m, &info->model)) < 0 ||
        (rc = tb_ckpt_load(c->ckpt, tb_vit_params(m), NULL, NULL)) < 0 ||
        (rc = tb_vit_plan(m, c->batch, NULL)) < 0)
        goto end;
    if (cli_ann_load(&e->val, "eval", c->val, ao->format) < 0) {
        rc = 1;
        goto end;
    }
    if ((rc = tb_ckpt_label_space(c->ckpt, &e->space)) < 0)
        goto end;
    if (e->space && e->space->kind != e->label)
        tb_label_space_free(&e->space); /* an unrecorded kind (verb) was overridden by --label */
    if ((rc = eval_actions(e, ao)) != 0 ||
        /* the classes of --val must mean what the head learnt (the checkpoint's label space) */
        (e->space && (rc = tb_label_space_check(e->space, e->val)) < 0))
        goto end;
    if (cli_ann_check(e->val, "eval", c->data, c->ext,
                      c->skip_bad_rows ? CLI_ROWS_REPORT : CLI_ROWS_REFUSE,
                      tb_dist_rank() != 0) < 0) {
        rc = 1;
        goto end;
    }
    struct tb_dataset_opts d = {.root = c->data, .ext = c->ext, .sampler = info->sampler,
                                .stride = info->stride};
    if ((c->predictions[0] || c->scores[0]) &&
        !(probs = malloc(sizeof(float) * (size_t)e->val->n_items * K + 1))) {
        rc = TB_ENOMEM;
        goto end;
    }
    if ((rc = tb_eval_cls(m, e->val, &d, e->label, info->norm, c->views, c->crops, c->batch,
                          c->workers, e->list, &r, probs)) >= 0)
        rc = eval_say(e, &r, probs, K);
end:
    free(probs);
    tb_vit_close(&m);
    return rc;
}

/* Flags -> the checkpoint's settings -> a classifier's or a dual encoder's evaluation; under
 * mpirun each process evaluates its share of the clips. */
static int run_eval(void *config, int n_args, char **args)
{
    struct eval_config *c = config;
    struct eval_run e = {.c = c, .label = TB_LABEL_VERB}; /* --label, else the checkpoint's */
    struct tb_ann_opts ao = {0};
    struct tb_ckpt_info info;
    enum tb_dtype dtype;
    int rc, status = 1;
    (void)n_args;
    (void)args;
    if (!c->ckpt[0] || !c->data[0] || !c->val[0]) {
        fprintf(stderr, "tubelet eval: --ckpt, --data and --val are required\n");
        return 2;
    }
    if (cli_device("eval", c->device, c->backend, c->precision, &c->use_backend, &dtype))
        return 2;
    cli_ann_format(c->format, &ao.format); /* the parser checked the names */
    if (c->label[0])
        parse_label(c->label, &e.label);
    if (c->crops == 2) {
        fprintf(stderr, "tubelet eval: --crops is 1 (the centre) or 3 (left, centre and right, "
                "AVION's), not 2\n");
        return 2;
    }
    if ((rc = tb_dist_init(NULL, NULL)) < 0 || (rc = tb_ckpt_info(c->ckpt, &info)) < 0)
        goto end;
    if (!c->label[0])
        e.label = info.label;
    if ((status = eval_check(c, &info, e.label, dtype)) != 0) {
        rc = 0;
        goto end;
    }
    if (!strcmp(info.task, "clip"))
        status = eval_clip(c, &info, e.label, &ao);
    else
        status = (rc = eval_cls_run(&e, &info, &ao, dtype)) != 0;
end:
    if (rc < 0)
        cli_report("eval", rc);
    tb_cls_action_list_free(&e.actions);
    tb_label_space_free(&e.space);
    tb_ann_free(&e.train);
    tb_ann_free(&e.val);
    if (status)
        tb_dist_finalize_failed(); /* the others may wait in a collective: never a hang */
    else
        tb_dist_finalize();
    return status;
}

const struct cli_command cli_cmd_eval = {
    .name = "eval",
    .args = "",
    .summary = "evaluate a checkpoint: top-1/top-5 and mean class accuracy with views x crops "
               "averaged (probabilities, and logits); EK-100 verb/noun/action with --label "
               "action --train; for a --task clip one, zero-shot retrieval (mAP, nDCG) and "
               "classification",
    .details = NULL,
    .flags = eval_flags,
    .n_flags = (int)(sizeof(eval_flags) / sizeof(eval_flags[0])),
    .config_size = sizeof(struct eval_config),
    .min_args = 0,
    .max_args = 0,
    .run = run_eval,
};

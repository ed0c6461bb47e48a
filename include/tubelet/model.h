/* include/tubelet/model.h - models and their parameters.
 *
 * Parameter registry (tb_params): every model lists its parameters once - names as timm,
 * VideoMAE or OpenAI CLIP name them (DESIGN.md section 4), shapes, weight decay, the
 * initialisation - in one block of backend memory. The same table drives initialisation,
 * loading, the optimizer, the gradient norm, the data-parallel reduction and checkpoints.
 * Parameter memory belongs to the model's backend: it is read and written only through the
 * calls below (copies to and from host memory), never through a pointer.
 *
 * The video Vision Transformer (tb_vit; timm / VideoMAE): tubelet patch embedding (Conv3d
 * with stride = kernel), learned or fixed sin-cos positions, a class token or mean pooling
 * (fc_norm), pre-LN blocks with joint space-time attention, a linear head (or none: an
 * encoder whose output is the pooled, normalised features). LayerNorm eps 1e-6, exact GELU,
 * MLP 4x wide, qkv split as (3, NH, HS), attention scale HS^-0.5; tokens in the order
 * PyTorch flattens the Conv3d output (t, h, w). Forward and backward are explicit per layer;
 * activation buffers are planned from the batch size before the first step, so peak memory
 * is known up front. Tests: tests/test_vit.c (against PyTorch), tests/test_backend.c. */
#ifndef TUBELET_MODEL_H
#define TUBELET_MODEL_H

#include "tubelet/base.h"
#include "tubelet/safetensors.h"
#include "tubelet/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameters -------------------------------------------------------------------------- */

enum tb_init {
    TB_INIT_ZERO,
    TB_INIT_ONE,
    TB_INIT_TRUNC_NORMAL, /* timm's trunc_normal_(std=.02): N(0, std) cut at 2 std */
    TB_INIT_NORMAL,       /* N(0, std) (CLIP's embeddings and projections) */
    TB_INIT_CONST,        /* init_std's value (CLIP's logit_scale: log(1 / 0.07)) */
};

struct tb_param {
    const char *name;          /* e.g. "blocks.3.attn.qkv.weight" */
    int n_dims;
    int64_t shape[5];
    int64_t n;                 /* elements */
    int64_t offset;            /* floats before it in the parameter block */
    int decay;                 /* weight decay applies: AVION's rule by name and rank (none
                                * on 0/1-D tensors, biases, norms, position embeddings,
                                * cls_token; docs/RECIPES.md) */
    enum tb_init init;
    float init_std;            /* the (truncated) normal's std: 0.02 unless the model sets it;
                                * TB_INIT_CONST's value */
    float lr_scale;            /* its learning rate's factor (1; layer decay sets it) */
    int loaded;                /* set by tb_params_load_from */
};

typedef struct tb_params tb_params;

TB_API int tb_params_count(const tb_params *r);
TB_API const struct tb_param *tb_params_at(const tb_params *r, int i);
/* The index of the parameter called name, or -1. */
TB_API int tb_params_find(const tb_params *r, const char *name);
/* Floats of all parameters together. */
TB_API int64_t tb_params_floats(const tb_params *r);
/* Parameter i to or from host memory (n floats); its gradient (once planned: see the
 * model) to host memory. */
TB_API int tb_params_read(tb_params *r, int i, float *host);
TB_API int tb_params_write(tb_params *r, int i, const float *host);
TB_API int tb_params_read_grad(tb_params *r, int i, float *host);
/* Every parameter from its tensor of the same name and shape in f (extra tensors ignored). */
TB_API int tb_params_load(tb_params *r, const struct tb_st_file *f);
/* How tb_params_load_from fits a CLIP tower's temporal embedding of another frame count. */
enum tb_inflate {
    TB_INFLATE_NONE,        /* it must fit */
    TB_INFLATE_BILINEAR,    /* AVION's inflate_positional_embeds(load_temporal_fix='bilinear'):
                             * fewer rows interpolated linearly over time (F.interpolate,
                             * align_corners False), more rows cut to the first ones */
};
/* Initialisation from another model's file (fine-tuning): each parameter found under
 * "visual." + its name (a dual encoder's video tower: tubelet's --task clip, AVION's; first,
 * since the text tower's names are OpenAI CLIP's top-level ones; not for a model with
 * visual.* names of its own, a dual encoder), its name, or "encoder." +
 * its name (a pretraining checkpoint's encoder: VideoMAE's, tubelet's --task mae), with its
 * shape, is loaded and marked loaded; the others are left as
 * they were. A tensor of the right name and another shape is an error naming both shapes
 * (temporal_embedding: unless inflate says how to fit it). *loaded gets the count. */
TB_API int tb_params_load_from(tb_params *r, const struct tb_st_file *f, enum tb_inflate inflate,
                               int *loaded);
/* The temporal fit of tb_params_load_from on host rows: src (t_in, D) -> dst (t_out, D). */
TB_API void tb_inflate_rows(float *dst, int t_out, const float *src, int t_in, int D);
/* Layer-wise learning-rate decay (BEiT, VideoMAE): lr_scale = decay^(depth + 1 - layer),
 * layer 0 the patch embedding and positions, N + 1 block N, depth + 1 the rest. */
TB_API void tb_params_layer_decay(tb_params *r, int depth, double decay);
/* Every parameter by its init kind, from one generator keyed by seed. */
TB_API int tb_params_init(tb_params *r, uint64_t seed);
/* Fused updates (tb_train's --fused-update): the backward hands each gradient span to
 * done(ctx, span) the moment the span is complete (tb_optim_update_span applies it), and the
 * spans that no dead activation space hosts share one buffer of the largest one's size, so
 * that no more than one of them lives at a time: the gradients cost one span, not a copy of
 * the parameters. Set before the model's plan (a plan made before keeps every gradient);
 * done may come later (NULL: a backward fails until it is set). Then the gradients are not
 * kept: tb_optim_update, tb_grad_norm and tb_params_read_grad refuse. */
TB_API void tb_params_fuse(tb_params *r, int (*done)(void *ctx, int span), void *ctx);
/* Without fusing: the backward hands each complete gradient span to done(ctx, span) (the
 * training loop starts its data-parallel reduction there); the gradients are kept as usual.
 * A failure of done fails the backward. */
TB_API void tb_params_on_span(tb_params *r, int (*done)(void *ctx, int span), void *ctx);
/* Gradient spans: how many, and the first parameter of span s and the one past its last. */
TB_API int tb_params_spans(const tb_params *r);
TB_API void tb_params_span_range(const tb_params *r, int s, int *first, int *end);

/* ---- the video ViT ----------------------------------------------------------------------- */

enum tb_pool {
    TB_POOL_CLS,               /* a class token, its final norm (`norm`) */
    TB_POOL_MEAN,              /* the mean of the tokens, its norm (`fc_norm`) */
    TB_POOL_NONE,              /* every token normed (`norm`): features (B, N, D); no head */
};
enum tb_pos { TB_POS_LEARNED, TB_POS_SINCOS };
/* The blocks' attention (the `attention` setting, src/train/settings.h): global, every token
 * attends to every token of its clip (timm's, VideoMAE's, CLIP's). A variant is a value here,
 * its choice there, and its op (docs/DEVELOPING.md, "Adding a model"). */
enum tb_attention { TB_ATTENTION_GLOBAL, TB_ATTENTION_N };
/* Parameter layout and token embedding: timm's / VideoMAE's, or AVION's CLIP video tower in
 * OpenAI CLIP's names (visual.conv1 over each frame's 3 P P patches, no bias - or, with
 * tubelet TU > 1, over 3 TU P P tubes; a class embedding; positional_embedding (1 + HW, D)
 * tiled over the T / TU slices plus temporal_embedding (T / TU, D; zeros at init, none for
 * one slice), the class token getting spatial row 0 only; ln_pre; transformer.resblocks.N;
 * ln_post on the class token; x @ proj (D, E)). */
enum tb_layout { TB_LAYOUT_TIMM, TB_LAYOUT_CLIP };

struct tb_vit_config {
    int dim, depth, heads;     /* D, L, NH */
    int patch, tubelet;        /* P, TU */
    int frames, height, width; /* T, H, W of the input clips */
    int classes;               /* K; 0: no head, the output is the features (B, D) */
    enum tb_pool pool;
    enum tb_pos pos;
    enum tb_attention attention;
    int recompute;             /* 1: keep only each block's input; the backward runs the block's
                                * forward again (activation memory of one block, ~1.2x compute) */
    int recompute_mlp;         /* K < depth: blocks 0..K-1 keep no MLP hidden layer (fc1's
                                * output) and no attention residual sum (x + proj(att)): 5 of
                                * a block's 11 rows per token; the backward recomputes both,
                                * two products (~0.8% of a step per block). Not with
                                * recompute. The same numbers either way. */
    int qv_bias;               /* VideoMAE's attention biases: q and v (attn.q_bias, attn.v_bias),
                                * no k bias; else timm's attn.qkv.bias */
    int keep;                  /* 0: every patch token; else each clip keeps this many (MAE's
                                * visible tokens), chosen per batch by tb_vit_set_keep: the
                                * blocks see only those (memory and time scale with keep) */
    enum tb_layout layout;     /* CLIP: pool cls, learned positions; tubelet 1 is AVION's (and
                                * loads OpenAI's weights); a projection (embed) or, as AVION's
                                * VideoClassifier, a head on ln_post (classes) */
    int embed;                 /* CLIP: E, the projection's width; the features are (B, E) */
    double head_init_scale;    /* head.weight's initial values times this (VideoMAE's
                                * init_scale, 0.001 in fine-tuning); 0: 1 */
    const char *backend;       /* where it runs: "cpu" (NULL, "": the default) or "cpu-guarded"
                                * (a test backend: see tests/test_backend.c); borrowed */
    enum tb_dtype dtype;       /* TB_DTYPE_F32, or TB_DTYPE_BF16: bf16 mode (docs/PRECISION.md;
                                * f32 master weights and gradients, the products' operands and
                                * outputs rounded to bf16; timm layout, a model of its own) */
};

typedef struct tb_vit tb_vit;

/* Check the config, open its backend and allocate the parameters (zero). */
TB_API int tb_vit_open(tb_vit **out, const struct tb_vit_config *cfg);
TB_API void tb_vit_close(tb_vit **m);
TB_API const struct tb_vit_config *tb_vit_config(const tb_vit *m);
/* The parameter registry. */
TB_API tb_params *tb_vit_params(tb_vit *m);
/* The name of the backend it runs on. */
TB_API const char *tb_vit_backend(const tb_vit *m);

/* timm's initialisation: truncated normal (std 0.02) for weights, position and class
 * embeddings, zero biases, LayerNorm 1/0, from a seed. */
TB_API int tb_vit_init(tb_vit *m, uint64_t seed);

/* What a step's memory plan holds: the arena (activations, scratch and the gradients, most
 * of which live in activation space the backward is done with), and the most bytes of
 * activations and scratch live at one moment of the step. */
struct tb_plan_bytes {
    int64_t arena, activations;
};

/* Allocate activation buffers for batches of up to B clips; *bytes (may be NULL) gets their
 * sizes. A plan larger than this machine's memory fails with TB_ENOMEM, a message giving the
 * bytes needed and the flags that lower it. Gradients exist once planned; most of them live
 * in activation space the backward is done with, so they hold the last backward's gradients
 * until the next forward overwrites them. */
TB_API int tb_vit_plan(tb_vit *m, int B, struct tb_plan_bytes *bytes);

/* The input of the next forward, from host memory: video float (B, 3, T, H, W), or uint8
 * clips (B, T, H, W, 3) as the loader gives them, normalised on the backend by (x - mean) /
 * std (3 values each, 0-255 scale) and mirrored where flip[b] (flip may be NULL). */
TB_API int tb_vit_set_video(tb_vit *m, const float *video, int B);
TB_API int tb_vit_set_clips(tb_vit *m, const uint8_t *clips, const uint8_t *flip, int B,
                            const float mean[3], const float std[3]);
/* The patch tokens each clip keeps (config keep > 0): idx (B, keep; host), each row strictly
 * ascending token indices (t, h, w order) below (T/TU)(H/P)(W/P). Once per input, after it. */
TB_API int tb_vit_set_keep(tb_vit *m, const int32_t *idx);
/* Drop path (stochastic depth) for the next forward: scale (L, 2, B; host) each block's
 * attention and MLP branch factor per clip - 0 (dropped) or 1 / keep probability. Once per
 * input, after it; a forward without it drops nothing. tb_vit_drop_path_draw fills scale for
 * clips that are dataset samples index (B) of epoch: VideoMAE's rates (linspace(0, rate, L)
 * over the blocks), each clip's draws from (seed, TB_RNG_DROP_PATH, epoch, index) alone. */
TB_API int tb_vit_set_drop_path(tb_vit *m, const float *scale);
TB_API void tb_vit_drop_path_draw(float *scale, int L, int B, double rate, uint64_t seed,
                                  int64_t epoch, const int64_t *index);
/* Batch mixing of the input set, in place (tb_mix_draw draws lam and the box): mixup (box
 * NULL) makes clip b lam clip b + (1 - lam) clip B-1-b; cutmix (box: rows y0..y1, columns
 * x0..x1 of the frame, end exclusive) gives clip b that box of clip B-1-b in every frame.
 * Once per input, after it (and after tb_vit_erase: VideoMAE erases each clip before it
 * mixes the batch). */
TB_API int tb_vit_mix(tb_vit *m, float lam, const int box[4]);
/* Random erasing of the input set, in place: boxes (B, T, 4; host) frame t of clip b's box
 * (y0, y1, x0, x1; y0 < 0: none), its values normals from the stream (seed, streams[b])
 * (tb_erase_draw fills both). */
TB_API int tb_vit_erase(tb_vit *m, const int32_t *boxes, uint64_t seed, const uint64_t *streams);
/* Dropout before the head for the next forward: mask (B, D; host), each 0 or 1 / (1 - rate)
 * (tb_dropout_draw). Once per input, after it; a forward without it drops nothing. */
TB_API int tb_vit_set_head_dropout(tb_vit *m, const float *mask);
/* Forward the input set with soft targets (B, K; host: mixup's, tb_mix_targets), the mean
 * soft-target cross-entropy in *loss (host; NULL: not read back); tb_vit_backward then
 * follows it. */
TB_API int tb_vit_run_soft(tb_vit *m, const float *targets, float *loss);
/* Forward the input set: with labels (B, host), also the mean cross-entropy with label
 * smoothing, in *loss (host; NULL: not read back). */
TB_API int tb_vit_run(tb_vit *m, const int64_t *labels, float smoothing, float *loss);
/* Both in one call. */
TB_API int tb_vit_forward(tb_vit *m, const float *video, int B, const int64_t *labels,
                          float smoothing, float *loss);
TB_API int tb_vit_forward_clips(tb_vit *m, const uint8_t *clips, const uint8_t *flip, int B,
                                const float mean[3], const float std[3], const int64_t *labels,
                                float smoothing, float *loss);
/* The last forward's logits (B, K), or its features (the head's input: the pooled,
 * normalised tokens (B, D), or with pool none every normalised token (B, N, D), N the kept
 * tokens), into host memory; tb_vit_feature_floats tells their floats. */
TB_API int tb_vit_logits(tb_vit *m, float *host);
TB_API int tb_vit_features(tb_vit *m, float *host);
TB_API int64_t tb_vit_feature_floats(const tb_vit *m);
/* Backward of the last forward (which had labels): gradients of every parameter, replaced.
 * Once per forward: the gradients take the space of that forward's activations. */
TB_API int tb_vit_backward(tb_vit *m);
/* Backward from a gradient on the features (host, their shape), a loss outside the model
 * (MAE, contrastive): gradients of every parameter but the head's (left as they were). */
TB_API int tb_vit_backward_features(tb_vit *m, const float *dfeat);

/* ---- VideoMAE pretraining ----------------------------------------------------------------
 *
 * VideoMAE's PretrainVisionTransformer (and v2's decoder masking), names as VideoMAE's
 * (encoder.blocks.N.attn.q_bias, decoder.head.weight, encoder_to_decoder.weight, mask_token).
 * The encoder: the ViT above with q/v attention biases, fixed sin-cos positions added to every
 * patch, then only the visible patches (ascending) through the blocks and encoder.norm; no
 * class token, no head - it holds activations for the visible tokens only. The decoder:
 * encoder_to_decoder (no bias), tokens [visible + pos..., mask_token + pos...] with a sin-cos
 * table of its width, its blocks, decoder.norm and decoder.head on the decoded tokens only,
 * predicting each tube's 3 TU P P values, pixel-major, channel-minor. Target: the decoded
 * tubes' pixels with the input normalisation undone (0-1), each channel normalised over the
 * tube (mean, unbiased std + 1e-6) unless norm_target is 0. Loss: the mean over values of the
 * squared error, averaged over the decoded tokens the encoder did not see.
 * Tests: tests/test_mae.c (against tests/ref/mae_ref.py). */

enum tb_decoder_mask {
    TB_DECODER_MASK_NONE,         /* the decoder decodes every masked token (VideoMAE) */
    TB_DECODER_MASK_RUNNING_CELL, /* VideoMAE v2: of each 2x2 cell of positions the decoder
                                   * drops a rotating set, shifting with each temporal slice */
};

struct tb_mae_config {
    struct tb_vit_config enc;  /* the encoder: width, depth, heads, patch, tubelet, clip shape,
                                * recompute, backend (its pool, classes, positions, q/v bias
                                * and keep are the MAE's to set) */
    double mask_ratio;         /* tube masking: int(ratio * HW) of each temporal slice's HW
                                * positions masked, the same in every slice (0.9) */
    enum tb_decoder_mask decoder_mask;
    double decoder_ratio;      /* running cell: int(4 * ratio) of each cell's 4 dropped (0.5) */
    int dec_dim, dec_depth, dec_heads; /* 384, 4, 6 */
    int norm_target;           /* 1: VideoMAE's normalised target (its default) */
};

typedef struct tb_mae tb_mae;

/* Check the config (a mask ratio that leaves no visible or no masked token, or a running
 * cell over an odd grid, is an error naming it), open its backend, allocate the parameters. */
TB_API int tb_mae_open(tb_mae **out, const struct tb_mae_config *c);
TB_API void tb_mae_close(tb_mae **m);
TB_API const struct tb_mae_config *tb_mae_config(const tb_mae *m);
TB_API tb_params *tb_mae_params(tb_mae *m);
/* Per clip: patch tokens N, visible tokens (the encoder's), decoded tokens (the decoder's
 * queries), and values of one prediction (3 TU P P). */
TB_API void tb_mae_sizes(const tb_mae *m, int *tokens, int *visible, int *decoded, int *values);
/* Truncated normal (std 0.02) weights and mask token, zero biases, LayerNorm 1/0. */
TB_API int tb_mae_init(tb_mae *m, uint64_t seed);
TB_API int tb_mae_plan(tb_mae *m, int B, struct tb_plan_bytes *bytes);
/* The input (as tb_vit_set_video / _set_clips; mean and std on the 0-255 scale are the
 * normalisation applied, undone for the target), then its masks (host, (B, N) each, 1 =
 * masked from the encoder; drop 1 = not decoded, NULL without decoder masking), then run. */
TB_API int tb_mae_set_video(tb_mae *m, const float *video, int B, const float mean[3],
                            const float std[3]);
TB_API int tb_mae_set_clips(tb_mae *m, const uint8_t *clips, const uint8_t *flip, int B,
                            const float mean[3], const float std[3]);
TB_API int tb_mae_set_mask(tb_mae *m, const uint8_t *mask, const uint8_t *drop);
/* The loss into *loss (host; NULL: not read back). */
TB_API int tb_mae_run(tb_mae *m, float *loss);
/* The last forward's predictions (B, decoded, values) into host memory. */
TB_API int tb_mae_pred(tb_mae *m, float *host);
/* Backward of the last forward: gradients of every parameter. Once per forward. */
TB_API int tb_mae_backward(tb_mae *m);
/* The masks of dataset sample `index` in `epoch`, from (seed, TB_RNG_MASK, epoch, index)
 * alone - the same for any number of workers or ranks: mask (N) the tube mask, drop (N; may
 * be NULL without decoder masking) the running cell's. 0, or TB_ENOMEM (no mask made). */
TB_API int tb_mae_make_mask(const tb_mae *m, uint64_t seed, int64_t epoch, int64_t index,
                            uint8_t *mask, uint8_t *drop);

/* ---- the video-text dual encoder ---------------------------------------------------------
 *
 * LaViLa's dual encoder with AVION's towers, OpenAI CLIP's names: the video ViT in its CLIP
 * layout under "visual." (above), and the text tower - token_embedding.weight (V, D),
 * positional_embedding (ctx, D), transformer.resblocks.N (causal, LayerNorm eps 1e-5, exact
 * GELU), ln_final on the end token's row (the first position of the row's largest id, as
 * PyTorch's text.argmax(-1)), x @ text_projection (D, E). Both give unnormalised (B, E)
 * features; tb_clip_infonce is the loss on them. Initialisation as AVION's (the text blocks'
 * N(0, std) matrices with CLIP's stds, the projections N(0, D^-0.5); biases zero).
 * Tests: tests/test_clip.c (against tests/ref/clip_ref.py). */

struct tb_clip_config {
    struct tb_vit_config video; /* width, depth, heads, patch, tubelet (0: 1, AVION's), frames,
                                 * height, width, recompute, backend (the layout, pooling and
                                 * positions are CLIP's) */
    int embed;                  /* E: both projections' width (LaViLa: 256) */
    int vocab, ctx;             /* 49408, 77 */
    int text_width, text_heads, text_layers; /* 512, 8, 12 */
    int text_causal;            /* 1 (LaViLa's; 0: bidirectional) */
    double temperature;         /* InfoNCE's (0: 0.07): logits = cosine / temperature */
    int learn_temperature;      /* 1: CLIP's logit_scale (a 0-dim parameter, log(1 /
                                 * temperature) at init, no decay, clamped to [0, ln 100] as
                                 * LaViLa and AVION do) is learned; 0: frozen */
};

typedef struct tb_clip tb_clip;

TB_API int tb_clip_open(tb_clip **out, const struct tb_clip_config *c);
TB_API void tb_clip_close(tb_clip **m);
TB_API const struct tb_clip_config *tb_clip_config(const tb_clip *m);
TB_API tb_params *tb_clip_params(tb_clip *m);
TB_API int tb_clip_init(tb_clip *m, uint64_t seed);
/* Activations for up to B clips and B captions. */
TB_API int tb_clip_plan(tb_clip *m, int B, struct tb_plan_bytes *bytes);
/* The video input (as tb_vit_set_video / _set_clips), then its features (B, E; host). */
TB_API int tb_clip_set_video(tb_clip *m, const float *video, int B);
TB_API int tb_clip_set_clips(tb_clip *m, const uint8_t *clips, const uint8_t *flip, int B,
                             const float mean[3], const float std[3]);
TB_API int tb_clip_encode_video(tb_clip *m, float *host);
/* Captions as token ids (B, ctx; host; each below vocab), to their features (B, E; host). */
TB_API int tb_clip_encode_text(tb_clip *m, const int32_t *ids, int B, float *host);
/* The logit scale of the next loss: 1 / temperature, or exp(logit_scale) (clamped first, in
 * place, to [0, ln 100]) when it is learned. */
TB_API int tb_clip_logit_scale(tb_clip *m, double *scale);
/* Backward of the last encodings from the gradients on their features (host, (B, E) each;
 * either NULL: that tower is left out) and on the logit scale (used when it is learned): every
 * gradient of what they reach, written. The video tower's goes first: the text tower's
 * gradients may live in the video activations (a text-only call while a video encoding
 * waits for its backward is refused). With fused updates (tb_params_fuse) both at once. */
TB_API int tb_clip_backward(tb_clip *m, const float *dvideo, const float *dtext, double dscale);

/* The symmetric InfoNCE loss (CLIP's, LaViLa's) of N video and N text features (E wide, not
 * normalised; pair i matches): features L2-normalised (norms floored at 1e-12), logits =
 * scale x cosine similarity, the mean of the video->text and text->video cross-entropies
 * over the N rows, into *loss (NaN or infinite where the features are: the caller's check);
 * dv, dt (N, E) and dscale (may each be NULL) get its gradients. Computed in double. Returns 0
 * or TB_ENOMEM. Under data parallelism every process passes all N pairs (gathered) and takes
 * the rows of its own. */
TB_API int tb_clip_infonce(const float *v, const float *t, int N, int E, double scale,
                           double *loss, float *dv, float *dt, double *dscale);
/* AVION's max-margin ranking loss (its EK-100 MIR fine-tuning; MaxMarginRankingLoss with
 * fix_norm): x = cosine(text i, video j); over i != j, relu(margin - (x_ii - x_ij)) and
 * relu(margin - (x_ii - x_ji)), averaged. N >= 2 (else TB_EINVAL); the rest as
 * tb_clip_infonce. */
TB_API int tb_clip_max_margin(const float *v, const float *t, int N, int E, double margin,
                              double *loss, float *dv, float *dt);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_MODEL_H */

/* src/model/text.h - the text tower (text.c) inside the video-text dual encoder (clip.c):
 * LaViLa's / AVION's TextTransformer in OpenAI CLIP's names. Internal: the dual encoder owns
 * the backend and the registry; tb_clip_* in model.h is the public face. */
#ifndef TUBELET_MODEL_TEXT_H
#define TUBELET_MODEL_TEXT_H

#include "model/block.h"
#include "model/params.h"
#include "model/plan.h"

struct tbi_text_config {
    int vocab, ctx;            /* 49408 ids, 77 tokens a caption */
    int width, heads, layers;  /* 512, 8, 12 */
    int embed;                 /* the projection's width E (256) */
    float eps;                 /* LayerNorm: 1e-5 */
    int act;                   /* enum tbi_act: exact GELU (AVION's) */
    int causal;                /* 1: each token sees itself and those before it */
    int dt;                    /* enum tb_dtype: bf16 mode's (the video tower's) */
};

struct tbi_text;

/* A text tower on be whose parameters join reg under prefix, as its own gradient spans. */
int tbi_text_open_in(struct tbi_text **out, const struct tbi_text_config *c, tbi_backend *be,
                     struct tb_params *reg, const char *prefix);
void tbi_text_close(struct tbi_text **t);
/* Declare the buffers of a step of B captions into p (the dual encoder's plan), at ticks t
 * (its forward: embedding, one per block, head: layers + 2 ticks; t->patches unused), the
 * gradient spans' homes among them; once p is allocated, tbi_text_bind points the block sets
 * into theirs. */
int tbi_text_declare(struct tbi_text *t, int B, struct tbi_plan *p, const struct tbi_ticks *k);
void tbi_text_bind(struct tbi_text *t, int B);
/* Every id of ids (B, ctx; host) inside the vocabulary (else a message naming the caption
 * and position); eot (B, may be NULL) gets each row's end-token position: its largest id's
 * first position. */
int tbi_text_check_ids(const struct tbi_text_config *c, const int32_t *ids, int B, int *eot);
/* Forward B captions of token ids (host): their projected features (B, E) in tbi_text_emb. */
int tbi_text_forward(struct tbi_text *t, const int32_t *ids, int B);
float *tbi_text_emb(struct tbi_text *t);
/* Captions in the last forward. */
int tbi_text_batch(const struct tbi_text *t);
/* Backward from tbi_text_demb (B, E), which the caller fills: every gradient, written. */
float *tbi_text_demb(struct tbi_text *t);
int tbi_text_backward(struct tbi_text *t);

#endif /* TUBELET_MODEL_TEXT_H */

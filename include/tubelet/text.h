/* include/tubelet/text.h - OpenAI CLIP's byte-pair-encoding tokenizer as AVION uses it
 * (avion/data/tokenizer.py): captions to the 49408-token vocabulary of CLIP's text tower.
 *
 * A caption is cleaned (html.unescape twice, whitespace collapsed, stripped, lower-cased as
 * Python does), split by CLIP's pattern, and each piece is encoded by merge rank. ftfy.fix_text,
 * which AVION applies first, is left out: it changes none of 53,655 distinct real captions
 * (docs/TEXT.md, bench/ftfy_check.py). Ids are exactly AVION's on every caption ftfy leaves
 * alone. Tests: tests/test_tokenizer.c (against tests/ref/tokenizer_ref.py). */
#ifndef TUBELET_TEXT_H
#define TUBELET_TEXT_H

#include "tubelet/base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TB_TOKEN_START = 49406, /* <start_of_text>, first of every sequence */
    TB_TOKEN_END = 49407,   /* <end_of_text>, last; the text tower reads its position */
    TB_TOKEN_VOCAB = 49408, /* V: 256 bytes, 256 end-of-word bytes, 48894 merges, 2 specials */
    TB_TOKEN_CONTEXT = 77,  /* S of every CLIP model, AVION's default context length */
};

typedef struct tb_tokenizer tb_tokenizer;

/* Load the merges. merges: a path to a bpe_simple_vocab_16e6.txt[.gz] file (gzip or plain
 * text: a header line, then at least 48894 "left right" lines), or NULL for the copy built
 * into the library (OpenAI's file, data/README.md). A file whose merges could not have been
 * learned in that order (a part used before a line makes it, a token made twice) is refused:
 * TB_EFORMAT naming the line; a missing file TB_ENOENT. *out is NULL on failure. */
TB_API int tb_tokenizer_open(tb_tokenizer **out, const char *merges);

/* Free a tokenizer and set *t to NULL; NULL and *t == NULL are no-ops. */
TB_API void tb_tokenizer_close(tb_tokenizer **t);

/* Tokenize one caption (NUL-terminated UTF-8) into ids[0..ctx): TB_TOKEN_START, the caption's
 * tokens, TB_TOKEN_END, then zeros. A longer caption is cut AVION's way: its first ctx - 2
 * tokens are kept and TB_TOKEN_END is still last (LaViLa instead cuts the end token off).
 * *n_tokens (may be NULL): the length before the cut, start and end included, so callers can
 * count the captions that were cut. Returns 0; TB_EINVAL for ctx < 2 or NULL arguments;
 * TB_EFORMAT for text that is not UTF-8 (the message names the byte). As in AVION, the
 * text "<start_of_text>" inside a caption becomes TB_TOKEN_START (and "<end_of_text>"
 * TB_TOKEN_END), while OpenAI's "<|startoftext|>" is ordinary text. A tokenizer keeps a
 * bounded cache and scratch buffers: one thread at a time per tokenizer (one each). */
TB_API int tb_tokenize(tb_tokenizer *t, const char *text, int32_t *ids, int ctx, int *n_tokens);

#ifdef __cplusplus
}
#endif
#endif /* TUBELET_TEXT_H */

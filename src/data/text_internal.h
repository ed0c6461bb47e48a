/* src/data/text_internal.h - the text steps before byte-pair encoding (text_clean.c), shared
 * with tokenizer.c: UTF-8 decoding, AVION's cleaning, CLIP's pre-tokenisation pattern. */
#ifndef TUBELET_DATA_TEXT_INTERNAL_H
#define TUBELET_DATA_TEXT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* A growable array of code points; free(v) when done. */
struct tbi_cps {
    uint32_t *v;
    size_t n, cap;
};

/* Decode len bytes of strict UTF-8 into out (replacing its contents): 0, TB_ENOMEM, or
 * TB_EFORMAT naming the offending byte (overlong forms, surrogates, code points past
 * U+10FFFF, truncated sequences and stray continuation bytes are all refused). */
int tbi_utf8_decode(const char *s, size_t len, struct tbi_cps *out);

/* Append the UTF-8 of cps[0..n) to *buf (grown with realloc, *cap its size, *len its fill).
 * 0 or TB_ENOMEM. */
int tbi_utf8_encode(const uint32_t *cps, size_t n, uint8_t **buf, size_t *cap, size_t *len);

/* AVION's cleaning without ftfy, in place on text (tmp is scratch): html.unescape twice, strip,
 * \s+ -> ' ', strip, then str.lower (with its final-sigma rule). 0 or TB_ENOMEM. */
int tbi_text_clean(struct tbi_cps *text, struct tbi_cps *tmp);

/* The next piece of cleaned text t[0..n) from *pos on, by CLIP's pattern (AVION's specials)
 * `<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+`
 * under IGNORECASE: 1 and the piece in [*start, *end), with *pos moved past it; 0 at the end. */
int tbi_text_next_piece(const uint32_t *t, size_t n, size_t *pos, size_t *start, size_t *end);

#endif /* TUBELET_DATA_TEXT_INTERNAL_H */

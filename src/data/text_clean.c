/* src/data/text_clean.c - what AVION's tokenizer does to a caption before byte-pair encoding:
 * strict UTF-8 decoding, html.unescape (twice), Python's strip, \s+ collapsing and str.lower,
 * and CLIP's pre-tokenisation pattern. Python defines the meaning, so the character classes
 * are measured from Python itself (text_tables.c, scripts/gen_text_tables.py) rather than
 * taken from a C Unicode library: libunistring or ICU would give their own Unicode version and
 * miss the pattern's IGNORECASE corners. ftfy.fix_text is not done (docs/TEXT.md).
 * Tests: tests/test_tokenizer.c. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/text_internal.h"
#include "data/text_tables.h"

static int cps_reserve(struct tbi_cps *c, size_t n)
{
    if (n <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap : 64;
    while (cap < n)
        cap *= 2;
    uint32_t *v = tbi_realloc(c->v, cap * sizeof(*v));
    if (!v)
        return tbi_err(TB_ENOMEM, "tokenizer: out of memory for %zu code points", n);
    c->v = v;
    c->cap = cap;
    return 0;
}

/* ---- UTF-8 --------------------------------------------------------------------------- */

int tbi_utf8_decode(const char *s, size_t len, struct tbi_cps *out)
{
    const uint8_t *p = (const uint8_t *)s;
    const char *why;
    size_t i = 0;
    out->n = 0;
    TBI_TRY(cps_reserve(out, len + 1));
    while (i < len) {
        uint32_t b = p[i], cp;
        int n_cont;
        /* The second byte's range is narrowed for the leads that could start an overlong
         * form, a surrogate or a code point past U+10FFFF (RFC 3629's table). */
        uint8_t lo = 0x80, hi = 0xBF;
        if (b < 0x80) {
            out->v[out->n++] = b;
            i++;
            continue;
        } else if (b < 0xC0) {
            why = "a continuation byte without a lead byte";
            goto bad;
        } else if (b < 0xC2) {
            why = "an overlong encoding";
            goto bad;
        } else if (b < 0xE0) {
            n_cont = 1;
            cp = b & 0x1F;
        } else if (b < 0xF0) {
            n_cont = 2;
            cp = b & 0x0F;
            if (b == 0xE0)
                lo = 0xA0;
            if (b == 0xED)
                hi = 0x9F;
        } else if (b < 0xF5) {
            n_cont = 3;
            cp = b & 0x07;
            if (b == 0xF0)
                lo = 0x90;
            if (b == 0xF4)
                hi = 0x8F;
        } else {
            why = "a byte that never occurs in UTF-8";
            goto bad;
        }
        for (int k = 1; k <= n_cont; k++) {
            if (i + (size_t)k >= len || (p[i + k] & 0xC0) != 0x80) {
                why = "a sequence cut short";
                goto bad;
            }
            if (k == 1 && (p[i + 1] < lo || p[i + 1] > hi)) {
                why = b == 0xED   ? "a surrogate (U+D800..U+DFFF)"
                      : b == 0xF4 ? "a code point past U+10FFFF"
                                  : "an overlong encoding";
                goto bad;
            }
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        out->v[out->n++] = cp;
        i += (size_t)n_cont + 1;
    }
    return 0;
bad:
    return tbi_err(TB_EFORMAT, "text is not valid UTF-8: byte %zu (0x%02X) starts %s", i, p[i],
                   why);
}

int tbi_utf8_encode(const uint32_t *cps, size_t n, uint8_t **buf, size_t *cap, size_t *len)
{
    if (*len + 4 * n > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + 4 * n)
            c *= 2;
        uint8_t *grown = tbi_realloc(*buf, c);
        if (!grown)
            return tbi_err(TB_ENOMEM, "tokenizer: out of memory for %zu bytes", c);
        *buf = grown;
        *cap = c;
    }
    uint8_t *o = *buf + *len;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        if (c < 0x80) {
            *o++ = (uint8_t)c;
        } else if (c < 0x800) {
            *o++ = (uint8_t)(0xC0 | c >> 6);
            *o++ = (uint8_t)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *o++ = (uint8_t)(0xE0 | c >> 12);
            *o++ = (uint8_t)(0x80 | (c >> 6 & 0x3F));
            *o++ = (uint8_t)(0x80 | (c & 0x3F));
        } else {
            *o++ = (uint8_t)(0xF0 | c >> 18);
            *o++ = (uint8_t)(0x80 | (c >> 12 & 0x3F));
            *o++ = (uint8_t)(0x80 | (c >> 6 & 0x3F));
            *o++ = (uint8_t)(0x80 | (c & 0x3F));
        }
    }
    *len = (size_t)(o - *buf);
    return 0;
}

/* ---- tables -------------------------------------------------------------------------- */

static unsigned char_class(uint32_t c)
{
    if (c < 0x80)
        return tbi_text_ascii_class[c];
    int lo = 0, hi = tbi_text_n_class_runs - 1;
    while (lo < hi) { /* the last run starting at or before c */
        int mid = (lo + hi + 1) / 2;
        if (tbi_text_class_runs[mid].first <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    return tbi_text_class_runs[lo].bits;
}

/* The one-code-point image of c in a sorted table, or c itself. */
static uint32_t map1(const struct tbi_lower1 *t, int n, uint32_t c, int *found)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (t[mid].cp == c) {
            *found = 1;
            return t[mid].to;
        }
        if (t[mid].cp < c)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    *found = 0;
    return c;
}

/* ---- html.unescape ------------------------------------------------------------------- */

static int cmp_entity(const void *key, const void *elem)
{
    return strcmp(key, ((const struct tbi_entity *)elem)->name);
}

static const struct tbi_entity *find_entity(const uint32_t *s, size_t n)
{
    char name[40];
    if (n >= sizeof(name))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] >= 0x80)
            return NULL; /* every name is ASCII */
        name[i] = (char)s[i];
    }
    name[n] = '\0';
    return bsearch(name, tbi_text_entities, (size_t)tbi_text_n_entities,
                   sizeof(tbi_text_entities[0]), cmp_entity);
}

static int is_digit(uint32_t c, int hex)
{
    return (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
}

/* The replacement of a numeric reference, as html._replace_charref: Windows-1252 for the C1
 * range and a few others, U+FFFD for surrogates and past U+10FFFF, nothing for the code
 * points HTML forbids. Returns the number of code points written to out (0 or 1). */
static int numeric_ref(uint32_t num, uint32_t *out)
{
    int found;
    uint32_t to = map1(tbi_text_bad_charrefs, tbi_text_n_bad_charrefs, num, &found);
    if (found) {
        *out = to;
        return 1;
    }
    if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
        *out = 0xFFFD;
        return 1;
    }
    for (int i = 0; i < tbi_text_n_bad_codepoints; i++)
        if (tbi_text_bad_codepoints[i] == num)
            return 0;
    *out = num;
    return 1;
}

/* One html.unescape of in[0..n) into out (never longer: every reference is at least as long
 * as what replaces it); returns the output length. Python's pattern is
 * &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?), replaced left to right. */
static size_t html_unescape(const uint32_t *in, size_t n, uint32_t *out)
{
    size_t o = 0, i = 0;
    while (i < n) {
        if (in[i] != '&') {
            out[o++] = in[i++];
            continue;
        }
        size_t j = i + 1;
        if (j < n && in[j] == '#') {
            int hex = j + 1 < n && (in[j + 1] == 'x' || in[j + 1] == 'X');
            size_t d = j + 1 + (size_t)hex, e = d;
            uint32_t num = 0;
            while (e < n && is_digit(in[e], hex)) {
                uint32_t v = in[e] <= '9' ? in[e] - '0' : (in[e] | 0x20) - 'a' + 10;
                /* Saturate: anything past U+10FFFF is replaced the same way. */
                num = num > 0x10FFFF ? num : num * (hex ? 16u : 10u) + v;
                e++;
            }
            if (e == d) { /* "&#" without digits: no reference here */
                out[o++] = in[i++];
                continue;
            }
            if (e < n && in[e] == ';')
                e++;
            o += (size_t)numeric_ref(num, out + o);
            i = e;
            continue;
        }
        size_t e = j;
        while (e < n && e - j < 32 && in[e] != '\t' && in[e] != '\n' && in[e] != '\f' &&
               in[e] != ' ' && in[e] != '<' && in[e] != '&' && in[e] != '#' && in[e] != ';')
            e++;
        if (e == j) {
            out[o++] = in[i++];
            continue;
        }
        if (e < n && in[e] == ';')
            e++;
        /* The whole name, else its longest prefix of 2 or more that is a name (those are
         * the legacy names without ';'), the rest kept; else the text unchanged. */
        const struct tbi_entity *ent = find_entity(in + j, e - j);
        size_t used = e - j;
        for (size_t x = e - j - 1; !ent && x >= 2; x--) {
            ent = find_entity(in + j, x);
            used = x;
        }
        if (ent) {
            for (int k = 0; k < ent->n; k++)
                out[o++] = ent->cps[k];
            j += used;
        } else {
            out[o++] = '&';
        }
        while (j < e)
            out[o++] = in[j++];
        i = e;
    }
    return o;
}

/* ---- whitespace and case ------------------------------------------------------------- */

static size_t strip(uint32_t *t, size_t n)
{
    size_t a = 0;
    while (n > 0 && (char_class(t[n - 1]) & TBI_TC_PY_SPACE))
        n--;
    while (a < n && (char_class(t[a]) & TBI_TC_PY_SPACE))
        a++;
    memmove(t, t + a, (n - a) * sizeof(*t));
    return n - a;
}

static size_t collapse_space(uint32_t *t, size_t n)
{
    size_t o = 0;
    int in_run = 0;
    for (size_t i = 0; i < n; i++) {
        int space = (char_class(t[i]) & TBI_TC_RE_SPACE) != 0;
        if (!space)
            t[o++] = t[i];
        else if (!in_run)
            t[o++] = ' ';
        in_run = space;
    }
    return o;
}

/* str.lower's choice for U+03A3 at t[i]: final sigma when a cased letter comes before it
 * (case-ignorable ones skipped) and none after it. */
static uint32_t lower_sigma(const uint32_t *t, size_t n, size_t i)
{
    size_t j = i;
    while (j > 0 && (char_class(t[j - 1]) & TBI_TC_CASE_IGNORABLE))
        j--;
    int final = j > 0 && (char_class(t[j - 1]) & TBI_TC_CASED);
    if (final) {
        size_t k = i + 1;
        while (k < n && (char_class(t[k]) & TBI_TC_CASE_IGNORABLE))
            k++;
        final = k == n || !(char_class(t[k]) & TBI_TC_CASED);
    }
    return final ? 0x3C2 : 0x3C3;
}

/* str.lower of in[0..n) into out (room for 3 per code point); returns the output length. */
static size_t lower(const uint32_t *in, size_t n, uint32_t *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = in[i];
        int found = 0;
        if (c < 0x80) {
            out[o++] = c >= 'A' && c <= 'Z' ? c + 32 : c;
            continue;
        }
        if (c == 0x3A3) {
            out[o++] = lower_sigma(in, n, i);
            continue;
        }
        for (int k = 0; k < tbi_text_n_lowern && !found; k++)
            if (tbi_text_lowern[k].cp == c) {
                for (int m = 0; m < tbi_text_lowern[k].n; m++)
                    out[o++] = tbi_text_lowern[k].to[m];
                found = 1;
            }
        if (!found)
            out[o++] = map1(tbi_text_lower1, tbi_text_n_lower1, c, &found);
    }
    return o;
}

int tbi_text_clean(struct tbi_cps *text, struct tbi_cps *tmp)
{
    TBI_TRY(cps_reserve(tmp, text->n + 1));
    tmp->n = html_unescape(text->v, text->n, tmp->v);
    text->n = html_unescape(tmp->v, tmp->n, text->v);
    text->n = strip(text->v, text->n);
    text->n = collapse_space(text->v, text->n);
    text->n = strip(text->v, text->n);
    TBI_TRY(cps_reserve(tmp, 3 * text->n + 1));
    tmp->n = lower(text->v, text->n, tmp->v);
    TBI_TRY(cps_reserve(text, tmp->n + 1));
    memcpy(text->v, tmp->v, tmp->n * sizeof(*tmp->v));
    text->n = tmp->n;
    return 0;
}

/* ---- the pattern --------------------------------------------------------------------- */

/* Whether text code point c matches the pattern's literal character lit under IGNORECASE. */
static int literal_eq(uint32_t c, char lit)
{
    if (c == (uint32_t)(unsigned char)lit)
        return 1;
    for (int i = 0; i < tbi_text_n_literal_alts; i++) {
        const struct tbi_literal_alts *a = &tbi_text_literal_alts[i];
        if (a->lit != lit)
            continue;
        for (int k = 0; k < a->n; k++)
            if (a->cps[k] == c)
                return 1;
        return 0;
    }
    return 0;
}

static int literal_at(const uint32_t *t, size_t n, size_t i, const char *lit)
{
    for (; *lit; lit++, i++)
        if (i >= n || !literal_eq(t[i], *lit))
            return 0;
    return 1;
}

/* The pattern's alternatives that are literals, in the pattern's order (first match wins). */
static const char *const literals[] = {
    "<start_of_text>", "<end_of_text>", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d",
};

int tbi_text_next_piece(const uint32_t *t, size_t n, size_t *pos, size_t *start, size_t *end)
{
    for (size_t i = *pos; i < n; i++) {
        size_t e = i;
        int lit = literal_eq(t[i], '<') || literal_eq(t[i], '\'');
        for (size_t k = 0; lit && k < sizeof(literals) / sizeof(literals[0]) && e == i; k++)
            if (literal_at(t, n, i, literals[k]))
                e = i + strlen(literals[k]);
        if (e == i) {
            unsigned c = char_class(t[i]);
            if (c & TBI_TC_LETTER) {
                while (e < n && (char_class(t[e]) & TBI_TC_LETTER))
                    e++;
            } else if (c & TBI_TC_NUMBER) {
                e = i + 1;
            } else if (c & TBI_TC_OTHER) {
                while (e < n && (char_class(t[e]) & TBI_TC_OTHER))
                    e++;
            } else {
                continue; /* whitespace, or a code point in no class: skipped */
            }
        }
        *start = i;
        *end = e;
        *pos = e;
        return 1;
    }
    *pos = n;
    return 0;
}

/* src/data/tokenizer.c - CLIP's byte-pair encoding as AVION runs it (avion/data/tokenizer.py):
 * the merges file to a table of ranked pairs, captions to ids with AVION's truncation. The
 * text steps before it are in text_clean.c. Not here: decoding ids back to text, other
 * vocabularies, ftfy (docs/TEXT.md). Tests: tests/test_tokenizer.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/internal.h"
#include "data/text_internal.h"
#include "tubelet/text.h"

/* The merges file built into the library (CMake writes it from data/, cmake/embed.cmake). */
extern const unsigned char tbi_bpe_merges_gz[];
extern const size_t tbi_bpe_merges_gz_bytes;

#define N_MERGES (TB_TOKEN_VOCAB - 512 - 2) /* the lines AVION reads: merges[1:49152-256-2+1] */
#define MAX_LINE 1024
#define PAIR_SLOTS (1u << 17)  /* a power of two, over twice N_MERGES */
#define VOCAB_SLOTS (1u << 17) /* likewise for the 512 + N_MERGES token strings */

/* The BPE cache: direct-mapped, a fixed number of slots, so memory stays bounded however many
 * distinct words go through (Python's is an unbounded dict). A word longer than CACHE_KEY
 * bytes or of more than CACHE_IDS tokens is encoded each time. */
#define CACHE_SLOTS 4096
#define CACHE_KEY 46
#define CACHE_IDS 16

struct cache_slot {
    uint64_t hash;
    uint8_t key_len, n_ids; /* key_len 0: empty */
    char key[CACHE_KEY];
    int32_t ids[CACHE_IDS];
};

/* A pair of adjacent tokens that a merge joins: the merge's rank (its line - 1) makes token
 * 512 + rank. */
struct pair_slot {
    uint32_t key; /* (left << 16 | right) + 1; 0: empty */
    int32_t rank;
};

struct heap_item {
    int32_t rank, pos;
};

struct tb_tokenizer {
    uint16_t byte_id[256]; /* token of byte b inside a word; + 256 at its end ("</w>") */
    struct pair_slot *pairs;
    struct cache_slot *cache;
    /* Scratch, reused by every call (hence one thread at a time). */
    struct tbi_cps text, tmp;
    uint8_t *bytes;
    size_t bytes_cap;
    int32_t *sym, *next, *prev;
    struct heap_item *heap;
    size_t sym_cap;
};

/* ---- the byte alphabet --------------------------------------------------------------- */

/* bytes_to_unicode: the printable Latin-1 bytes keep their code point, the other 68 map to
 * U+0100 onwards in byte order; the vocabulary lists the printable ones first. */
static int printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

/* byte_id[b]: b's token; chars[i]: the code point of token i < 256 in the merges file. */
static void byte_alphabet(uint16_t byte_id[256], uint32_t chars[256])
{
    int n = 0, extra = 0;
    for (int b = 0; b < 256; b++)
        if (printable(b)) {
            chars[n] = (uint32_t)b;
            byte_id[b] = (uint16_t)n++;
        }
    for (int b = 0; b < 256; b++)
        if (!printable(b)) {
            chars[n] = 256u + (uint32_t)extra++;
            byte_id[b] = (uint16_t)n++;
        }
}

/* ---- token strings, while loading ---------------------------------------------------- */

struct vocab_slot {
    uint32_t off, len; /* the string, in the arena */
    int32_t id;        /* -1: empty */
};

struct vocab {
    char *arena;
    size_t arena_len, arena_cap;
    struct vocab_slot *slots; /* VOCAB_SLOTS, open addressing */
};

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static struct vocab_slot *vocab_slot(struct vocab *v, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_bytes(s, n) & (VOCAB_SLOTS - 1);
    for (;; i = (i + 1) & (VOCAB_SLOTS - 1)) {
        struct vocab_slot *e = &v->slots[i];
        if (e->id < 0 || (e->len == n && !memcmp(v->arena + e->off, s, n)))
            return e;
    }
}

static int vocab_find(struct vocab *v, const char *s, size_t n)
{
    return vocab_slot(v, s, n)->id;
}

/* Add token id spelled a then b (b may be empty). */
static int vocab_add(struct vocab *v, const char *a, size_t na, const char *b, size_t nb, int id)
{
    if (v->arena_len + na + nb > v->arena_cap) {
        size_t cap = v->arena_cap ? 2 * v->arena_cap : 1 << 20;
        char *grown = tbi_realloc(v->arena, cap);
        if (!grown)
            return tbi_err(TB_ENOMEM, "tokenizer: out of memory for the token strings");
        v->arena = grown;
        v->arena_cap = cap;
    }
    char *s = v->arena + v->arena_len;
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    struct vocab_slot *e = vocab_slot(v, s, na + nb);
    TB_ASSERT(e->id < 0);
    e->off = (uint32_t)v->arena_len;
    e->len = (uint32_t)(na + nb);
    e->id = id;
    v->arena_len += na + nb;
    return 0;
}

/* ---- the merges file ----------------------------------------------------------------- */

struct merges_src {
    const char *name; /* for messages */
    gzFile gz;        /* a file, gzip or plain (zlib reads both) */
    z_stream zs;      /* or the built-in copy */
    int zs_open, eof;
};

static int src_open(struct merges_src *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    if (path) {
        s->name = path;
        errno = 0;
        s->gz = gzopen(path, "rb");
        if (!s->gz)
            return tbi_err(errno == ENOENT ? TB_ENOENT : TB_EIO, "%s: cannot open: %s", path,
                           errno ? strerror(errno) : "out of memory");
        return 0;
    }
    s->name = "the built-in merges";
    s->zs.next_in = (unsigned char *)tbi_bpe_merges_gz;
    s->zs.avail_in = (uInt)tbi_bpe_merges_gz_bytes;
    if (inflateInit2(&s->zs, 16 + MAX_WBITS) != Z_OK) /* 16: a gzip stream */
        return tbi_err(TB_ENOMEM, "tokenizer: cannot start zlib");
    s->zs_open = 1;
    return 0;
}

static void src_close(struct merges_src *s)
{
    if (s->gz)
        gzclose(s->gz);
    if (s->zs_open)
        inflateEnd(&s->zs);
}

/* Up to cap bytes into buf; *got 0 at the end. */
static int src_read(struct merges_src *s, char *buf, size_t cap, size_t *got)
{
    *got = 0;
    if (s->eof)
        return 0;
    if (s->gz) {
        int n = gzread(s->gz, buf, (unsigned)cap);
        if (n < 0) {
            int zerr;
            const char *msg = gzerror(s->gz, &zerr);
            return tbi_err(zerr == Z_ERRNO ? TB_EIO : TB_EFORMAT, "%s: %s", s->name,
                           zerr == Z_ERRNO ? strerror(errno) : msg);
        }
        *got = (size_t)n;
        s->eof = n == 0;
        return 0;
    }
    s->zs.next_out = (unsigned char *)buf;
    s->zs.avail_out = (uInt)cap;
    int rc = inflate(&s->zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END)
        return tbi_err(TB_EFORMAT, "%s: %s", s->name, s->zs.msg ? s->zs.msg : "corrupt");
    *got = cap - s->zs.avail_out;
    s->eof = rc == Z_STREAM_END;
    return 0;
}

static uint32_t pair_hash(uint32_t key)
{
    return (key * 0x9E3779B1u) >> (32 - 17);
}

static const struct pair_slot *pair_find(const struct pair_slot *pairs, int left, int right)
{
    uint32_t key = ((uint32_t)left << 16 | (uint32_t)right) + 1;
    for (uint32_t i = pair_hash(key);; i = (i + 1) & (PAIR_SLOTS - 1)) {
        if (pairs[i].key == key)
            return &pairs[i];
        if (pairs[i].key == 0)
            return NULL;
    }
}

static void pair_add(struct pair_slot *pairs, int left, int right, int rank)
{
    uint32_t key = ((uint32_t)left << 16 | (uint32_t)right) + 1, i = pair_hash(key);
    while (pairs[i].key != 0)
        i = (i + 1) & (PAIR_SLOTS - 1);
    pairs[i].key = key;
    pairs[i].rank = rank;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Merge line line_no (1-based in the file, the header is line 1): "left right" makes token
 * 512 + rank from two tokens that exist already. */
static int add_merge(struct tb_tokenizer *t, struct vocab *v, const char *name, int line_no,
                     int rank, const char *s, size_t n)
{
    const char *part[2];
    size_t len[2];
    int n_parts = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && is_blank(s[i]))
            i++;
        if (i == n)
            break;
        size_t j = i;
        while (j < n && !is_blank(s[j]))
            j++;
        if (n_parts < 2) {
            part[n_parts] = s + i;
            len[n_parts] = j - i;
        }
        n_parts++;
        i = j;
    }
    if (n_parts != 2)
        return tbi_err(TB_EFORMAT, "%s: line %d: expected two tokens ('left right'), got %d", name,
                       line_no, n_parts);
    int ids[2];
    for (int k = 0; k < 2; k++) {
        ids[k] = vocab_find(v, part[k], len[k]);
        if (ids[k] < 0)
            return tbi_err(TB_EFORMAT,
                           "%s: line %d: '%.*s' is not a token (neither a byte nor "
                           "made by an earlier line)",
                           name, line_no, (int)len[k], part[k]);
    }
    size_t nm = len[0] + len[1];
    char joined[2 * MAX_LINE];
    memcpy(joined, part[0], len[0]);
    memcpy(joined + len[0], part[1], len[1]);
    if (vocab_find(v, joined, nm) >= 0)
        return tbi_err(TB_EFORMAT, "%s: line %d: makes '%.*s', which is a token already", name,
                       line_no, (int)nm, joined);
    TBI_TRY(vocab_add(v, part[0], len[0], part[1], len[1], 512 + rank));
    pair_add(t->pairs, ids[0], ids[1], rank);
    return 0;
}

static int load_merges(struct tb_tokenizer *t, const char *path)
{
    struct merges_src src;
    struct vocab v = {0};
    uint32_t chars[256];
    uint8_t *utf8 = NULL;
    size_t utf8_cap = 0, fill = 0;
    char *buf = NULL;
    int rc = src_open(&src, path), line_no = 0, n_merges = 0;
    if (rc < 0)
        return rc;
    const size_t buf_bytes = 1 << 16;
    buf = tbi_malloc(buf_bytes);
    v.slots = tbi_malloc(VOCAB_SLOTS * sizeof(*v.slots));
    if (!buf || !v.slots) {
        rc = tbi_err(TB_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    for (uint32_t i = 0; i < VOCAB_SLOTS; i++)
        v.slots[i].id = -1;

    /* Tokens 0-255 are the bytes as the file spells them, 256-511 the same with "</w>". */
    byte_alphabet(t->byte_id, chars);
    for (int i = 0; i < 512 && rc == 0; i++) {
        size_t n = 0;
        rc = tbi_utf8_encode(&chars[i % 256], 1, &utf8, &utf8_cap, &n);
        if (rc == 0)
            rc = vocab_add(&v, (char *)utf8, n, "</w>", i < 256 ? 0 : 4, i);
    }

    /* Line by line: a line is cut at '\n', the last may lack one. */
    while (rc == 0 && n_merges < N_MERGES) {
        size_t got;
        if ((rc = src_read(&src, buf + fill, buf_bytes - fill, &got)) < 0)
            break;
        fill += got;
        size_t a = 0;
        for (;;) {
            char *nl = memchr(buf + a, '\n', fill - a);
            if (!nl && !(got == 0 && a < fill))
                break;
            size_t e = nl ? (size_t)(nl - buf) : fill;
            line_no++;
            if (e - a > MAX_LINE) {
                rc = tbi_err(TB_EFORMAT, "%s: line %d: longer than %d bytes", src.name, line_no,
                             MAX_LINE);
                break;
            }
            if (line_no > 1 && n_merges < N_MERGES) /* line 1 is the "#version" header */
                rc = add_merge(t, &v, src.name, line_no, n_merges++, buf + a, e - a);
            a = nl ? e + 1 : fill;
            if (rc < 0 || n_merges == N_MERGES)
                break;
        }
        if (rc < 0 || n_merges == N_MERGES)
            break;
        if (fill - a > MAX_LINE) {
            rc = tbi_err(TB_EFORMAT, "%s: line %d: longer than %d bytes", src.name, line_no + 1,
                         MAX_LINE);
            break;
        }
        memmove(buf, buf + a, fill - a);
        fill -= a;
        if (got == 0) {
            rc = tbi_err(TB_EFORMAT,
                         "%s: has %d merges after its header; CLIP's vocabulary "
                         "needs %d",
                         src.name, n_merges, N_MERGES);
            break;
        }
    }
done:
    src_close(&src);
    free(buf);
    free(utf8);
    free(v.arena);
    free(v.slots);
    return rc;
}

int tb_tokenizer_open(tb_tokenizer **out, const char *merges)
{
    if (!out)
        return tbi_err(TB_EINVAL, "tb_tokenizer_open: out is NULL");
    *out = NULL;
    tb_tokenizer *t = tbi_calloc(1, sizeof(*t));
    if (!t)
        return tbi_err(TB_ENOMEM, "tokenizer: out of memory");
    t->pairs = tbi_calloc(PAIR_SLOTS, sizeof(*t->pairs));
    t->cache = tbi_calloc(CACHE_SLOTS, sizeof(*t->cache));
    int rc = !t->pairs || !t->cache ? tbi_err(TB_ENOMEM, "tokenizer: out of memory")
                                    : load_merges(t, merges);
    if (rc < 0) {
        tb_tokenizer_close(&t);
        return rc;
    }
    *out = t;
    return 0;
}

void tb_tokenizer_close(tb_tokenizer **pt)
{
    if (!pt || !*pt)
        return;
    tb_tokenizer *t = *pt;
    free(t->pairs);
    free(t->cache);
    free(t->text.v);
    free(t->tmp.v);
    free(t->bytes);
    free(t->sym);
    free(t->next);
    free(t->prev);
    free(t->heap);
    free(t);
    *pt = NULL;
}

/* ---- byte-pair encoding -------------------------------------------------------------- */

static int heap_less(struct heap_item a, struct heap_item b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it)
{
    size_t i = (*n)++;
    while (i > 0 && heap_less(it, h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n)
{
    struct heap_item top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c]))
            c++;
        if (!heap_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

/* Queue the pair that starts at node pos, if a merge joins it. */
static void push_pair(struct tb_tokenizer *t, size_t *n_heap, int32_t pos)
{
    if (pos < 0 || t->next[pos] < 0)
        return;
    const struct pair_slot *p = pair_find(t->pairs, t->sym[pos], t->sym[t->next[pos]]);
    if (p)
        heap_push(t->heap, n_heap, (struct heap_item){p->rank, pos});
}

static int reserve_bpe(struct tb_tokenizer *t, size_t n)
{
    if (n <= t->sym_cap)
        return 0;
    size_t cap = t->sym_cap ? t->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *sym = tbi_realloc(t->sym, cap * sizeof(*sym));
    if (sym)
        t->sym = sym;
    int32_t *next = tbi_realloc(t->next, cap * sizeof(*next));
    if (next)
        t->next = next;
    int32_t *prev = tbi_realloc(t->prev, cap * sizeof(*prev));
    if (prev)
        t->prev = prev;
    struct heap_item *heap = tbi_realloc(t->heap, 3 * cap * sizeof(*heap));
    if (heap)
        t->heap = heap;
    if (!sym || !next || !prev || !heap)
        return tbi_err(TB_ENOMEM, "tokenizer: out of memory for a %zu-byte word", n);
    t->sym_cap = cap;
    return 0;
}

/* Encode one piece (its UTF-8 bytes w[0..n), n >= 1) into t->sym[0..*n_out). Python's loop merges,
 * while any pair is mergeable, every occurrence (left to right) of the lowest-ranked pair. A heap
 * of (rank, position) does the same in O(n log n): a merge only makes pairs of higher rank
 * (load_merges refuses a file where a merge uses a later token), so all occurrences of one rank
 * come off the heap together, leftmost first; an entry whose pair has changed since it was queued
 * is skipped. */
static int bpe(struct tb_tokenizer *t, const uint8_t *w, size_t n, int *n_out)
{
    TBI_TRY(reserve_bpe(t, n));
    size_t n_heap = 0;
    for (size_t i = 0; i < n; i++) {
        t->sym[i] = t->byte_id[w[i]] + (i + 1 == n ? 256 : 0);
        t->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        t->prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(t, &n_heap, (int32_t)i);
    while (n_heap > 0) {
        struct heap_item it = heap_pop(t->heap, &n_heap);
        int32_t a = it.pos, b = t->next[a];
        if (t->sym[a] < 0 || b < 0)
            continue;
        const struct pair_slot *p = pair_find(t->pairs, t->sym[a], t->sym[b]);
        if (!p || p->rank != it.rank)
            continue;
        t->sym[a] = 512 + it.rank;
        t->sym[b] = -1;
        t->next[a] = t->next[b];
        if (t->next[b] >= 0)
            t->prev[t->next[b]] = a;
        push_pair(t, &n_heap, t->prev[a]);
        push_pair(t, &n_heap, a);
    }
    /* Compact the list into sym: the k-th live node has index >= k, so nothing unread is
     * overwritten. */
    int k = 0;
    for (int32_t i = 0; i >= 0; i = t->next[i])
        t->sym[k++] = t->sym[i];
    *n_out = k;
    return 0;
}

/* The tokens of one piece, through the cache; *ids points at them (in the cache or in t->sym,
 * valid until the next call). */
static int encode_piece(struct tb_tokenizer *t, const uint8_t *w, size_t n, const int32_t **ids,
                        int *n_ids)
{
    uint64_t h = hash_bytes(w, n);
    struct cache_slot *c = &t->cache[h & (CACHE_SLOTS - 1)];
    if (c->key_len == n && c->hash == h && !memcmp(c->key, w, n)) {
        *ids = c->ids;
        *n_ids = c->n_ids;
        return 0;
    }
    TBI_TRY(bpe(t, w, n, n_ids));
    *ids = t->sym;
    if (n <= CACHE_KEY && *n_ids <= CACHE_IDS) {
        c->hash = h;
        c->key_len = (uint8_t)n;
        c->n_ids = (uint8_t)*n_ids;
        memcpy(c->key, w, n);
        memcpy(c->ids, t->sym, (size_t)*n_ids * sizeof(*t->sym));
    }
    return 0;
}

int tb_tokenize(tb_tokenizer *t, const char *text, int32_t *ids, int ctx, int *n_tokens)
{
    if (!t || !text || !ids)
        return tbi_err(TB_EINVAL, "tb_tokenize: %s is NULL",
                       !t      ? "the tokenizer"
                       : !text ? "text"
                               : "ids");
    if (ctx < 2)
        return tbi_err(TB_EINVAL,
                       "tb_tokenize: context %d is too short (at least 2: the "
                       "start and end tokens)",
                       ctx);
    size_t len = strlen(text);
    if (len > (size_t)1 << 28)
        return tbi_err(TB_ERANGE,
                       "tb_tokenize: a %zu-byte caption is too long (at most 256 "
                       "MiB)",
                       len);
    TBI_TRY(tbi_utf8_decode(text, len, &t->text));
    TBI_TRY(tbi_text_clean(&t->text, &t->tmp));

    /* ids[0] is the start token; a caption's k-th token goes to ids[1 + k] while there is
     * room before the last slot, which the end token takes when the caption is cut. */
    int64_t k = 0;
    ids[0] = TB_TOKEN_START;
    size_t pos = 0, a, e;
    while (tbi_text_next_piece(t->text.v, t->text.n, &pos, &a, &e)) {
        size_t n = 0;
        TBI_TRY(tbi_utf8_encode(t->text.v + a, e - a, &t->bytes, &t->bytes_cap, &n));
        const int32_t *piece;
        int n_piece;
        if (n == 15 && !memcmp(t->bytes, "<start_of_text>", 15)) {
            static const int32_t start = TB_TOKEN_START;
            piece = &start;
            n_piece = 1;
        } else if (n == 13 && !memcmp(t->bytes, "<end_of_text>", 13)) {
            static const int32_t end = TB_TOKEN_END;
            piece = &end;
            n_piece = 1;
        } else {
            TBI_TRY(encode_piece(t, t->bytes, n, &piece, &n_piece));
        }
        for (int i = 0; i < n_piece; i++, k++)
            if (1 + k < ctx - 1)
                ids[1 + k] = piece[i];
    }
    if (k + 2 <= ctx) {
        ids[1 + k] = TB_TOKEN_END;
        for (int64_t i = k + 2; i < ctx; i++)
            ids[i] = 0;
    } else {
        ids[ctx - 1] = TB_TOKEN_END;
    }
    if (n_tokens)
        *n_tokens = k + 2 > INT32_MAX ? INT32_MAX : (int)(k + 2);
    return 0;
}

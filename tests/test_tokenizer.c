/* tests/test_tokenizer.c - the CLIP tokenizer (tubelet/text.h) against its Python twin
 * (tests/ref/tokenizer_ref.py, AVION's algorithm on Debian's python3-regex): the same ids and
 * lengths, at three context lengths, for every narration of a synthetic dataset, a list of hard
 * strings and a few thousand seeded random captions (enough distinct words to cycle the
 * bounded cache), with the built-in merges and a file of them; the cut keeps the end token
 * last; invalid UTF-8, bad arguments and bad merges files are clear errors; and
 * `tubelet tokenize` prints the same ids. Skipped (77) where python3-regex is missing. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "tb_test.h"
#include "tubelet/data.h"
#include "tubelet/text.h"

#define PYTHON TB_TEST_PYTHON
#define MERGES TB_SOURCE_DIR "/data/bpe_simple_vocab_16e6.txt.gz"

static const int contexts[] = {77, 16, 2};
#define N_CTX 3

/* Captions whose every step the reference and C must agree on. */
static const char *const hard[] = {
    "a photo of a cat",
    "",
    " ",
    "   \t\n\r  \f\v ",
    "A Man's DOG didn't bark; they're here, we've gone, I'm fine, you'll see, he'd know",
    "'S 'T 'RE 'Ve 'M 'LL 'D ' s'' 'x '",
    u8"it'\u017f and <\u017ftart_of_text> (long s: matches s under IGNORECASE)",
    "Caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x85NGSTR\xC3\x96M fa\xC3\xA7"
    "ade",
    u8"e\u0301 (e + combining acute, not NFC) \u00e9",
    u8"\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u039f\u03a3 \u03a3 A\u03a3 \u03a3a "
    u8"\u0391\u0345\u03a3.",
    u8"\u0130stanbul DI\u0307YARBAKIR \u0131\u0307 \u212a\u212b \u1e9e stra\u00dfe",
    u8"\u0345\u0345abc\u0345 (ypogegrammeni: in no class under IGNORECASE)",
    "0 1 2 3 42 3.14159 1,000,000 2024-01-01 12:30:45 #1 No.7 v2.0",
    u8"\u2170\u2171\u2172 \u2460 \u00b9\u00b2\u00b3 \u0663 \u0ed3 \u00bd \uff11\uff12",
    "!!!??? ... --- ;;; ''' \"\"\" ((([[[{{{ }}}]]]))) @#$%^&*_+=|\\/~`",
    "...and then!? well-known e-mail: x@y.org http://a.b/c?d=e&f=g",
    "&amp; &lt; &gt; &quot; &#39; &apos; &nbsp;x &copy; &eacute;",
    "&amp;amp; &amp;lt;b&amp;gt; &amp;#x41; &amp;amp;amp;lt;",
    "&lt &ltx &amp &AMP &notit; &notin; &not &ampx &Eacute &eacuteX &xyz; & ;&",
    "&#65;&#x41;&#X41;&#65 &#x &#; &#xZ &#0; &#x80; &#x9F; &#1; &#xD800; &#x110000; &#99999999999;",
    "&#13; &#x0D; &#11; &#xFFFE; &#x1FFFF; &#x10FFFF; &#128512;",
    "&thisisaverylongentitynamethatgoesonandon; &abcdefghijklmnopqrstuvwxyzabcdefghij;",
    "<start_of_text> <end_of_text> <START_OF_TEXT>x<End_Of_Text>",
    "<|startoftext|> OpenAI's specials are plain text here <|endoftext|>",
    "<start_of_text<end_of_text>> <<start_of_text>> <start of text>",
    u8"emoji \U0001F44D\U0001F3FD \U0001F1EC\U0001F1E7 family \U0001F468\u200d\U0001F469\u200d"
    u8"\U0001F467 \u2764\ufe0f \U0001F600\U0001F600\U0001F600",
    u8"\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4 "
    u8"\u0e44\u0e17\u0e22 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
    u8"\u05e2\u05d1\u05e8\u05d9\u05ea",
    u8"\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0422\u0415\u041a\u0421\u0422 "
    u8"\u0939\u093f\u0928\u094d\u0926\u0940",
    "tab\there\nnewline\r\nCRLF   many   spaces",
    u8"nbsp\u00a0here ls\u2028ps\u2029 nel\xC2\x85 ideographic\u3000space zwsp\u200bx bom\ufeffy",
    u8"\x1c\x1d\x1e\x1f info separators \x1c\x1f and \u180e mongolian",
    "\x01\x02\x7f controls \x1b[31m red \x1b[0m",
    u8"\u201ccurly quotes\u201d \u2018single\u2019 it\u2019s \u2014 dash \u2026 \ufb01ligature "
    u8"\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48",
    u8"\ufffd replacement \U000E0041 tag \U0010FFFD private \uE000",
    "take plate",
    "open door",
    "put down knife",
    "pick up spoon from drawer",
    "wash tomato",
    "#C C picks a knife from the table",
    "#O man X moves the cloth",
    "word word word word word word word word word word word word word word word word word "
    "word word word word word word word word word word word word word word word word word "
    "word word word word word word word word word word word word word word word word word "
    "word word word word word word word word word word word word word word word word word",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaa abababababababababab",
};
#define N_HARD ((int)(sizeof(hard) / sizeof(hard[0])))

/* Pieces random captions are made of: letters of several scripts, digits, the pattern's
 * literals and their parts, entity fragments, whitespace of both kinds. */
static const char *const bits[] = {
    "a",           "b",        "e",
    "k",           "q",        "s",
    "t",           "z",        "A",
    "Q",           "S",        "0",
    "7",           "9",        " ",
    " ",           " ",        "'",
    "'s",          "'LL",      "'re",
    "&",           ";",        "#",
    "x",           "amp",      "lt",
    "&amp;",       "&#",       "<",
    ">",           "_",        "start_of_text",
    "end_of_text", "-",        ".",
    "!",           "\t",       "\n",
    u8"\u00e9",    u8"\u00df", u8"\u03a3",
    u8"\u017f",    u8"\u65e5", u8"\U0001F44D",
    u8"\u0345",    u8"\u0130", u8"\ufb01",
    u8"\u2019",    u8"\u00a0", u8"\u2028",
    "\x1c",        u8"\u0663", u8"\u2170",
};
#define N_BITS ((int)(sizeof(bits) / sizeof(bits[0])))

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

struct captions {
    char **v;
    int n, cap;
};

static void add_caption(struct captions *c, const char *s)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->v = realloc(c->v, sizeof(*c->v) * (size_t)c->cap);
    }
    c->v[c->n++] = strdup(s);
}

/* The narrations of a small synthetic dataset, as the loader reads them. */
static void add_narrations(struct captions *c)
{
    char syn[4200], path[4400], *out = NULL;
    snprintf(syn, sizeof(syn), "%s/syn", tbt_dir());
    int rc = tbt_run(&out, 120, "%s synth --out %s --videos 8 --seconds 30 --size 64x64",
                     tbt_tubelet(), syn);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    const char *files[] = {"EPIC_100_train.csv", "EPIC_100_validation.csv"};
    int n = 0;
    for (int f = 0; f < 2; f++) {
        struct tb_annotations *a = NULL;
        struct tb_ann_opts o = {.format = TB_ANN_EPIC};
        snprintf(path, sizeof(path), "%s/annotations/%s", syn, files[f]);
        CHECK_MSG(tb_ann_load(&a, path, &o) == 0, "%s", tb_errmsg());
        for (int i = 0; a && i < a->n_items; i++, n++)
            add_caption(c, a->items[i].text);
        tb_ann_free(&a);
    }
    CHECK_MSG(n >= 50, "only %d narrations", n);
    fprintf(stderr, "  %d synthetic narrations\n", n);
}

static void add_random(struct captions *c, int n_mixed, int n_words)
{
    char buf[2048];
    for (int i = 0; i < n_mixed; i++) {
        size_t len = 0;
        int n = 1 + (int)rnd(40);
        buf[0] = '\0';
        for (int k = 0; k < n; k++) {
            const char *b = bits[rnd(N_BITS)];
            size_t bl = strlen(b);
            if (len + bl >= sizeof(buf))
                break;
            memcpy(buf + len, b, bl + 1);
            len += bl;
        }
        add_caption(c, buf);
    }
    /* Random lower-case words: far more distinct words than the cache has slots. */
    for (int i = 0; i < n_words; i++) {
        size_t len = 0;
        int n = 1 + (int)rnd(12);
        for (int k = 0; k < n; k++) {
            int wl = 2 + (int)rnd(11);
            for (int j = 0; j < wl; j++)
                buf[len++] = (char)('a' + rnd(26));
            buf[len++] = ' ';
        }
        buf[len] = '\0';
        add_caption(c, buf);
    }
    /* One long random word: a long BPE (the heap's work), cut at every context. */
    size_t len = 0;
    for (; len < 1500; len++)
        buf[len] = (char)('a' + rnd(26));
    buf[len] = '\0';
    add_caption(c, buf);
}

/* The reference's lines for every caption and context: "C N id...". Returns the file text. */
static char *run_reference(const struct captions *c)
{
    char in[4200], out_path[4200], *out = NULL;
    snprintf(in, sizeof(in), "%s/captions.bin", tbt_dir());
    snprintf(out_path, sizeof(out_path), "%s/ref.txt", tbt_dir());
    FILE *f = fopen(in, "wb");
    CHECK(f != NULL);
    for (int i = 0; f && i < c->n; i++)
        fwrite(c->v[i], 1, strlen(c->v[i]) + 1, f);
    if (f)
        fclose(f);
    int rc = tbt_run(&out, 300,
                     PYTHON " %s/tests/ref/tokenizer_ref.py --merges %s "
                            "--contexts %d,%d,%d %s %s",
                     TB_SOURCE_DIR, MERGES, contexts[0], contexts[1], contexts[2], in, out_path);
    CHECK_MSG(rc == 0, "reference failed: %s", out);
    free(out);
    return tbt_read(out_path, NULL);
}

static void show_caption(const char *s)
{
    fprintf(stderr, "    caption: '");
    for (const unsigned char *p = (const unsigned char *)s;
         *p && p - (const unsigned char *)s < 120; p++)
        fprintf(stderr, *p >= 0x20 && *p < 0x7f ? "%c" : "\\x%02x", *p);
    fprintf(stderr, "'\n");
}

/* Every caption at every context against the reference's lines; order -1 walks the captions
 * backwards (another state of the cache). Returns the number of mismatches. */
static int compare_all(tb_tokenizer *t, const struct captions *c, const char *ref, int order)
{
    int bad = 0;
    int32_t ids[77], want[77];
    /* Index the reference lines: caption i, context j is line i * N_CTX + j. */
    const char **lines = calloc((size_t)c->n * N_CTX + 1, sizeof(*lines));
    const char *p = ref;
    for (int k = 0; k < c->n * N_CTX; k++) {
        lines[k] = p;
        p = p ? strchr(p, '\n') : NULL;
        p = p ? p + 1 : NULL;
    }
    CHECK_MSG(lines[c->n * N_CTX - 1] != NULL, "reference output is short");
    for (int s = 0; s < c->n && lines[c->n * N_CTX - 1]; s++) {
        int i = order > 0 ? s : c->n - 1 - s;
        for (int j = 0; j < N_CTX; j++) {
            char *q = (char *)lines[i * N_CTX + j];
            int ctx = (int)strtol(q, &q, 10), n_want = (int)strtol(q, &q, 10), n_got = -1;
            for (int k = 0; k < ctx; k++)
                want[k] = (int32_t)strtol(q, &q, 10);
            CHECK_EQ(ctx, contexts[j]);
            int rc = tb_tokenize(t, c->v[i], ids, ctx, &n_got);
            int same = rc == 0 && n_got == n_want && !memcmp(ids, want, sizeof(*ids) * ctx);
            if (!same && bad++ < 5) {
                TBT_FAIL("caption %d at context %d: rc %d (%s), n %d (want %d)", i, ctx, rc,
                         tb_errmsg(), n_got, n_want);
                show_caption(c->v[i]);
                for (int k = 0; k < ctx; k++)
                    if (ids[k] != want[k]) {
                        fprintf(stderr, "    first difference at %d: %d, want %d\n", k, (int)ids[k],
                                (int)want[k]);
                        break;
                    }
            }
        }
    }
    free(lines);
    return bad;
}

/* The cut: the end token stays last, the rest is the head of the uncut ids. */
static void check_truncation(tb_tokenizer *t)
{
    tbt_case = "truncation";
    const char *s = hard[N_HARD - 4]; /* 68 words */
    int32_t full[200], cut[16];
    int n_full = 0, n_cut = 0;
    CHECK_EQ(tb_tokenize(t, s, full, 200, &n_full), 0);
    CHECK_EQ(tb_tokenize(t, s, cut, 16, &n_cut), 0);
    CHECK_EQ(n_full, n_cut);
    CHECK(n_full > 16);
    CHECK_EQ(full[0], TB_TOKEN_START);
    CHECK_EQ(full[n_full - 1], TB_TOKEN_END);
    CHECK_EQ(full[n_full], 0);
    CHECK_EQ(cut[15], TB_TOKEN_END);
    CHECK(!memcmp(cut, full, 15 * sizeof(*cut)));
    /* Exactly filling the context is not a cut. */
    int32_t exact[200];
    CHECK_EQ(tb_tokenize(t, s, exact, n_full, &n_cut), 0);
    CHECK(!memcmp(exact, full, (size_t)n_full * sizeof(*exact)));
    int32_t two[2];
    CHECK_EQ(tb_tokenize(t, s, two, 2, NULL), 0);
    CHECK_EQ(two[0], TB_TOKEN_START);
    CHECK_EQ(two[1], TB_TOKEN_END);
}

static void check_errors(tb_tokenizer *t)
{
    tbt_case = "errors";
    static const struct {
        const char *text, *where;
    } bad[] = {
        {"ab\xC0\xAF", "byte 2"},        /* overlong '/' */
        {"\xE0\x80\xAF", "byte 0"},      /* overlong, 3 bytes */
        {"x\xF0\x80\x80\xAF", "byte 1"}, /* overlong, 4 bytes */
        {"abc\xE2\x82", "byte 3"},       /* cut short at the end */
        {"\xE2\x82x", "byte 0"},         /* cut short by an ASCII byte */
        {"ok \x80 no", "byte 3"},        /* lone continuation byte */
        {"\xBF", "byte 0"},
        {"s\xED\xA0\x80", "byte 1"},    /* surrogate U+D800 */
        {"\xED\xBF\xBF", "byte 0"},     /* surrogate U+DFFF */
        {"\xF4\x90\x80\x80", "byte 0"}, /* U+110000 */
        {"caf\xC3\xA9 \xFF", "byte 6"},
        {"\xF8\x88\x80\x80\x80", "byte 0"},
    };
    int32_t ids[8];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int n = 123;
        int rc = tb_tokenize(t, bad[i].text, ids, 8, &n);
        CHECK_MSG(rc == TB_EFORMAT, "case %zu: rc %d", i, rc);
        CHECK_STR_HAS(tb_errmsg(), "not valid UTF-8");
        CHECK_STR_HAS(tb_errmsg(), bad[i].where);
    }
    CHECK_EQ(tb_tokenize(t, "ok", ids, 1, NULL), TB_EINVAL);
    CHECK_STR_HAS(tb_errmsg(), "context 1");
    CHECK_EQ(tb_tokenize(t, "ok", ids, 0, NULL), TB_EINVAL);
    CHECK_EQ(tb_tokenize(t, "ok", ids, -5, NULL), TB_EINVAL);
    CHECK_EQ(tb_tokenize(t, NULL, ids, 8, NULL), TB_EINVAL);
    CHECK_EQ(tb_tokenize(t, "ok", NULL, 8, NULL), TB_EINVAL);
    CHECK_EQ(tb_tokenize(NULL, "ok", ids, 8, NULL), TB_EINVAL);
    /* The tokenizer still works after the failures. */
    int n = 0;
    CHECK_EQ(tb_tokenize(t, "ok", ids, 8, &n), 0);
    CHECK_EQ(n, 3);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void check_bad_merges(void)
{
    tbt_case = "merges files";
    char path[4200], *out = NULL;
    tb_tokenizer *t = (tb_tokenizer *)&path; /* must come back NULL */
    snprintf(path, sizeof(path), "%s/no-such-file.txt.gz", tbt_dir());
    CHECK_EQ(tb_tokenizer_open(&t, path), TB_ENOENT);
    CHECK(t == NULL);
    CHECK_STR_HAS(tb_errmsg(), "no-such-file");

    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "has 0 merges"},
        {"#version: 0.2\ni n\nt h\n", "has 2 merges"},
        {"#version: 0.2\ni n\nin g\nzz q\n", "line 4: 'zz' is not a token"},
        {"#version: 0.2\ni n\nin g</w>\nin g</w>\n", "line 4: makes 'ing</w>'"},
        {"#version: 0.2\ni n\nt\n", "line 3: expected two tokens"},
        {"#version: 0.2\ni n\na b c\n", "line 3: expected two tokens"},
        {"#version: 0.2\nin g\ni n\n", "line 2: 'in' is not a token"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(path, sizeof(path), "%s/bad%zu.txt", tbt_dir(), i);
        write_file(path, bad[i].text);
        t = NULL;
        int rc = tb_tokenizer_open(&t, path);
        CHECK_MSG(rc == TB_EFORMAT, "case %zu: rc %d", i, rc);
        CHECK(t == NULL);
        CHECK_STR_HAS(tb_errmsg(), bad[i].msg);
        CHECK_STR_HAS(tb_errmsg(), path);
    }
    /* A line longer than any merge. */
    snprintf(path, sizeof(path), "%s/long.txt", tbt_dir());
    char *longline = malloc(5000);
    memset(longline, 'a', 4999);
    longline[4999] = '\0';
    memcpy(longline, "#version\na ", 11);
    write_file(path, longline);
    free(longline);
    CHECK_EQ(tb_tokenizer_open(&t, path), TB_EFORMAT);
    CHECK_STR_HAS(tb_errmsg(), "line 2: longer than");

    /* A gzip file cut in the middle. */
    snprintf(path, sizeof(path), "%s/cut.txt.gz", tbt_dir());
    int rc = tbt_run(&out, 30, "head -c 100000 %s > %s", MERGES, path);
    CHECK_EQ(rc, 0);
    free(out);
    rc = tb_tokenizer_open(&t, path);
    CHECK_MSG(rc == TB_EFORMAT, "rc %d: %s", rc, tb_errmsg());
    CHECK_STR_HAS(tb_errmsg(), path);
    CHECK_EQ(tb_tokenizer_open(NULL, NULL), TB_EINVAL);
    tb_tokenizer_close(NULL);
    tb_tokenizer_close(&t);
}

/* `tubelet tokenize` prints what tb_tokenize gives. */
static void check_cli(tb_tokenizer *t)
{
    tbt_case = "cli";
    const char *tb = tbt_tubelet();
    char *out = NULL, in[4200], want[4096];
    int32_t ids[77];
    int n = 0;
    int rc = tbt_run(&out, 30, "%s help tokenize", tb);
    CHECK_EQ(rc, 0);
    CHECK_STR_HAS(out, "--context");
    CHECK_STR_HAS(out, "--merges");
    free(out);

    const char *caps[] = {"A photo of a cat.", "-dashes-first", "it&#39;s &amp; <end_of_text>"};
    snprintf(in, sizeof(in), "%s/lines.txt", tbt_dir());
    write_file(in, "A photo of a cat.\n-dashes-first\nit&#39;s &amp; <end_of_text>");
    rc = tbt_run(&out, 30,
                 "%s tokenize --context 9 --lengths --merges %s -- '%s' '%s' '%s' && "
                 "%s tokenize --context 9 --lengths - < %s",
                 tb, MERGES, caps[0], caps[1], caps[2], tb, in);
    CHECK_EQ(rc, 0);
    const char *p = out;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 3; i++) {
            CHECK_EQ(tb_tokenize(t, caps[i], ids, 9, &n), 0);
            int len = snprintf(want, sizeof(want), "%d\t", n);
            for (int k = 0; k < 9; k++)
                len += snprintf(want + len, sizeof(want) - (size_t)len, "%s%d", k ? " " : "",
                                (int)ids[k]);
            snprintf(want + len, sizeof(want) - (size_t)len, "\n");
            CHECK_MSG(p && !strncmp(p, want, strlen(want)), "line for '%s': want %s got %.200s",
                      caps[i], want, p ? p : "(null)");
            p = p ? strchr(p, '\n') : NULL;
            p = p ? p + 1 : NULL;
        }
    free(out);
    rc = tbt_run(&out, 30, "%s tokenize 'a photo of a cat'", tb);
    CHECK_EQ(rc, 0);
    CHECK_EQ(tb_tokenize(t, "a photo of a cat", ids, 77, &n), 0);
    int words = 0;
    for (const char *q = out; q && *q && *q != '\n'; q++)
        words += *q == ' ';
    CHECK_EQ(words, 76);
    free(out);

    write_file(in, "fine\nnot \xC3\x28 fine\n");
    rc = tbt_run(&out, 30, "%s tokenize - < %s", tb, in);
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "standard input line 2");
    CHECK_STR_HAS(out, "not valid UTF-8");
    free(out);
    rc = tbt_run(&out, 30, "%s tokenize --merges %s/none.gz x", tb, tbt_dir());
    CHECK_EQ(rc, 1);
    CHECK_STR_HAS(out, "none.gz");
    free(out);
    rc = tbt_run(&out, 30, "%s tokenize --context 1 x", tb);
    CHECK_EQ(rc, 2);
    free(out);
}

int main(void)
{
    tbt_begin("tokenizer");
    if (tbt_run(NULL, 60, PYTHON " -c 'import regex'") != 0) {
        fprintf(stderr, "skip: %s cannot import regex (python3-regex)\n", PYTHON);
        return TBT_SKIP;
    }
    tb_tokenizer *built_in = NULL, *from_file = NULL;
    CHECK_MSG(tb_tokenizer_open(&built_in, NULL) == 0, "%s", tb_errmsg());
    CHECK_MSG(tb_tokenizer_open(&from_file, MERGES) == 0, "%s", tb_errmsg());
    if (!built_in || !from_file)
        TBT_EXIT();

    struct captions c = {0};
    tbt_case = "captions";
    add_narrations(&c);
    for (int i = 0; i < N_HARD; i++)
        add_caption(&c, hard[i]);
    add_random(&c, 2000, 3000);
    char *ref = run_reference(&c);
    if (ref) {
        tbt_case = "built-in merges";
        double t0 = (double)clock() / CLOCKS_PER_SEC;
        int bad = compare_all(built_in, &c, ref, 1);
        double secs = (double)clock() / CLOCKS_PER_SEC - t0;
        fprintf(stderr, "  %d captions x %d contexts: %d differ (%.0f captions/s)\n", c.n, N_CTX,
                bad, c.n * N_CTX / (secs > 0 ? secs : 1e-9));
        tbt_case = "built-in merges, backwards";
        compare_all(built_in, &c, ref, -1);
        tbt_case = "merges file";
        compare_all(from_file, &c, ref, 1);
    }

    /* A plain-text (not gzip) copy of the merges reads the same. */
    tbt_case = "plain merges";
    char plain[4200], *out = NULL;
    snprintf(plain, sizeof(plain), "%s/merges.txt", tbt_dir());
    CHECK_EQ(tbt_run(&out, 30, "gzip -dc %s > %s", MERGES, plain), 0);
    free(out);
    tb_tokenizer *from_plain = NULL;
    CHECK_MSG(tb_tokenizer_open(&from_plain, plain) == 0, "%s", tb_errmsg());
    for (int i = 0; from_plain && i < N_HARD; i++) {
        int32_t a[77], b[77];
        int na = 0, nb = 0;
        CHECK_EQ(tb_tokenize(built_in, hard[i], a, 77, &na), 0);
        CHECK_EQ(tb_tokenize(from_plain, hard[i], b, 77, &nb), 0);
        CHECK_MSG(na == nb && !memcmp(a, b, sizeof(a)), "hard string %d differs", i);
    }
    tb_tokenizer_close(&from_plain);
    CHECK(from_plain == NULL);

    check_truncation(built_in);
    check_errors(built_in);
    check_bad_merges();
    check_cli(built_in);

    free(ref);
    for (int i = 0; i < c.n; i++)
        free(c.v[i]);
    free(c.v);
    tb_tokenizer_close(&built_in);
    tb_tokenizer_close(&from_file);
    TBT_EXIT();
}

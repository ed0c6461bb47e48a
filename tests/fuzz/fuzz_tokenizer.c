/* tests/fuzz/fuzz_tokenizer.c - the CLIP tokenizer on any caption (include/tubelet/text.h;
 * src/data/tokenizer.c, text_clean.c): byte 0 of the input is the context length (mod 80, so
 * 0 and 1 are refused), the rest the caption. A caption either fails (TB_EFORMAT naming the
 * byte of invalid UTF-8) or gives ids that start with the start token, end with the end token
 * at min(length, context) - 1, are zeros after it and lie inside the vocabulary; a second
 * call (from the cache) gives the same, and so does the full-length encoding cut AVION's way.
 * Seeds: synth's narrations and a few hard captions (make_seeds.sh). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tubelet/text.h"

/* The built-in merges, opened on the first input and kept (its cache carries over). */
static tb_tokenizer *tokenizer(void)
{
    static tb_tokenizer *tok;
    if (!tok && tb_tokenizer_open(&tok, NULL) < 0)
        tbf_fail("tb_tokenizer_open: %s", tb_errmsg());
    return tok;
}

static void check_ids(const int32_t *ids, int ctx, int n_tokens)
{
    int m = n_tokens < ctx ? n_tokens : ctx;
    if (n_tokens < 2 || ids[0] != TB_TOKEN_START || ids[m - 1] != TB_TOKEN_END)
        tbf_fail("%d tokens at context %d: first %d, last %d", n_tokens, ctx, ids[0],
                 ids[m - 1]);
    for (int i = 0; i < ctx; i++)
        if (ids[i] < 0 || ids[i] >= TB_TOKEN_VOCAB || (i >= m && ids[i] != 0))
            tbf_fail("id %d of %d is %d (%d tokens)", i, ctx, ids[i], n_tokens);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    tb_tokenizer *tok = tokenizer();
    int ctx = data[0] % 80, n = 0, again_n = 0, full_n = 0;
    char *text = malloc(size);
    int32_t *ids = malloc(sizeof(*ids) * 80), *again = malloc(sizeof(*again) * 80);
    if (!text || !ids || !again)
        tbf_fail("out of memory");
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    tb_errclear();
    int rc = tb_tokenize(tok, text, ids, ctx, &n);
    tbf_check_error(rc, "tb_tokenize", NULL);
    if (rc == 0) {
        check_ids(ids, ctx, n);
        if (tb_tokenize(tok, text, again, ctx, &again_n) < 0 || again_n != n ||
            memcmp(ids, again, sizeof(*ids) * (size_t)ctx))
            tbf_fail("a second encoding differs (%d tokens, then %d)", n, again_n);
        int32_t *full = malloc(sizeof(*full) * (size_t)n);
        if (!full || tb_tokenize(tok, text, full, n, &full_n) < 0 || full_n != n)
            tbf_fail("the full-length encoding failed or differs (%d tokens, then %d)", n,
                     full_n);
        check_ids(full, n, n);
        int kept = n < ctx ? n - 1 : ctx - 1;
        if (memcmp(full, ids, sizeof(*ids) * (size_t)kept))
            tbf_fail("context %d does not keep the first %d ids of %d", ctx, kept, n);
        free(full);
    } else if (ctx >= 2 && rc != TB_EFORMAT) {
        tbf_fail("tb_tokenize: %s", tb_errmsg());
    }
    free(text);
    free(ids);
    free(again);
    return 0;
}

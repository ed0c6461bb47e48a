/* tests/fuzz/fuzz_merges.c - the tokenizer's merges file (tb_tokenizer_open with a path,
 * `tubelet tokenize --merges FILE`; src/data/tokenizer.c): the input is the file, plain or
 * gzip. A file of fewer than CLIP's 48,894 merges is refused, so this walks the line parser
 * and its checks (a part used before a line makes it, a token made twice, long lines, bad
 * gzip) up to where the input ends: a TB_E* code with a message naming the file, and no
 * tokenizer. Seeds: the head of the built-in merges (data/), plain and gzip (make_seeds.sh). */
#include "fuzz.h"
#include "tubelet/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = tbf_put(0, data, size);
    tb_tokenizer *t = NULL;
    tb_errclear();
    int rc = tb_tokenizer_open(&t, path);
    tbf_check_error(rc, "tb_tokenizer_open", path);
    if (rc == 0) {
        /* Only a whole vocabulary opens: it must tokenize. */
        int32_t ids[TB_TOKEN_CONTEXT];
        if (tb_tokenize(t, "a fuzzed vocabulary", ids, TB_TOKEN_CONTEXT, NULL) < 0)
            tbf_fail("a tokenizer that opened cannot tokenize: %s", tb_errmsg());
    } else if (t) {
        tbf_fail("tb_tokenizer_open failed but left a tokenizer");
    }
    tb_tokenizer_close(&t);
    return 0;
}

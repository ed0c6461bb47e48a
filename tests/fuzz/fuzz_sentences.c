/* tests/fuzz/fuzz_sentences.c - the MIR sentence CSV (tb_mir_sentences_load, src/metrics/mir.c;
 * EPIC_100_retrieval_test_sentence.csv's layout): the input is the file, read against the split
 * of data/mir_split.csv. It either fails with a TB_E* code and a message naming it, or every
 * sentence names a clip of the split and carries that clip's narration.
 * Seeds: sentence lists of the split (make_seeds.sh). */
#include "fuzz.h"
#include "tubelet/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct tb_annotations *ann;
    const struct tb_mir_sentences *built;
    struct tb_mir_sentences *s = NULL;
    tbf_mir_split(&ann, &built);
    const char *path = tbf_put(0, data, size);
    tb_errclear();
    int rc = tb_mir_sentences_load(&s, path, ann);
    tbf_check_error(rc, "tb_mir_sentences_load", path);
    if (rc < 0) {
        if (s)
            tbf_fail("tb_mir_sentences_load failed but left a list");
        return 0;
    }
    if (s->n < 1)
        tbf_fail("%d sentences", s->n);
    for (int j = 0; j < s->n; j++)
        if (s->item[j] < 0 || s->item[j] >= ann->n_items ||
            s->text[j] != ann->items[s->item[j]].text)
            tbf_fail("sentence %d names clip %d", j, s->item[j]);
    tb_mir_sentences_free(&s);
    return 0;
}

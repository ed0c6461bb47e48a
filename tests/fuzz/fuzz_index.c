/* tests/fuzz/fuzz_index.c - index files alone (src/video/index.c): the input is read as a
 * video.idx and as a chunk's <start>.idx. Either it fails with a TB_E* code and a message
 * naming the file, or it parses, and then what tbi_index_format writes of it parses again to
 * an index that formats to the same text (prep writes, the reader reads: they must agree).
 * Not here: the reader on the index (fuzz_chunk.c). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "video/internal.h"

/* idx formatted as kind, parsed back, formatted again: the two texts must be equal. */
static void round_trip(const struct tb_video_index *idx, enum tbi_index_kind kind, int chunk_no)
{
    struct tbi_sb a = {0}, b = {0};
    struct tb_video_index *again = NULL;
    int no = -1;
    tbi_index_format(&a, kind, idx, chunk_no);
    if (a.failed)
        tbf_fail("tbi_index_format: out of memory");
    const char *path = tbf_put(1, a.buf, a.len);
    int rc = tbi_index_read(&again, path, kind, &no);
    if (rc < 0)
        tbf_fail("a formatted index does not parse: %s\n--- text\n%s", tb_errmsg(), a.buf);
    tbi_index_format(&b, kind, again, no);
    if (b.failed || b.len != a.len || memcmp(a.buf, b.buf, a.len))
        tbf_fail("an index formats differently after a round trip:\n--- first\n%s--- second\n%s",
                 a.buf, tbi_sb_str(&b));
    if (kind == TBI_INDEX_CHUNK && no != chunk_no)
        tbf_fail("chunk number %d read back as %d", chunk_no, no);
    tb_index_free(&again);
    tbi_sb_free(&a);
    tbi_sb_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = tbf_put(0, data, size);
    for (int kind = TBI_INDEX_VIDEO; kind <= TBI_INDEX_CHUNK; kind++) {
        struct tb_video_index *idx = NULL;
        int chunk_no = -1;
        tb_errclear();
        int rc = tbi_index_read(&idx, path, (enum tbi_index_kind)kind, &chunk_no);
        tbf_check_error(rc, "tbi_index_read", path);
        if (rc < 0) {
            if (idx)
                tbf_fail("tbi_index_read failed but left an index");
            continue;
        }
        /* tbi_index_read validated it: the chunks hold their keyframes and add up. */
        for (int i = 0; i < idx->n_chunks; i++)
            tbf_touch(idx->chunks[i].keyframes,
                      sizeof(int64_t) * (size_t)idx->chunks[i].n_keyframes);
        round_trip(idx, (enum tbi_index_kind)kind, chunk_no);
        tb_index_free(&idx);
    }
    return 0;
}

/* tests/fuzz/fuzz_relevancy.c - the MIR relevancy file, a .npy (src/core/npy.c,
 * tb_mir_relevancy_load in src/metrics/mir.c): the input is the file. The .npy reader takes it
 * whatever its shape (a header that parses must give a shape whose product is the element
 * count, and the data read as float32 fills exactly that many); the relevancy loader takes it
 * against the split of data/mir_split.csv (5 clips, 3 sentences), and what it accepts lies in
 * [0, 1]. Failures are TB_E* codes with a message naming the file.
 * Seeds: numpy's np.save of such matrices (make_seeds.sh). */
#include <stdlib.h>
#include <string.h>

#include "core/npy.h"
#include "fuzz.h"
#include "tubelet/metrics.h"

/* Arrays up to this many elements are read whole. */
#define MAX_READ (1 << 16)

static void read_npy(const char *path)
{
    struct tbi_npy h;
    tb_errclear();
    int rc = tbi_npy_open(&h, path);
    tbf_check_error(rc, "tbi_npy_open", path);
    if (rc < 0) {
        if (h.f)
            tbf_fail("tbi_npy_open failed but left the file open");
        return;
    }
    tbf_check_npy_header(&h);
    if (h.n <= MAX_READ) {
        float *x = malloc(sizeof(*x) * (size_t)(h.n ? h.n : 1));
        if (!x)
            tbf_fail("out of memory");
        tb_errclear();
        rc = tbi_npy_read_f32(&h, path, x);
        tbf_check_error(rc, "tbi_npy_read_f32", path);
        if (rc == 0)
            tbf_touch(x, sizeof(*x) * (size_t)h.n);
        free(x);
    }
    tbi_npy_close(&h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct tb_annotations *ann;
    const struct tb_mir_sentences *s;
    tbf_mir_split(&ann, &s);
    const char *path = tbf_put(0, data, size);
    read_npy(path);
    float *rel = malloc(sizeof(*rel) * (size_t)ann->n_items * (size_t)s->n);
    if (!rel)
        tbf_fail("out of memory");
    tb_errclear();
    int rc = tb_mir_relevancy_load(path, ann, s, rel);
    tbf_check_error(rc, "tb_mir_relevancy_load", path);
    for (int64_t k = 0; rc == 0 && k < (int64_t)ann->n_items * s->n; k++)
        if (!(rel[k] >= 0 && rel[k] <= 1))
            tbf_fail("relevancy %lld is %g", (long long)k, (double)rel[k]);
    free(rel);
    return 0;
}

/* tests/fuzz/fuzz_captions.c - the training relevancy file of --relevant-captions, a pickled
 * NumPy array or a .npy (src/core/pickle.c, src/core/npy.c, tb_mir_captions_open in
 * src/metrics/mir_captions.c): the input is the file. A pickle's opcodes run whatever they are
 * (an accepted one gives a shape whose product is the element count, data that lies inside
 * the file, read as float64 when small); the captions are built from it against the split of
 * data/mir_split.csv (5 clips, 3 sentences) at threshold 0.3, and what is built lists each
 * clip's sentences ascending, in range, the k-th sentence and every draw among them. Failures
 * are TB_E* codes with a message naming the file. Seeds: pickle.dump of such matrices under
 * protocols 2 to 5, and .npy files (make_seeds.sh). */
#include <stdlib.h>

#include "core/npy.h"
#include "fuzz.h"
#include "tubelet/metrics.h"
#include "tubelet/rng.h"

/* Arrays up to this many elements are read whole. */
#define MAX_READ (1 << 16)

static void read_pickle(const char *path)
{
    struct tbi_npy h;
    tb_errclear();
    int rc = tbi_pkl_is(path);
    tbf_check_error(rc, "tbi_pkl_is", path);
    if (rc <= 0)
        return;
    tb_errclear();
    rc = tbi_pkl_open(&h, path);
    tbf_check_error(rc, "tbi_pkl_open", path);
    if (rc < 0) {
        if (h.f)
            tbf_fail("tbi_pkl_open failed but left the file open");
        return;
    }
    tbf_check_npy_header(&h);
    if (h.n <= MAX_READ) {
        double *x = malloc(sizeof(*x) * (size_t)(h.n ? h.n : 1));
        if (!x)
            tbf_fail("out of memory");
        tb_errclear();
        rc = tbi_npy_read_f64(&h, path, h.n, x);
        /* the data lies inside the file: an accepted pickle reads whole */
        if (rc < 0)
            tbf_fail("tbi_pkl_open accepted data it cannot read: %s", tb_errmsg());
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
    read_pickle(path);
    tb_mir_captions *c = NULL;
    tb_errclear();
    int rc = tb_mir_captions_open(&c, ann, s, 0.3, path);
    tbf_check_error(rc, "tb_mir_captions_open", path);
    if (rc < 0) {
        if (c)
            tbf_fail("tb_mir_captions_open failed but returned captions");
        return 0;
    }
    int list[3];
    for (int i = 0; i < ann->n_items; i++) {
        int64_t m = tb_mir_captions_count(c, i);
        if (m < 0 || m > s->n || tb_mir_captions_list(c, i, list) != m)
            tbf_fail("clip %d: %lld sentences of %d", i, (long long)m, s->n);
        for (int64_t k = 0; k < m; k++)
            if (list[k] < 0 || list[k] >= s->n || (k && list[k] <= list[k - 1]) ||
                tb_mir_captions_sentence(c, i, k) != list[k])
                tbf_fail("clip %d: sentence %lld is %d", i, (long long)k, list[k]);
        tb_rng g;
        tb_rng_init_for(&g, 0, TB_RNG_CAPTION, 0, (uint64_t)i);
        int j = tb_mir_captions_draw(c, i, &g), found = 0;
        for (int64_t k = 0; k < m; k++)
            found |= list[k] == j;
        if (m ? !found : j != -1)
            tbf_fail("clip %d drew %d of %lld", i, j, (long long)m);
    }
    tb_mir_captions_close(&c);
    return 0;
}

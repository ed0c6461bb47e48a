/* tests/fuzz/fuzz_safetensors.c - safetensors files (src/core/safetensors.c: checkpoints,
 * --init and --resume weights, timm's and AVION's files): the input is the file, header size,
 * JSON header and data. A file either fails with a TB_E* code and a message naming it, or
 * every tensor it gives has a shape whose product is its element count, F32 or I64 data of
 * that many elements (all read here, so a tensor shorter than it claims is an ASan report),
 * a NUL-terminated name and findable by it, and metadata that is a string.
 * Seeds: corpus/safetensors (make_seeds.sh: tb_st_write's layout, BF16 and F16 too). */
#include <string.h>

#include "fuzz.h"
#include "tubelet/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = tbf_put(0, data, size);
    struct tb_st_file *f = NULL;
    tb_errclear();
    int rc = tb_st_read(&f, path);
    tbf_check_error(rc, "tb_st_read", path);
    if (rc < 0) {
        if (f)
            tbf_fail("tb_st_read failed but left a file");
        return 0;
    }
    if (f->n_tensors < 0 || (f->n_tensors && !f->tensors))
        tbf_fail("%d tensors at %p", f->n_tensors, (void *)f->tensors);
    for (int i = 0; i < f->n_tensors; i++) {
        const struct tb_st_tensor *t = &f->tensors[i];
        if (!memchr(t->name, '\0', sizeof(t->name)))
            tbf_fail("tensor %d: name not terminated", i);
        if (t->n_dims < 0 || t->n_dims > TB_ST_MAX_DIMS)
            tbf_fail("tensor '%s': %d dimensions", t->name, t->n_dims);
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) {
            if (t->shape[d] < 0 || (t->shape[d] && n > INT64_MAX / t->shape[d]))
                tbf_fail("tensor '%s': dimension %d is %lld", t->name, d,
                         (long long)t->shape[d]);
            n *= t->shape[d];
        }
        if (n != t->n)
            tbf_fail("tensor '%s': shape of %lld elements, n = %lld", t->name, (long long)n,
                     (long long)t->n);
        /* Each element came from at least two bytes of the file. */
        if (t->n > (int64_t)size / 2)
            tbf_fail("tensor '%s': %lld elements from a %zu-byte file", t->name,
                     (long long)t->n, size);
        if (t->dtype != TB_ST_F32 && t->dtype != TB_ST_I64)
            tbf_fail("tensor '%s': dtype %d after reading", t->name, (int)t->dtype);
        if (t->n && !t->data)
            tbf_fail("tensor '%s': no data", t->name);
        tbf_touch(t->data, (size_t)t->n * (t->dtype == TB_ST_F32 ? 4 : 8));
        const struct tb_st_tensor *found = tb_st_find(f, t->name);
        if (!found || strcmp(found->name, t->name))
            tbf_fail("tensor '%s' not found by its name", t->name);
    }
    if (f->metadata)
        tbf_touch(f->metadata, strlen(f->metadata));
    tb_st_free(&f);
    return 0;
}

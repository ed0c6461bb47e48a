/* tests/tb_test.c - the test kit (see tb_test.h). */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tb_test.h"
#include "tensor/backend.h"
#include "tubelet/rng.h"

int tbt_failures;
const char *tbt_case;
static char scratch[4096];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static pid_t begun_by; /* the test program's process (not a forked child) */

/* At exit: the scratch directory removed, and a program whose checks failed exits 1 whatever
 * main returned. A skip (77) or a pass (0) after a failed check would hide the failure: a test
 * that skips for a missing tool after the checks that need none (test_vit without PyTorch)
 * still fails for those. */
static void cleanup(void)
{
    if (scratch[0] && !getenv("TBT_KEEP"))
        nftw(scratch, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    if (tbt_failures && getpid() == begun_by) {
        fprintf(stderr, "%d check%s failed: exit status 1\n", tbt_failures,
                tbt_failures == 1 ? "" : "s");
        fflush(NULL);
        _exit(1);
    }
}

int tbt_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("skip: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return tbt_failures ? 1 : TBT_SKIP;
}

void tbt_begin(const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/tbt_%s_XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        exit(1);
    }
    begun_by = getpid();
    atexit(cleanup);
    if (getenv("TBT_KEEP"))
        fprintf(stderr, "scratch directory: %s\n", scratch);
}

const char *tbt_dir(void)
{
    return scratch;
}

const char *tbt_path(const char *name)
{
    static char buf[8][4200];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", scratch, name);
    return p;
}

const char *tbt_tubelet(void)
{
    const char *b = getenv("TUBELET_BIN");
    return b && b[0] ? b : TUBELET_BIN;
}

int tbt_run(char **out, int timeout_s, const char *fmt, ...)
{
    char cmd[16384], full[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    /* The command travels in the environment so it needs no quoting. */
    setenv("TBT_CMD", cmd, 1);
    snprintf(full, sizeof(full), "timeout -k 5 %d sh -c \"$TBT_CMD\" 2>&1", timeout_s);
    FILE *p = popen(full, "r");
    if (!p) {
        perror("popen");
        exit(1);
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int tbt_cuda_libs_mapped(const char *prefix, char *out, size_t n)
{
    static const char *const libs[] = {"libcuda.", "libcudart.", "libcublas.", "libcublasLt.",
                                       "libcudnn", "libnccl."};
    char pattern[4200];
    snprintf(pattern, sizeof(pattern), "%s.*", prefix);
    glob_t g;
    int logs = 0;
    out[0] = '\0';
    if (glob(pattern, 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "r");
        if (!f)
            continue;
        logs++;
        char line[1024];
        while (fgets(line, sizeof(line), f)) {
            const char *file = strstr(line, "file=");
            if (!file || !strstr(line, "generating link map"))
                continue;
            file += 5;
            const char *base = strrchr(file, '/');
            base = base ? base + 1 : file;
            for (size_t k = 0; k < sizeof(libs) / sizeof(libs[0]); k++)
                if (!strncmp(base, libs[k], strlen(libs[k]))) {
                    size_t len = strcspn(base, " ");
                    size_t used = strlen(out);
                    snprintf(out + used, n - used, "%s%.*s", used ? "," : "", (int)len, base);
                }
        }
        fclose(f);
    }
    globfree(&g);
    return logs;
}

size_t tbt_yuv_bytes(int w, int h)
{
    return (size_t)w * h + 2 * (size_t)((w + 1) / 2) * ((h + 1) / 2);
}

int64_t tbt_ffmpeg_yuv(const char *path, const char *vf, int w, int h, uint8_t **buf)
{
    char cmd[8192];
    snprintf(cmd, sizeof(cmd),
             "ffmpeg -nostdin -v error -i '%s' %s%s%s -fps_mode passthrough -f rawvideo "
             "-pix_fmt yuv420p -",
             path, vf ? "-vf '" : "", vf ? vf : "", vf ? "'" : "");
    FILE *p = popen(cmd, "r");
    size_t fb = tbt_yuv_bytes(w, h), cap = fb * 64, len = 0, n;
    uint8_t *b = malloc(cap);
    while ((n = fread(b + len, 1, cap - len, p)) > 0) {
        len += n;
        if (len == cap) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    if (pclose(p) != 0 || len % fb) {
        fprintf(stderr,
                "ffmpeg decode of %s failed or gave a partial frame (%zu bytes, frame "
                "%zu)\n",
                path, len, fb);
        free(b);
        *buf = NULL;
        return -1;
    }
    *buf = b;
    return (int64_t)(len / fb);
}

double tbt_psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0)
        return 99;
    return 10 * log10(255.0 * 255.0 / (se / n));
}

int tbt_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

struct tb_st_tensor tbt_tensor(const char *name, enum tb_st_dtype dtype, int n_dims,
                               const int64_t *shape, void *data)
{
    struct tb_st_tensor t = {.dtype = dtype, .n_dims = n_dims, .n = 1, .data = data};
    snprintf(t.name, sizeof(t.name), "%s", name);
    for (int i = 0; i < n_dims; i++)
        t.n *= (t.shape[i] = shape[i]);
    return t;
}

void tbt_write_weights(tb_params *reg, const char *path, uint64_t seed, const char *made_by)
{
    int np = tb_params_count(reg);
    struct tb_st_tensor *ts = calloc((size_t)np, sizeof(*ts));
    float *host = malloc(sizeof(float) * (size_t)tb_params_floats(reg));
    char meta[128];
    tb_rng r;
    tb_rng_init_for(&r, seed, TB_RNG_TEST, 1, 0);
    for (int i = 0; i < np; i++) {
        const struct tb_param *p = tb_params_at(reg, i);
        float *data = host + p->offset;
        CHECK_EQ(tb_params_read(reg, i, data), 0);
        for (int64_t k = 0; k < p->n; k++)
            data[k] += (float)tb_rng_normal(&r) * 0.02f;
        ts[i] = tbt_tensor(p->name, TB_ST_F32, p->n_dims, p->shape, data);
    }
    snprintf(meta, sizeof(meta), "{\"made_by\":\"%s\"}", made_by);
    CHECK_EQ(tb_st_write(path, ts, np, meta), 0);
    free(ts);
    free(host);
}

int tbt_write_noise(const char *path, long offset, size_t n, uint64_t seed)
{
    FILE *f = fopen(path, offset < 0 ? "wb" : "r+b");
    if (!f)
        return -1;
    if (offset > 0 && fseek(f, offset, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1; /* xorshift64*, never zero */
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        fputc((int)((x * 0x2545F4914F6CDD1Dull) >> 56), f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

char *tbt_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[n] = '\0';
    if (len)
        *len = (size_t)n;
    return b;
}

char *tbt_config_values(char *text)
{
    char *dst = text;
    for (char *line = text; text && *line;) {
        char *eol = strchr(line, '\n'), *end = eol ? eol : line + strlen(line);
        char *hash = memchr(line, '#', (size_t)(end - line));
        char *stop = hash ? hash : end;
        while (stop > line && stop[-1] == ' ')
            stop--;
        if (stop > line) {
            memmove(dst, line, (size_t)(stop - line));
            dst += stop - line;
            *dst++ = '\n';
        }
        line = eol ? eol + 1 : end;
    }
    if (dst)
        *dst = '\0';
    return text;
}

const char *tbt_opencv_video(const char *name)
{
    static char paths[8][4200];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, 4200, "/usr/share/doc/opencv-doc/examples/data/%s", name);
    if (tbt_exists(path))
        return path;
    char gz[4200];
    snprintf(gz, sizeof(gz), "/usr/share/doc/opencv-doc/opencv4/html/%s.gz", name);
    if (!tbt_exists(gz))
        return NULL;
    snprintf(path, 4200, "%s/%s", scratch, name);
    if (!tbt_exists(path) && tbt_run(NULL, 60, "gzip -dc %s > %s", gz, path) != 0)
        return NULL;
    return path;
}

void tbt_compare_st(const char *ours_path, const char *ref_path, const char *what, double tol,
                    int (*skip)(const char *name, int64_t k, int64_t n), int require_signal)
{
    struct tb_st_file *ours = NULL, *ref = NULL;
    CHECK_EQ(tb_st_read(&ours, ours_path), 0);
    CHECK_EQ(tb_st_read(&ref, ref_path), 0);
    if (!ours || !ref) {
        tb_st_free(&ours);
        tb_st_free(&ref);
        return;
    }
    CHECK_EQ(ours->n_tensors, ref->n_tensors);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < ref->n_tensors; i++) {
        const struct tb_st_tensor *r = &ref->tensors[i], *o = tb_st_find(ours, r->name);
        CHECK_MSG(o && o->n == r->n, "%s: tensor %s missing or of another size", what, r->name);
        if (!o || o->n != r->n)
            continue;
        double diff = 0, norm = 0;
        int64_t compared = 0;
        for (int64_t k = 0; k < r->n; k++) {
            if (skip && skip(r->name, k, r->n))
                continue;
            double a = ((const float *)o->data)[k], b = ((const float *)r->data)[k];
            diff += (a - b) * (a - b);
            norm += b * b;
            compared++;
        }
        if (!compared)
            continue; /* left out whole */
        double rel = sqrt(diff) / (sqrt(norm) + 1e-12);
        if (rel > worst || isnan(rel)) {
            worst = rel;
            worst_name = r->name;
        }
        CHECK_MSG(rel <= tol && (!require_signal || norm > 0),
                  "%s: %s differs from the "
                  "reference by %.2e (relative L2; tolerance %.0e)",
                  what, r->name, rel, tol);
    }
    fprintf(stderr, "%s: %d tensors, worst relative error %.2e (%s)\n", what, ref->n_tensors, worst,
            worst_name);
    tb_st_free(&ours);
    tb_st_free(&ref);
}

void tbt_same_ckpt(const char *run_a, const char *run_b, const char *what)
{
    char pa[4400], pb[4400];
    snprintf(pa, sizeof(pa), "%s/last.safetensors", run_a);
    snprintf(pb, sizeof(pb), "%s/last.safetensors", run_b);
    struct tb_st_file *fa = NULL, *fb = NULL;
    CHECK_EQ(tb_st_read(&fa, pa), 0);
    CHECK_EQ(tb_st_read(&fb, pb), 0);
    int n = 0;
    for (int i = 0; fa && fb && i < fa->n_tensors; i++) {
        const struct tb_st_tensor *a = &fa->tensors[i], *b = tb_st_find(fb, a->name);
        size_t bytes = (size_t)a->n * (a->dtype == TB_ST_I64 ? 8 : a->dtype == TB_ST_F32 ? 4 : 2);
        CHECK_MSG(b && b->n == a->n && b->dtype == a->dtype && !memcmp(a->data, b->data, bytes),
                  "%s: %s differs", what, a->name);
        n++;
    }
    CHECK_MSG(n > 20, "%s: %d tensors", what, n);
    tb_st_free(&fa);
    tb_st_free(&fb);
}

void tbt_same_st(const char *a_path, const char *b_path, const char *what)
{
    struct tb_st_file *a = NULL, *b = NULL;
    CHECK_EQ(tb_st_read(&a, a_path), 0);
    CHECK_EQ(tb_st_read(&b, b_path), 0);
    if (!a || !b)
        return;
    CHECK_EQ(a->n_tensors, b->n_tensors);
    int differ = 0;
    for (int i = 0; i < a->n_tensors; i++) {
        const struct tb_st_tensor *t = &a->tensors[i], *u = tb_st_find(b, t->name);
        int same = u && u->n == t->n && !memcmp(t->data, u->data, sizeof(float) * (size_t)t->n);
        CHECK_MSG(same, "%s: %s differs between the runs", what, t->name);
        differ += !same;
    }
    fprintf(stderr, "%s: %d tensors, %d differ\n", what, a->n_tensors, differ);
    tb_st_free(&a);
    tb_st_free(&b);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The model outputs of the step files (vit_ref.py's, mae_ref.py's, clip_ref.py's layouts). */
static int is_output(const char *name)
{
    static const char *const outs[] = {"loss", "logits", "pred", "video_emb", "text_emb"};
    for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++)
        if (!strcmp(name, outs[i]))
            return 1;
    return 0;
}

/* Set: tbt_rel_errors prints each tensor's error. */
static int tbt_print_tensors;

void tbt_rel_errors(const char *ours, const char *ref,
                    int (*skip)(const char *name, int64_t k, int64_t n), double worst[3],
                    double *median, double *same)
{
    int64_t n_same = 0, n_all = 0;
    struct tb_st_file *a = NULL, *r = NULL;
    double grads[256];
    int n_grads = 0;
    worst[0] = worst[1] = worst[2] = *median = 0;
    CHECK_EQ(tb_st_read(&a, ours), 0);
    CHECK_EQ(tb_st_read(&r, ref), 0);
    for (int i = 0; a && r && i < r->n_tensors; i++) {
        const struct tb_st_tensor *t = &r->tensors[i], *u = tb_st_find(a, t->name);
        CHECK_MSG(u && u->n == t->n, "%s: no %s of %lld values", ours, t->name, (long long)t->n);
        if (!u || u->n != t->n)
            continue;
        double diff = 0, norm = 0;
        for (int64_t k = 0; k < t->n; k++) {
            if (skip && skip(t->name, k, t->n))
                continue;
            double x = ((const float *)u->data)[k], y = ((const float *)t->data)[k];
            diff += (x - y) * (x - y);
            norm += y * y;
        }
        double e = sqrt(diff) / (sqrt(norm) + 1e-30);
        if (tbt_print_tensors)
            fprintf(stderr, "  %-40s %lld values, relative L2 error %.3e\n", t->name,
                    (long long)t->n, e);
        int kind = is_output(t->name) ? 0 : !strncmp(t->name, "grad.", 5) ? 1 : 2;
        if (kind < 2 && strcmp(t->name, "loss"))
            for (int64_t k = 0; k < t->n; k++, n_all++)
                n_same += ((const float *)u->data)[k] == ((const float *)t->data)[k];
        worst[kind] = e > worst[kind] || isnan(e) ? e : worst[kind];
        if (kind == 1 && n_grads < 256)
            grads[n_grads++] = e;
    }
    qsort(grads, (size_t)n_grads, sizeof(double), cmp_double);
    *median = n_grads ? grads[n_grads / 2] : 0;
    *same = n_all ? (double)n_same / n_all : 0;
    tb_st_free(&a);
    tb_st_free(&r);
}

void tbt_bf16_verdict(const char *what, const char *bf16, const char *fp32, const char *emu,
                      int (*skip)(const char *name, int64_t k, int64_t n), const double tol[3])
{
    double eb[3], ef[3], mb, mf, sb, sf;
    tbt_rel_errors(bf16, emu, skip, eb, &mb, &sb);
    tbt_rel_errors(fp32, emu, skip, ef, &mf, &sf);
    fprintf(stderr,
            "%s: against the emulation: bf16 outputs %.2e, gradients %.2e (median "
            "%.2e), weights %.2e, %.0f%% to the bit; fp32 %.2e, %.2e (median %.2e), %.2e, "
            "%.0f%%\n",
            what, eb[0], eb[1], mb, eb[2], 100 * sb, ef[0], ef[1], mf, ef[2], 100 * sf);
    CHECK_MSG(eb[0] <= tol[0] && eb[1] <= tol[1] && eb[2] <= tol[2],
              "%s: bf16 against the "
              "emulation: %.2e, %.2e, %.2e (tolerances %.0e, %.0e, %.0e)",
              what, eb[0], eb[1], eb[2], tol[0], tol[1], tol[2]);
    CHECK_MSG(eb[0] < ef[0] && mb < mf,
              "%s: the fp32 mode is as near the bf16 emulation as the "
              "bf16 mode (outputs %.2e against %.2e, median gradient %.2e against %.2e): are "
              "the rounding points the same?",
              what, ef[0], eb[0], mf, mb);
}

void tbt_bf16_files(struct tbt_bf16_files *f, size_t i)
{
    const char *d = tbt_dir();
    snprintf(f->w, sizeof(f->w), "%s/bw%zu.safetensors", d, i);
    snprintf(f->b, sizeof(f->b), "%s/bb%zu.safetensors", d, i);
    snprintf(f->bf16, sizeof(f->bf16), "%s/bob%zu.safetensors", d, i);
    snprintf(f->fp32, sizeof(f->fp32), "%s/bof%zu.safetensors", d, i);
    snprintf(f->emu, sizeof(f->emu), "%s/brf%zu.safetensors", d, i);
    snprintf(f->other, sizeof(f->other), "%s/bg%zu.safetensors", d, i);
}

int tbt_bf16_runs(const struct tbt_bf16_files *f, const char *task, const char *ref,
                  const char *flags)
{
    const char *runs[][2] = {
        {"step", "--precision bf16"},
        {"step", ""},
        {"ref", "--precision bf16"},
        {"step", "--precision bf16 --backend cpu-guarded"},
        {"step", "--precision bf16 --recompute"},
    };
    const char *outs[] = {f->bf16, f->fp32, f->emu, f->other, f->other};
    const char *same[] = {NULL, NULL, NULL, "bf16 on the guarded backend", "bf16 with --recompute"};
    for (int k = 0; k < 5; k++) {
        char *out = NULL;
        int rc = strcmp(runs[k][0], "ref")
                     ? tbt_run(&out, 120, "%s step %s %s %s --out %s", tbt_tubelet(), task, flags,
                               runs[k][1], outs[k])
                     : tbt_run(&out, 300, "%s %s %s --out %s", ref, flags, runs[k][1], outs[k]);
        CHECK_MSG(rc == 0, "%s %s: %s", runs[k][0], runs[k][1], out);
        free(out);
        if (rc != 0)
            return 0;
        if (same[k])
            tbt_same_st(f->bf16, f->other, same[k]);
    }
    return 1;
}

int tbt_have_backend(const char *name)
{
    for (int i = 0; tbi_backend_names[i]; i++)
        if (!strcmp(tbi_backend_names[i], name))
            return 1;
    return 0;
}

int tbt_autocast_rounds_once(void)
{
    static int known = -1;
    if (known >= 0)
        return known;
    /* x @ W^T, dY @ W, dY^T @ X, batched products and Conv3d, each against the product of the
     * rounded operands rounded once. */
    char *out = NULL;
    int rc = tbt_run(&out, 60,
                     TB_TEST_PYTHON
                     " -c '"
                     "import torch\n"
                     "r = lambda t: t.bfloat16()\n"
                     "def bad(c, d):\n"
                     "    return (c.float() != d.bfloat16().float()).float().mean() > 0.01\n"
                     "a, b = torch.randn(64, 96), torch.randn(80, 96)\n"
                     "x, y = torch.randn(4, 64, 32), torch.randn(4, 32, 48)\n"
                     "v, w = torch.randn(2, 3, 4, 16, 16), torch.randn(64, 3, 2, 8, 8)\n"
                     "f = lambda t: t.bfloat16().float()\n"
                     "cs = [(r(a) @ r(b).t(), f(a) @ f(b).t()),\n"
                     "      (r(a).t() @ r(a), f(a).t() @ f(a)),\n"
                     "      (r(a) @ r(a).t(), f(a) @ f(a).t()), (r(x) @ r(y), f(x) @ f(y)),\n"
                     "      (torch.nn.functional.conv3d(r(v), r(w), stride=(2, 8, 8)),\n"
                     "       torch.nn.functional.conv3d(f(v), f(w), stride=(2, 8, 8)))]\n"
                     "raise SystemExit(int(any(bad(c, d) for c, d in cs)))'");
    free(out);
    return known = rc == 0;
}

void tbt_autocast_compare(const char *what, const char *who, const char *ref, const char *flags,
                          const char *device, const char *ours, const char *out_path,
                          int (*skip)(const char *name, int64_t k, int64_t n), const double tol[2])
{
    const char *where = strcmp(device, "cpu") ? "GPU" : "CPU";
    char *out = NULL;
    int rc = tbt_run(&out, 600, "%s %s --precision autocast --device %s --out %s", ref, flags,
                     device, out_path);
    CHECK_MSG(rc == 0, "%s: %s --precision autocast --device %s: %s", what, ref, device, out);
    free(out);
    if (rc != 0)
        return;
    double e[3], median, same;
    tbt_print_tensors = 1;
    tbt_rel_errors(ours, out_path, skip, e, &median, &same);
    tbt_print_tensors = 0;
    fprintf(stderr,
            "%s: %s against PyTorch's autocast on the %s: outputs %.2e, gradients %.2e (median "
            "%.2e)%s, weights after the steps %.2e (reported only); %.0f%% to the bit\n",
            what, who, where, e[0], e[1], median, tol[1] < 0 ? " (reported only)" : "", e[2],
            100 * same);
    CHECK_MSG(e[0] <= tol[0] && (tol[1] < 0 || e[1] <= tol[1]),
              "%s: %s against PyTorch's autocast on the %s: outputs %.2e, gradients %.2e "
              "(tolerances %.0e, %.0e)",
              what, who, where, e[0], e[1], tol[0], tol[1]);
}

/* Whether PYTHON's torch has CUDA (the GPU machine's PyTorch); asked once. */
static int torch_has_cuda(void)
{
    static int known = -1;
    if (known < 0)
        known = tbt_run(NULL, 120,
                        TB_TEST_PYTHON " -c 'import torch; "
                                       "assert torch.cuda.is_available()'") == 0;
    return known;
}

void tbt_cuda_emu_step(const char *what, const char *task, const char *ref, const char *flags,
                       const char *bf16, const char *out_path,
                       int (*skip)(const char *name, int64_t k, int64_t n), const double tol_emu[3],
                       const double tol_other[3], const double tol_autocast[2])
{
    const char *be = getenv("TBT_STEP_BACKEND");
    be = be && *be ? be : "cuda-emu";
    const double *tol = strcmp(be, "cuda-emu") ? tol_other : tol_emu;
    if (!tbt_have_backend(be)) {
        fprintf(stderr, "%s: no %s backend in this build (TB_CUDA=OFF, or no CUDA headers): "
                "not compared\n", what, be);
        return;
    }
    char *out = NULL;
    int rc = tbt_run(&out, 900, "%s step %s %s --precision bf16 --backend %s --out %s",
                     tbt_tubelet(), task, flags, be, out_path);
    CHECK_MSG(rc == 0, "%s: tubelet step --backend %s: %s", what, be, out);
    free(out);
    if (rc != 0)
        return;
    double e[3], median, same;
    tbt_print_tensors = tol == tol_other;
    tbt_rel_errors(out_path, bf16, skip, e, &median, &same);
    tbt_print_tensors = 0;
    fprintf(stderr,
            "%s: %s against the CPU's bf16 mode: outputs %.2e, gradients %.2e "
            "(median %.2e), weights after the steps %.2e; %.0f%% to the bit\n",
            what, be, e[0], e[1], median, e[2], 100 * same);
    CHECK_MSG(e[0] <= tol[0] && e[1] <= tol[1] && e[2] <= tol[2],
              "%s: %s against the CPU's bf16 mode: %.2e, %.2e, %.2e (tolerances %.0e, %.0e, "
              "%.0e)", what, be, e[0], e[1], e[2], tol[0], tol[1], tol[2]);
    if (!strcmp(be, "cuda-emu"))
        return; /* no GPU: PyTorch's autocast on one is not for here */
    if (!torch_has_cuda()) {
        fprintf(stderr,
                "%s: %s against PyTorch's autocast on the GPU: not compared (%s's "
                "torch has no CUDA)\n",
                what, be, TB_TEST_PYTHON);
        return;
    }
    tbt_autocast_compare(what, be, ref, flags, "cuda", out_path, tbt_path("autocast_gpu.st"), skip,
                         tol_autocast);
}

/* tests/gpu/ops_emulate.cpp - the cuda-emu backend's LayerNorm, activation, add, scale_add and
 * optimizer ops (src/tensor/cuda on the emulated device, src/tensor/cuda/emu) against the CPU
 * backend's ops (the specification), f32 and bf16, odd sizes and widths, each case with device
 * memory flush against the guard page at its end and again at its start. A tolerance and its
 * reason per op below. Then the harness proves it catches bugs, with small broken kernels of its
 * own: a bound off by one faults on a guard page, an output element no thread wrote fails the
 * comparison as NaN, a launch over the limits is refused, a warp shuffle after a lane exited
 * aborts, a reader on a second stream without an event wait reads NaN. It cannot see what the
 * emulation does not model (docs/CUDA.md). Exit 0, or 1 on a failure. */
#define TBC_EMULATE 1
#include "emulate.h"

#include <sys/wait.h>

#include "tensor/cuda/cuda_common.h"
#include "tensor/layernorm_rules.h"

/* The cuda-emu backend of the library: its own emulated device in its own translation unit
 * (src/tensor/cuda/emu/backend_emu.cpp); the memory here is this file's emulator's, the same
 * address space. Its work is queued on its streams: launched() waits for it. */
static tbi_backend *cu;

/* Tolerances, as a fraction of the largest magnitude of the reference tensor (an error that
 * summation order makes is of the size of the terms, not of a result that cancels):
 * - TOL_SUM: LayerNorm's and the parameter gradients' sums, over up to 1030 terms in another
 *   order (a warp's 32 strided partials, 16 row groups) and with other FMA contractions: a few
 *   ulps of the terms, sqrt(C) at worst in practice.
 * - TOL_ACT: the activations, CUDA's (here the C library's) erfcf and expf against the CPU's own
 *   fits tbi_erfcf and tbi_expf, each within about 1e-7 relative.
 * - TOL_ADD: add and scale_add, one rounding each, the same expression: equal but for an FMA.
 * - TOL_OPT: the optimizers, the CPU's expressions in its order: an ulp or two of the weights
 *   where an FMA contracts differently.
 * bf16 outputs are the f32 result rounded: equal, except where the two f32 results straddle a
 * rounding boundary (1 bf16 ulp apart, allowed in at most 1% of the elements plus one), or
 * where the value is within the f32 tolerance of the tensor's scale (cancellation). */
static const double TOL_SUM = 4e-6, TOL_ACT = 1e-5, TOL_ADD = 1e-6, TOL_OPT = 1e-6;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static float normal(float mean, float sd)
{
    const double u = uniform() + 1e-12, v = uniform();
    return mean + sd * (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* A host tensor of n elements of dt (bf16 as its 16 bits), and its device twin. */
struct ten {
    int dt;
    size_t n;
    std::vector<unsigned char> h;
    void *d;
    void *alloc = nullptr; /* what emu_malloc gave, where d is not it (twin) */
};

static size_t ten_bytes(const ten &t)
{
    return t.n * tbi_dt_size(t.dt);
}

static float ten_get(const ten &t, size_t i)
{
    if (t.dt == TB_DTYPE_BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)t.h.data())[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return ((const float *)t.h.data())[i];
}

static void ten_set(ten &t, size_t i, float v)
{
    if (t.dt == TB_DTYPE_BF16) {
        const bf16 b = __float2bfloat16(v);
        memcpy(t.h.data() + 2 * i, &b, 2);
    } else {
        ((float *)t.h.data())[i] = v;
    }
}

/* n values of N(mean, sd), rounded to dt; on the device too. */
static ten make(int dt, size_t n, float mean, float sd)
{
    ten t{dt, n, std::vector<unsigned char>(n * tbi_dt_size(dt)), nullptr};
    for (size_t i = 0; i < n; i++)
        ten_set(t, i, normal(mean, sd));
    t.d = emu_malloc(ten_bytes(t));
    memcpy(t.d, t.h.data(), ten_bytes(t));
    return t;
}

/* An output: its host copy for the CPU op, NaN bytes on both sides. */
static ten fresh(int dt, size_t n)
{
    ten t{dt, n, std::vector<unsigned char>(n * tbi_dt_size(dt), 0xff), nullptr};
    t.d = emu_malloc(ten_bytes(t));
    return t;
}

static tbi_t dev(const ten &t)
{
    return tbi_t_of(t.d, t.dt);
}

static tbi_t host(ten &t)
{
    return tbi_t_of(t.h.data(), t.dt);
}

static float *hf(ten &t)
{
    return (float *)t.h.data();
}

static float *df(const ten &t)
{
    return (float *)t.d;
}

static int n_failed, n_checks;

/* Whether element i of two bf16 tensors is one ulp apart: the same sign, bits 1 apart. */
static int bf16_neighbours(const ten &a, const ten &b, size_t i)
{
    const int x = ((const uint16_t *)a.h.data())[i], y = ((const uint16_t *)b.h.data())[i];
    return (x >> 15) == (y >> 15) && abs(x - y) == 1;
}

/* The device tensor against the host one (the CPU op's result), errors as a fraction of the
 * larger of the reference's largest magnitude and terms (the size of the terms an output
 * combines, where they can outgrow it); prints a line, 1 if it fails. */
static int check(const char *what, const ten &t, double tol, double terms = 0)
{
    double scale = terms, worst = 0;
    for (size_t i = 0; i < t.n; i++)
        scale = std::max(scale, fabs((double)ten_get(t, i)));
    scale = std::max(scale, 1e-30);
    ten got{t.dt, t.n, std::vector<unsigned char>(ten_bytes(t)), nullptr};
    memcpy(got.h.data(), t.d, ten_bytes(t));
    size_t nan = 0, far = 0, ulp1 = 0, same = 0;
    for (size_t i = 0; i < t.n; i++) {
        const float a = ten_get(got, i), b = ten_get(t, i);
        same += !memcmp(got.h.data() + i * tbi_dt_size(t.dt), t.h.data() + i * tbi_dt_size(t.dt),
                        tbi_dt_size(t.dt));
        if (isnan(a) != isnan(b)) {
            nan++;
            continue;
        }
        const double e = fabs((double)a - b) / scale;
        worst = std::max(worst, e);
        if (e <= tol)
            continue;
        if (t.dt == TB_DTYPE_BF16 && bf16_neighbours(got, t, i))
            ulp1++;
        else
            far++;
    }
    const int bad = nan || far || ulp1 > t.n / 100 + 1;
    n_checks++;
    n_failed += bad;
    printf("    %-8s %s n %7zu | max err %.1e of scale (tol %.0e) | bits equal %zu", what,
           t.dt == TB_DTYPE_BF16 ? "bf16" : "f32 ", t.n, worst, tol, same);
    if (ulp1)
        printf(" | 1 bf16 ulp off %zu", ulp1);
    if (nan)
        printf(" | NaN where the reference is not (or not where it is): %zu", nan);
    if (far)
        printf(" | out of tolerance %zu", far);
    printf(" | %s\n", bad ? "FAIL" : "ok");
    return bad;
}

/* Frees the cases' device tensors: a write beside one fails the case too. */
static int release(std::initializer_list<ten *> ts)
{
    int bad = 0;
    for (ten *t : ts)
        bad |= emu_free(t->alloc ? t->alloc : t->d);
    n_failed += bad != 0;
    return bad;
}

static int launched(const char *what, int rc)
{
    if (rc == 0)
        rc = cu->ops->sync(cu);
    if (rc == 0)
        return 1;
    printf("    %s: the launcher returned %d | FAIL\n", what, rc);
    n_failed++;
    return 0;
}

/* dw and db against their exact sums (double, from the same float terms' inputs), within
 * the bound of layernorm.cu's order: each term passes through at most 16 + 8 + R / 128 + 1
 * float additions (a run of 16 rows, the 8 runs of a chunk of 128, the chunks) after the 3
 * roundings of its own product, so |got - exact| <= (that + 3) 2^-24 sum |terms| per column. A
 * column's error is printed as a fraction of its bound (<= 1 passes); and beside it, in units
 * of 2^-24 sum |terms|, the device's worst and the CPU's (its chain of R additions). */
static void check_param_sums(ten &dw, ten &db, const ten &x, const ten &dout, const ten &mean,
                             const ten &rstd, int R, int C)
{
    const int chunks = (R + 127) / 128;
    const double u = ldexp(1.0, -24), path = 16 + 8 + chunks + 1 + 3;
    double worst[2] = {0, 0}, dev_u = 0, cpu_u = 0;
    for (int c = 0; c < C; c++) {
        double sw = 0, sb = 0, aw = 0, ab = 0;
        for (int r = 0; r < R; r++) {
            const size_t i = (size_t)r * C + c;
            const double dy = ten_get(dout, i);
            const double t = dy * ((double)ten_get(x, i) - ten_get(mean, r)) * ten_get(rstd, r);
            sw += t, aw += fabs(t), sb += dy, ab += fabs(dy);
        }
        const double gw = ((const float *)dw.d)[c], gb = ((const float *)db.d)[c];
        worst[0] = std::max(worst[0], fabs(gw - sw) / std::max(path * u * aw, 1e-300));
        worst[1] = std::max(worst[1], fabs(gb - sb) / std::max(path * u * ab, 1e-300));
        dev_u = std::max(dev_u, fabs(gw - sw) / std::max(u * aw, 1e-300));
        cpu_u = std::max(cpu_u, fabs((double)hf(dw)[c] - sw) / std::max(u * aw, 1e-300));
    }
    const int bad = !(worst[0] <= 1) || !(worst[1] <= 1);
    n_checks++;
    n_failed += bad;
    printf(
        "    dw, db against exact sums: worst error %.2f and %.2f of the bound (%d chunks); dw's "
        "in u sum|t|: %.3f (CPU %.3f) | %s\n",
        worst[0], worst[1], chunks, dev_u, cpu_u, bad ? "FAIL" : "ok");
}

/* ---- LayerNorm ----------------------------------------------------------------------------- */

static void case_layernorm(tbi_backend *cpu, int R, int C, int dt)
{
    const size_t n = (size_t)R * C;
    printf("  layernorm R %d C %d %s\n", R, C, dt == TB_DTYPE_BF16 ? "bf16" : "f32");
    ten x = make(TB_DTYPE_F32, n, 1.5f, 3), w = make(TB_DTYPE_F32, C, 1, 0.2f);
    ten b = make(TB_DTYPE_F32, C, 0, 0.2f), out = fresh(dt, n);
    ten mean = fresh(TB_DTYPE_F32, R), rstd = fresh(TB_DTYPE_F32, R);
    const float eps = 1e-5f;
    TBI_OP(cpu, layernorm_fwd, host(out), hf(mean), hf(rstd), hf(x), hf(w), hf(b), R, C, eps);
    if (launched("layernorm_fwd", cu->ops->layernorm_fwd(cu, dev(out), df(mean), df(rstd), df(x),
                                                         df(w), df(b), R, C, eps))) {
        check("out", out, TOL_SUM);
        check("mean", mean, TOL_SUM);
        check("rstd", rstd, TOL_SUM);
    }
    /* The backward from the CPU's statistics on both sides; dinp accumulates onto values. */
    memcpy(mean.d, mean.h.data(), ten_bytes(mean));
    memcpy(rstd.d, rstd.h.data(), ten_bytes(rstd));
    ten dout = make(dt, n, 0, 1), dinp = make(TB_DTYPE_F32, n, 0, 1);
    ten dw = fresh(TB_DTYPE_F32, C), db = fresh(TB_DTYPE_F32, C);
    TBI_OP(cpu, layernorm_bwd, hf(dinp), hf(dw), hf(db), host(dout), hf(x), hf(w), hf(mean),
           hf(rstd), R, C);
    /* dinp's terms are rstd dout w: with C = 1 (variance 0) rstd is 1 / sqrt(eps), and the
     * CPU's FMA leaves the product's rounding error, times rstd, where the exact answer adds 0. */
    double terms = 0;
    for (size_t i = 0; i < n; i++)
        terms = std::max(terms, fabs((double)hf(rstd)[i / C] * ten_get(dout, i) * hf(w)[i % C]));
    if (launched("layernorm_bwd", cu->ops->layernorm_bwd(cu, df(dinp), df(dw), df(db), dev(dout),
                                                         df(x), df(w), df(mean), df(rstd), R, C))) {
        check("dinp", dinp, TOL_SUM, terms);
        check("dw", dw, TOL_SUM);
        check("db", db, TOL_SUM);
        check_param_sums(dw, db, x, dout, mean, rstd, R, C);
    }
    release({&x, &w, &b, &out, &mean, &rstd, &dout, &dinp, &dw, &db});
}

/* ---- activations ----------------------------------------------------------------------------
 * dts: out, inp (forward); dinp, out, inp, dout (backward). in_place: out is inp, dinp dout. */

static void case_act_fwd(tbi_backend *cpu, int act, size_t n, int dt_out, int dt_in, int in_place)
{
    printf("  act_fwd %s n %zu out %s inp %s%s\n", act == TBI_ACT_GELU ? "gelu" : "quickgelu", n,
           dt_out ? "bf16" : "f32", dt_in ? "bf16" : "f32", in_place ? " in place" : "");
    ten x = make(dt_in, n, 0, 3);
    ten out = in_place ? x : fresh(dt_out, n);
    ten xh = x; /* the CPU's input, which in place it overwrites as the device does */
    TBI_OP(cpu, act_fwd, act, host(in_place ? xh : out), host(xh), n);
    if (in_place)
        out.h = xh.h;
    if (launched("act_fwd", cu->ops->act_fwd(cu, act, dev(out), dev(x), n)))
        check("out", out, TOL_ACT);
    if (in_place)
        release({&x});
    else
        release({&x, &out});
}

static void case_act_bwd(tbi_backend *cpu, int act, size_t n, const int dt[4], int with_out,
                         int in_place)
{
    printf("  act_bwd %s n %zu dts %d%d%d%d%s%s\n", act == TBI_ACT_GELU ? "gelu" : "quickgelu", n,
           dt[0], dt[1], dt[2], dt[3], with_out ? " out" : "", in_place ? " in place" : "");
    ten x = make(dt[2], n, 0, 3), dout = make(dt[3], n, 0, 1);
    ten dinp = in_place ? dout : fresh(dt[0], n);
    ten out = in_place ? x : fresh(dt[1], n);
    if (!with_out)
        out.h.clear();
    /* The CPU's copies: in place, its dinp is its dout and its out its inp. */
    ten xh = x, dh = dout;
    tbi_t cpu_out = with_out ? host(in_place ? xh : out) : tbi_t_of(nullptr, dt[1]);
    TBI_OP(cpu, act_bwd, act, host(in_place ? dh : dinp), cpu_out, host(xh), host(dh), n);
    if (in_place) {
        dinp.h = dh.h;
        out.h = xh.h;
    }
    tbi_t dev_out = with_out ? dev(out) : tbi_t_of(nullptr, dt[1]);
    if (launched("act_bwd", cu->ops->act_bwd(cu, act, dev(dinp), dev_out, dev(x), dev(dout), n))) {
        check("dinp", dinp, TOL_ACT);
        if (with_out)
            check("out", out, TOL_ACT);
    }
    if (in_place)
        release({&x, &dout});
    else
        release({&x, &dout, &dinp, &out});
}

static void cases_act(tbi_backend *cpu)
{
    /* 20008: a multiple of 8, so its tensors end 16-byte aligned on the guard page at the end
     * (the vector forms' last vector beside it); the others leave a tail. */
    const size_t ns[] = {1, 31, 1030, 20008, 20011};
    const int F = TB_DTYPE_F32, H = TB_DTYPE_BF16;
    const int bwd_dts[][4] = {{F, F, F, F}, {H, H, H, H}, {F, H, H, H}, {F, F, H, F}};
    for (int act = TBI_ACT_GELU; act <= TBI_ACT_QUICKGELU; act++)
        for (size_t n : ns) {
            case_act_fwd(cpu, act, n, F, F, 0);
            case_act_fwd(cpu, act, n, H, H, 0);
            case_act_fwd(cpu, act, n, H, F, 0);
            case_act_fwd(cpu, act, n, F, F, 1);
            case_act_fwd(cpu, act, n, H, H, 1);
            for (const int *dt : bwd_dts)
                case_act_bwd(cpu, act, n, dt, dt[0] != dt[1], 0);
            case_act_bwd(cpu, act, n, bwd_dts[0], 1, 1);
            case_act_bwd(cpu, act, n, bwd_dts[1], 1, 1);
        }
}

/* ---- add, scale_add ------------------------------------------------------------------------ */

static void case_add(tbi_backend *cpu, size_t n, int in_place)
{
    printf("  add n %zu%s\n", n, in_place ? " in place" : "");
    ten a = make(TB_DTYPE_F32, n, 0, 1), b = make(TB_DTYPE_F32, n, 0, 1);
    ten out = in_place ? a : fresh(TB_DTYPE_F32, n);
    ten ah = a;
    TBI_OP(cpu, add, hf(in_place ? ah : out), hf(ah), hf(b), n);
    if (in_place)
        out.h = ah.h;
    if (launched("add", cu->ops->add(cu, df(out), df(a), df(b), n)))
        check("out", out, TOL_ADD);
    if (in_place)
        release({&a, &b});
    else
        release({&a, &b, &out});
}

static void case_scale_add(tbi_backend *cpu, int B, size_t n, int dt, int with_a, int in_place)
{
    printf("  scale_add B %d n %zu out %s%s%s\n", B, n, dt ? "bf16" : "f32",
           with_a ? "" : " a NULL", in_place ? " in place" : "");
    ten a = make(TB_DTYPE_F32, (size_t)B * n, 0, 1), x = make(TB_DTYPE_F32, (size_t)B * n, 0, 1);
    ten scale = make(TB_DTYPE_F32, B, 0.5f, 0.5f);
    ten out = in_place ? a : fresh(dt, (size_t)B * n);
    ten ah = a;
    TBI_OP(cpu, scale_add, host(in_place ? ah : out), with_a ? hf(ah) : nullptr, hf(x), hf(scale),
           B, n);
    if (in_place)
        out.h = ah.h;
    if (launched("scale_add", cu->ops->scale_add(cu, dev(out), with_a ? df(a) : nullptr, df(x),
                                                 df(scale), B, n)))
        check("out", out, TOL_ADD);
    if (in_place)
        release({&a, &x, &scale});
    else
        release({&a, &x, &scale, &out});
}

/* ---- optimizers ----------------------------------------------------------------------------
 * The state (param, m, v) starts the same on both sides; the _checked forms take a
 * tbi_step_stats on the device with the clip factor, or the bad flag set (nothing written). */

enum { OPT_ADAMW, OPT_LION, OPT_SGD };

struct opt_case {
    int kind, checked, bad;
    size_t n;
    int64_t step;
    float wd;
};

static int run_opt(tbi_backend *cpu, const opt_case &c, ten &p, ten &g, ten &m, ten &v,
                   tbi_step_stats *st_h, tbi_step_stats *st_d)
{
    const float lr = 1e-3f, gs = 0.5f;
    if (c.kind == OPT_ADAMW && c.checked) {
        TBI_OP(cpu, adamw_checked, hf(p), hf(g), st_h, hf(m), hf(v), c.n, lr, 0.9f, 0.999f, 1e-8f,
               c.wd, c.step);
        return cu->ops->adamw_checked(cu, df(p), df(g), st_d, df(m), df(v), c.n, lr, 0.9f, 0.999f,
                                      1e-8f, c.wd, c.step);
    }
    if (c.kind == OPT_ADAMW) {
        TBI_OP(cpu, adamw, hf(p), hf(g), gs, hf(m), hf(v), c.n, lr, 0.9f, 0.999f, 1e-8f, c.wd,
               c.step);
        return cu->ops->adamw(cu, df(p), df(g), gs, df(m), df(v), c.n, lr, 0.9f, 0.999f, 1e-8f,
                              c.wd, c.step);
    }
    if (c.kind == OPT_LION && c.checked) {
        TBI_OP(cpu, lion_checked, hf(p), hf(g), st_h, hf(m), c.n, lr, 0.9f, 0.99f, c.wd);
        return cu->ops->lion_checked(cu, df(p), df(g), st_d, df(m), c.n, lr, 0.9f, 0.99f, c.wd);
    }
    if (c.kind == OPT_LION) {
        TBI_OP(cpu, lion, hf(p), hf(g), gs, hf(m), c.n, lr, 0.9f, 0.99f, c.wd);
        return cu->ops->lion(cu, df(p), df(g), gs, df(m), c.n, lr, 0.9f, 0.99f, c.wd);
    }
    if (c.checked) {
        TBI_OP(cpu, sgd_checked, hf(p), hf(g), st_h, hf(m), c.n, lr, 0.9f, c.wd);
        return cu->ops->sgd_checked(cu, df(p), df(g), st_d, df(m), c.n, lr, 0.9f, c.wd);
    }
    TBI_OP(cpu, sgd, hf(p), hf(g), gs, hf(m), c.n, lr, 0.9f, c.wd);
    return cu->ops->sgd(cu, df(p), df(g), gs, df(m), c.n, lr, 0.9f, c.wd);
}

static void case_opt(tbi_backend *cpu, const opt_case &c)
{
    static const char *names[] = {"adamw", "lion", "sgd"};
    printf("  %s%s n %zu step %lld wd %g%s\n", names[c.kind], c.checked ? "_checked" : "", c.n,
           (long long)c.step, c.wd, c.bad ? " (bad step: nothing written)" : "");
    ten p = make(TB_DTYPE_F32, c.n, 0, 1), g = make(TB_DTYPE_F32, c.n, 0, 1e-2f);
    ten m = make(TB_DTYPE_F32, c.n, 0, 1e-3f), v = make(TB_DTYPE_F32, c.n, 0, 1e-5f);
    for (size_t i = 0; i < c.n; i++)
        hf(v)[i] = ((float *)v.d)[i] = fabsf(hf(v)[i]);
    tbi_step_stats st_h = {};
    st_h.scale = 0.3f;
    st_h.bad = c.bad ? TBI_BAD_NORM : TBI_BAD_NONE;
    tbi_step_stats *st_d = (tbi_step_stats *)emu_malloc(sizeof(st_h));
    memcpy(st_d, &st_h, sizeof(st_h));
    if (launched(names[c.kind], run_opt(cpu, c, p, g, m, v, &st_h, st_d))) {
        check("param", p, c.bad ? 0 : TOL_OPT);
        check("m", m, c.bad ? 0 : TOL_OPT);
        if (c.kind == OPT_ADAMW)
            check("v", v, c.bad ? 0 : TOL_OPT);
    }
    n_failed += emu_free(st_d) != 0;
    release({&p, &g, &m, &v});
}

static void cases_opt(tbi_backend *cpu)
{
    const size_t ns[] = {1, 31, 4096, 4097, 20011};
    for (int kind = OPT_ADAMW; kind <= OPT_SGD; kind++)
        for (size_t n : ns) {
            case_opt(cpu, opt_case{kind, 0, 0, n, 1, 0.05f});
            case_opt(cpu, opt_case{kind, 0, 0, n, 10, 0.0f});
            case_opt(cpu, opt_case{kind, 1, 0, n, 3, 0.05f});
            case_opt(cpu, opt_case{kind, 1, 1, n, 3, 0.05f});
        }
}

static void cases_ops(tbi_backend *cpu)
{
    /* Rows past 128 take more than one chunk of the parameter gradients' first stage (129: a
     * chunk of one row; 3138, the ViT-B step's rows: 25 chunks, the last of 66). */
    const int shapes[][2] = {{1, 1}, {3, 31},   {5, 64},   {9, 768},  {4, 1030}, {17, 96},
                             {0, 8}, {128, 33}, {129, 33}, {300, 40}, {3138, 72}};
    for (const auto &s : shapes) {
        case_layernorm(cpu, s[0], s[1], TB_DTYPE_F32);
        case_layernorm(cpu, s[0], s[1], TB_DTYPE_BF16);
    }
    cases_act(cpu);
    for (size_t n : {(size_t)1, (size_t)31, (size_t)20008, (size_t)20011}) {
        case_add(cpu, n, 0);
        case_add(cpu, n, 1);
    }
    for (int B : {1, 3})
        for (size_t n : {(size_t)31, (size_t)1024, (size_t)1030}) {
            case_scale_add(cpu, B, n, TB_DTYPE_F32, 1, 0);
            case_scale_add(cpu, B, n, TB_DTYPE_BF16, 1, 0);
            case_scale_add(cpu, B, n, TB_DTYPE_F32, 0, 0);
            case_scale_add(cpu, B, n, TB_DTYPE_F32, 1, 1);
        }
    cases_opt(cpu);
}

/* ---- the vector and scalar forms --------------------------------------------------------------
 * The launchers of the activations, add, scale_add and the optimizers take 16-byte vectors
 * where every tensor is 16-byte aligned, else one element per thread: the same values on
 * twins of each tensor, at a 16-byte aligned address and one element past one, must give the
 * same bits (the vector form is the scalar one's arithmetic, which is the kernels' as before
 * vectors). */

/* t's values (its host copy) on the device at a 16-byte aligned address, or one element past. */
static ten twin(const ten &t, int misaligned)
{
    ten c{t.dt, t.n, t.h, nullptr};
    unsigned char *base = (unsigned char *)emu_malloc(ten_bytes(t) + 16, 16);
    c.alloc = base;
    c.d = base + (misaligned ? tbi_dt_size(t.dt) : 0);
    memcpy(c.d, t.h.data(), ten_bytes(t));
    return c;
}

/* The two twins' device bytes equal; prints a line, counts a failure. */
static void same_bits(const char *what, const ten &vec, const ten &sca)
{
    const size_t e = tbi_dt_size(vec.dt);
    size_t same = 0;
    for (size_t i = 0; i < vec.n; i++)
        same += !memcmp((const char *)vec.d + i * e, (const char *)sca.d + i * e, e);
    const int bad = same != vec.n;
    n_checks++;
    n_failed += bad;
    printf("    %-8s %s n %7zu | vector and scalar forms: bits equal %zu | %s\n", what,
           vec.dt == TB_DTYPE_BF16 ? "bf16" : "f32 ", vec.n, same, bad ? "FAIL" : "ok");
}

/* Both twins of each of k tensors: [0] aligned, [1] misaligned. */
struct twins {
    ten t[2];
    twins(const ten &h) : t{twin(h, 0), twin(h, 1)}
    {
    }
    tbi_t dev(int j) const
    {
        return tbi_t_of(t[j].d, t[j].dt);
    }
    float *f(int j) const
    {
        return (float *)t[j].d;
    }
    int release()
    {
        return emu_free(t[0].alloc) | emu_free(t[1].alloc);
    }
};

/* ---- LayerNorm's register kernels against its plain kernels, bit for bit --------------------
 * layernorm.cu reads a row of up to 1024 columns (a multiple of 4, tensors aligned) once, into
 * registers, and transposes it across the warp so that each lane adds the same columns in the
 * same order as the plain kernels, which take every other row and are the kernels before the
 * register ones, unchanged but for their names (one warp a row, the row read again per pass).
 * Each case runs the library on 16-byte aligned tensors (the register kernels where the width
 * allows) and on twins one element past (the plain kernels: misaligned rows): the bits must be
 * equal. A copy of the plain kernels here would not do: this file is not compiled with the
 * library's -march (FMA contractions differ). TBC_EMU_COST says which kernel ran and what it
 * read: a register kernel must read each row exactly once (the plain kernels read it 3 times
 * forward, twice backward: not vacuous). The CPU comparison above (case_layernorm) runs both
 * kernels too, within its tolerance. */

/* The launches TBC_EMU_COST recorded in path: kernel name and bytes read, one a line. */
struct cost_line {
    std::string kernel;
    double read;
};

static std::vector<cost_line> cost_lines(const char *path)
{
    std::vector<cost_line> v;
    FILE *f = fopen(path, "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char name[256];
        double col[2];
        if (sscanf(line, "%255[^\t]\t%*s\t%*s\t%lf\t%lf", name, &col[0], &col[1]) == 3)
            v.push_back(cost_line{name, col[1]});
    }
    if (f)
        fclose(f);
    remove(path);
    return v;
}

/* The bytes of the 32-byte sectors that warp accesses of piece bytes each (from p on) touch
 * over bytes bytes. */
static double sector_bytes(const void *p, size_t bytes, size_t piece)
{
    double n = 0;
    for (size_t at = 0; at < bytes; at += piece) {
        const uintptr_t lo = (uintptr_t)p + at;
        const uintptr_t hi = (uintptr_t)p + (at + piece < bytes ? at + piece : bytes);
        n += 32.0 * (double)(((hi - 1) >> 5) - (lo >> 5) + 1);
    }
    return n;
}

/* Whether the first launch recorded was the row kernel want, reading read bytes (< 0: any).
 * Exact where every lane of a warp makes the same accesses (C a multiple of 128); elsewhere
 * the count groups a warp's k-th accesses, which mixes two loads where some lanes skip one
 * (emulate_cost.h), so up to 1.2 x (the plain kernels read 2 to 3 x). */
static void expect_kernel(const std::vector<cost_line> &lines, const char *want, double read,
                          int exact)
{
    const double got = lines.empty() ? 0 : lines[0].read;
    const int ok = !lines.empty() && lines[0].kernel == want &&
                   (read < 0 || (exact ? got == read : got >= read && got <= 1.2 * read));
    n_checks++;
    n_failed += !ok;
    printf("    ran %s, read %.0f bytes", lines.empty() ? "nothing" : lines[0].kernel.c_str(),
           lines.empty() ? 0 : lines[0].read);
    if (read >= 0)
        printf(" (each row once: %.0f)", read);
    printf(" | %s\n", ok ? "ok" : "FAIL");
}

static void case_layernorm_bits(int R, int C, int dt)
{
    const int vec = C % 4 == 0 && C <= 1024, bf = dt == TB_DTYPE_BF16;
    printf("  layernorm bits R %d C %d %s (%s)\n", R, C, bf ? "bf16" : "f32",
           vec ? "registers, then misaligned: plain" : "plain");
    const size_t n = (size_t)R * C;
    const float eps = 1e-5f;
    ten xh = make(TB_DTYPE_F32, n, 1.5f, 3), wh = make(TB_DTYPE_F32, C, 1, 0.2f);
    ten bh = make(TB_DTYPE_F32, C, 0, 0.2f), douth = make(dt, n, 0, 1);
    ten dinph = make(TB_DTYPE_F32, n, 0, 1);
    twins x(xh), w(wh), b(bh), dout(douth), dinp(dinph), o(fresh(dt, n));
    twins mu(fresh(TB_DTYPE_F32, R)), rs(fresh(TB_DTYPE_F32, R));
    twins dw(fresh(TB_DTYPE_F32, C)), db(fresh(TB_DTYPE_F32, C));
    const char *cost = "ops_emulate_ln_cost.tsv";
    /* what the memory system moves: 32-byte sectors of each warp access (a row's slice of
     * 128 columns, 32 columns of w or b as a block stages them), a row's mean and rstd one
     * sector each */
    const int blocks = (R + 63) / 64;
    const size_t ds = tbi_dt_size(dt);
    double rows_x = 0, rows_dout = 0, rows_dinp = 0;
    for (int r = 0; r < R; r++) {
        rows_x += sector_bytes(x.f(0) + (size_t)r * C, (size_t)C * 4, 512);
        rows_dinp += sector_bytes(dinp.f(0) + (size_t)r * C, (size_t)C * 4, 512);
        rows_dout += sector_bytes((const char *)dout.t[0].d + (size_t)r * C * ds, (size_t)C * ds,
                                  128 * ds);
    }
    const double wb = blocks * (sector_bytes(w.f(0), (size_t)C * 4, 128) +
                                sector_bytes(b.f(0), (size_t)C * 4, 128));
    const double wonly = blocks * sector_bytes(w.f(0), (size_t)C * 4, 128);
    const double mr = (double)R * 32 * 2;
    const char *fwd = "(layernorm_fwd_kernel<TO, NS>)", *bwd = "(layernorm_bwd_kernel<TD, NS>)";
    for (int j = 0; j < 2; j++) {
        const int reg = vec && j == 0;
        remove(cost);
        setenv("TBC_EMU_COST", cost, 1);
        launched("layernorm_fwd", cu->ops->layernorm_fwd(cu, o.dev(j), mu.f(j), rs.f(j), x.f(j),
                                                         w.f(j), b.f(j), R, C, eps));
        unsetenv("TBC_EMU_COST");
        expect_kernel(cost_lines(cost), reg ? fwd : "layernorm_fwd_any_kernel<TO>",
                      reg ? rows_x + wb : -1, C % 128 == 0);
        setenv("TBC_EMU_COST", cost, 1);
        launched("layernorm_bwd",
                 cu->ops->layernorm_bwd(cu, dinp.f(j), dw.f(j), db.f(j), dout.dev(j), x.f(j),
                                        w.f(j), mu.f(j), rs.f(j), R, C));
        unsetenv("TBC_EMU_COST");
        expect_kernel(cost_lines(cost), reg ? bwd : "layernorm_bwd_any_kernel<TD>",
                      reg ? rows_x + rows_dinp + rows_dout + wonly + mr : -1, C % 128 == 0);
    }
    same_bits("out", o.t[0], o.t[1]);
    same_bits("mean", mu.t[0], mu.t[1]);
    same_bits("rstd", rs.t[0], rs.t[1]);
    same_bits("dinp", dinp.t[0], dinp.t[1]);
    same_bits("dw", dw.t[0], dw.t[1]);
    same_bits("db", db.t[0], db.t[1]);
    n_failed += x.release() | w.release() | b.release() | dout.release() | dinp.release() |
                o.release() | mu.release() | rs.release() | dw.release() | db.release();
    release({&xh, &wh, &bh, &douth, &dinph});
}

static void cases_layernorm_bits(void)
{
    /* 768: ViT-B, 6 slices, 2 blocks of 64 rows (the second of 6); 384 and 1024: 3 and 8 full
     * slices; 100 and 36: a part slice; 770 and 765: not a multiple of 4; 1028: past the
     * registers' 1024; 1: one column. */
    const int shapes[][2] = {{70, 768}, {9, 384}, {5, 1024}, {13, 100}, {3, 36},
                             {6, 770},  {5, 765}, {4, 1028}, {3, 1}};
    for (const auto &s : shapes) {
        case_layernorm_bits(s[0], s[1], TB_DTYPE_F32);
        case_layernorm_bits(s[0], s[1], TB_DTYPE_BF16);
    }
}

static void cases_vec_scalar(void)
{
    const int F = TB_DTYPE_F32, H = TB_DTYPE_BF16;
    const int dts[][4] = {{F, F, F, F}, {H, H, H, H}, {F, H, H, F}};
    int bad_free = 0;
    for (size_t n : {(size_t)7, (size_t)4096, (size_t)20011}) {
        for (int act = TBI_ACT_GELU; act <= TBI_ACT_QUICKGELU; act++)
            for (const int *dt : dts) {
                printf("  %s n %zu dts %d%d%d%d\n", act == TBI_ACT_GELU ? "gelu" : "quickgelu", n,
                       dt[0], dt[1], dt[2], dt[3]);
                twins x(make(dt[2], n, 0, 3)), dy(make(dt[3], n, 0, 1));
                twins out(fresh(dt[1], n)), dx(fresh(dt[0], n));
                for (int j = 0; j < 2; j++)
                    launched("act_fwd", cu->ops->act_fwd(cu, act, out.dev(j), x.dev(j), n));
                same_bits("act out", out.t[0], out.t[1]);
                for (int j = 0; j < 2; j++)
                    launched("act_bwd", cu->ops->act_bwd(cu, act, dx.dev(j), out.dev(j), x.dev(j),
                                                         dy.dev(j), n));
                same_bits("dinp", dx.t[0], dx.t[1]);
                same_bits("out", out.t[0], out.t[1]);
                bad_free |= x.release() | dy.release() | out.release() | dx.release();
            }
        printf("  add, scale_add (B 3) n %zu\n", n);
        twins a(make(F, 3 * n, 0, 1)), b(make(F, 3 * n, 0, 1)), sc(make(F, 3, 0.5f, 0.5f));
        twins o(fresh(F, 3 * n)), oh(fresh(H, 3 * n));
        for (int j = 0; j < 2; j++)
            launched("add", cu->ops->add(cu, o.f(j), a.f(j), b.f(j), 3 * n));
        same_bits("add", o.t[0], o.t[1]);
        for (int j = 0; j < 2; j++)
            launched("scale_add", cu->ops->scale_add(cu, oh.dev(j), a.f(j), b.f(j), sc.f(j), 3, n));
        same_bits("scl_add", oh.t[0], oh.t[1]);
        for (int j = 0; j < 2; j++)
            launched("scale_add", cu->ops->scale_add(cu, o.dev(j), nullptr, b.f(j), sc.f(j), 3, n));
        same_bits("scl_add", o.t[0], o.t[1]);
        bad_free |= a.release() | b.release() | sc.release() | o.release() | oh.release();
        printf("  adamw, lion, sgd n %zu\n", n);
        twins p(make(F, n, 0, 1)), g(make(F, n, 0, 1e-2f)), m(make(F, n, 0, 1e-3f));
        ten vh = make(F, n, 0, 1e-5f);
        for (size_t i = 0; i < n; i++)
            hf(vh)[i] = fabsf(hf(vh)[i]);
        twins v(vh);
        for (int j = 0; j < 2; j++)
            launched("adamw", cu->ops->adamw(cu, p.f(j), g.f(j), 0.5f, m.f(j), v.f(j), n, 1e-3f,
                                             0.9f, 0.999f, 1e-8f, 0.05f, 3));
        for (int j = 0; j < 2; j++)
            launched("lion",
                     cu->ops->lion(cu, p.f(j), g.f(j), 0.5f, m.f(j), n, 1e-3f, 0.9f, 0.99f, 0.05f));
        for (int j = 0; j < 2; j++)
            launched("sgd", cu->ops->sgd(cu, p.f(j), g.f(j), 0.5f, m.f(j), n, 1e-2f, 0.9f, 4e-5f));
        same_bits("param", p.t[0], p.t[1]);
        same_bits("m", m.t[0], m.t[1]);
        same_bits("v", v.t[0], v.t[1]);
        bad_free |= p.release() | g.release() | m.release() | v.release() | emu_free(vh.d);
    }
    n_failed += bad_free != 0;
}

/* The launchers' own checks: what they refuse before any launch. */
static void case_arguments(void)
{
    float *f = (float *)emu_malloc(64 * sizeof(float));
    const tbi_t odd = tbi_t_of((char *)f + 2, TB_DTYPE_F32), ok = tbi_f32(f);
    const int refused =
        cu->ops->layernorm_fwd(cu, ok, f, f, f, f, f, 1, 0, 1e-5f) == TB_EINVAL &&
        cu->ops->act_fwd(cu, 7, ok, ok, 4) == TB_EINVAL &&
        cu->ops->act_fwd(cu, TBI_ACT_GELU, odd, ok, 4) == TB_EINVAL &&
        cu->ops->act_fwd(cu, TBI_ACT_GELU, tbi_t_of(f, 5), ok, 4) == TB_EINVAL &&
        cu->ops->adamw(cu, f, f, 1, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0) == TB_EINVAL &&
        cu->ops->scale_add(cu, ok, f, f, f, -1, 4) == TB_EINVAL;
    printf("  arguments: C 0, unknown activation, misaligned f32, unknown dtype, step 0, B < 0: "
           "TB_EINVAL %s\n",
           refused ? "ok" : "FAIL");
    n_failed += !refused;
    emu_free(f);
}

/* ---- the harness's own proof: planted bugs ------------------------------------------------- */

/* (a) a bound off by one (i <= n): thread n reads x[n], one past the end. */
__global__ void planted_read_past_kernel(float *y, const float *x, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n)
        y[i < n ? i : 0] = x[i];
}

/* (a') an index shifted by one the other way: thread 0 writes y[-1]. */
__global__ void planted_write_before_kernel(float *y, const float *x, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i - 1] = x[i];
}

/* (b) the last element is never written. */
__global__ void planted_skip_last_kernel(float *y, const float *x, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n - 1)
        y[i] = 2 * x[i];
}

/* (b') a block sum that reads a shared slot lane 31 never wrote. */
__global__ void planted_smem_kernel(float *y, const float *x)
{
    DYNAMIC_SMEM(smem);
    float *part = (float *)smem;
    if (threadIdx.x < 31)
        part[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0;
        for (int i = 0; i < 32; i++)
            s += part[i];
        y[0] = s;
    }
}

/* (d) a warp sum after lane 0 left. */
__global__ void planted_early_exit_kernel(float *y, const float *x)
{
    if (threadIdx.x == 0)
        return;
    const float s = warp_sum(x[threadIdx.x]);
    if (threadIdx.x == 1)
        y[0] = s;
}

__global__ void planted_touch_kernel(float *y)
{
    DYNAMIC_SMEM(smem);
    (void)smem;
    if (blockIdx.x == 0 && threadIdx.x == 0)
        y[0] = 1;
}

/* Runs fn in a child process; 1 if the child died of sig (the fault or abort the harness
 * should raise), with what it printed on stderr left visible. */
static int dies_of(int sig, const std::function<void()> &fn)
{
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

static void expect(const char *what, int ok)
{
    printf("  planted: %s | %s\n", what, ok ? "caught, ok" : "NOT CAUGHT, FAIL");
    n_failed += !ok;
}

static void planted_bounds(void)
{
    const int n = 100;
    expect("(a) bound i <= n reads x[n]: SIGSEGV on the guard page after x", dies_of(SIGSEGV, [&] {
               emu_placement = EMU_PLACE_END;
               float *x = (float *)emu_malloc(n * 4), *y = (float *)emu_malloc(n * 4);
               TBC_LAUNCH(planted_read_past_kernel, 1, 128, 0, nullptr, y, x, n);
           }));
    expect("(a) index i - 1 writes y[-1]: SIGSEGV on the guard page before y",
           dies_of(SIGSEGV, [&] {
               emu_placement = EMU_PLACE_START;
               float *x = (float *)emu_malloc(n * 4), *y = (float *)emu_malloc(n * 4);
               TBC_LAUNCH(planted_write_before_kernel, 1, 128, 0, nullptr, y, x, n);
           }));
    expect("(d) warp shuffle after lane 0 exited: abort", dies_of(SIGABRT, [&] {
               float *x = (float *)emu_malloc(32 * 4), *y = (float *)emu_malloc(4);
               memset(x, 0, 32 * 4);
               TBC_LAUNCH(planted_early_exit_kernel, 1, 32, 0, nullptr, y, x);
           }));
}

/* The comparison must fail: check() counts a failure, which is taken back here. */
static int comparison_fails(const char *what, const ten &t)
{
    printf("    (the comparison below must fail)\n");
    const int before = n_failed, bad = check(what, t, TOL_ADD);
    n_failed = before;
    n_checks--;
    return bad;
}

static void planted_unwritten(void)
{
    const int n = 100;
    ten x = make(TB_DTYPE_F32, n, 0, 1), y = fresh(TB_DTYPE_F32, n);
    for (int i = 0; i < n; i++)
        hf(y)[i] = 2 * hf(x)[i];
    TBC_LAUNCH(planted_skip_last_kernel, 1, 128, 0, nullptr, df(y), df(x), n);
    expect("(b) last element never written: NaN fails the comparison", comparison_fails("y", y));
    ten s = fresh(TB_DTYPE_F32, 1);
    hf(s)[0] = 0;
    for (int i = 0; i < 32; i++)
        hf(s)[0] += hf(x)[i];
    TBC_LAUNCH(planted_smem_kernel, 1, 32, 32 * sizeof(float), nullptr, df(s), df(x));
    expect("(b) shared slot never written: NaN fails the comparison", comparison_fails("sum", s));
    release({&x, &y, &s});
}

/* 1 if the launch was refused (and the kernel did not run). */
static int refused(const std::function<void()> &launch, float *y)
{
    y[0] = 0;
    launch();
    return cudaGetLastError() != cudaSuccess && y[0] == 0;
}

/* (d) two streams, the second reading what the first writes: without an event between them
 * the emulated device runs the newer stream first (emulate_rt.h), so the reader sees the fresh
 * memory's NaN, where a GPU would usually have finished the writer and hidden the bug; with
 * cudaEventRecord and cudaStreamWaitEvent's twins, the values arrive. */
__global__ void planted_fill_kernel(float *y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = (float)i;
}

__global__ void planted_read_kernel(float *z, const float *y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        z[i] = y[i];
}

static int streamed_nans(int with_wait)
{
    const int n = 64;
    cudaStream_t a = emu_stream_create(), b = emu_stream_create();
    const int ev = emu_event_create();
    float *y = (float *)emu_malloc(n * 4), *z = (float *)emu_malloc(n * 4);
    TBC_LAUNCH(planted_fill_kernel, 1, n, 0, a, y, n);
    if (with_wait) {
        emu_event_record(ev, a);
        emu_stream_wait(b, ev);
    }
    TBC_LAUNCH(planted_read_kernel, 1, n, 0, b, z, y, n);
    const int queued = !isnan(y[0]) ? -1 : 0; /* nothing ran at the launch */
    emu_drain();
    int nans = 0;
    for (int i = 0; i < n; i++)
        nans += isnan(z[i]) ? 1 : z[i] != (float)i ? 1000 : 0;
    emu_free(y);
    emu_free(z);
    emu_stream_destroy(a);
    emu_stream_destroy(b);
    return queued ? -1 : nans;
}

static void planted_streams(void)
{
    expect("(d) a reader on another stream without an event wait: reads NaN (64 of 64)",
           streamed_nans(0) == 64);
    expect("(d) the same with the event wait: every value arrives", streamed_nans(1) == 0);
}

static void planted_limits(void)
{
    float *y = (float *)emu_malloc(4);
    expect("(c) 2048 threads per block: refused",
           refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, 2048, 0, nullptr, y); }, y));
    expect(
        "(c) block (1, 1, 128): refused",
        refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, dim3(1, 1, 128), 0, nullptr, y); }, y));
    expect(
        "(c) grid y 65536: refused",
        refused([&] { TBC_LAUNCH(planted_touch_kernel, dim3(1, 65536), 32, 0, nullptr, y); }, y));
    expect("(c) 64 KiB of dynamic shared memory without the opt-in: refused",
           refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, 32, 64 * 1024, nullptr, y); }, y));
    const int set64 =
        cudaFuncSetAttribute(planted_touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             64 * 1024) == cudaSuccess;
    expect(
        "(c) 64 KiB after the opt-in: runs",
        set64 &&
            !refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, 32, 64 * 1024, nullptr, y); }, y));
    const int set100 =
        cudaFuncSetAttribute(planted_touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             100 * 1024) == cudaSuccess;
    expect(
        "(c) 100 KiB on sm_86 (99 KiB at most): opt-in and launch refused",
        !set100 &&
            refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, 32, 100 * 1024, nullptr, y); }, y));
    emu_arch = 90;
    const int set100h =
        cudaFuncSetAttribute(planted_touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             100 * 1024) == cudaSuccess;
    expect(
        "(c) 100 KiB on sm_90 (227 KiB) after the opt-in: runs",
        set100h &&
            !refused([&] { TBC_LAUNCH(planted_touch_kernel, 1, 32, 100 * 1024, nullptr, y); }, y));
    emu_arch = 86;
    emu_free(y);
}

/* Two emulated devices share this process: this file's (the tensors, the planted kernels) and
 * the library's cuda-emu (the memory it allocates itself: the scratch LayerNorm's parameter
 * gradients borrow). Each finds a block's writes to its own allocations through SIGSEGV, and
 * the handler installed last, this file's, would take the library's faults for bugs: a fault
 * outside this file's allocations goes on to the handler the library installed. */
static struct sigaction lib_segv, lib_bus;

static void shared_segv(int sig, siginfo_t *si, void *uc)
{
    const unsigned char *a = (const unsigned char *)si->si_addr;
    for (const emu_alloc &e : emu_allocs)
        if (a >= e.map && a < e.map + e.map_bytes)
            return emu_segv(sig, si, uc);
    const struct sigaction &lib = sig == SIGBUS ? lib_bus : lib_segv;
    if ((lib.sa_flags & SA_SIGINFO) && lib.sa_sigaction)
        return lib.sa_sigaction(sig, si, uc);
    emu_segv(sig, si, uc);
}

/* After the library's backend opened (its handler installed with its first allocation). */
static void share_fault_handler(void)
{
    sigaction(SIGSEGV, nullptr, &lib_segv);
    sigaction(SIGBUS, nullptr, &lib_bus);
    emu_mem_init();
    struct sigaction sa = {};
    sa.sa_sigaction = shared_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

int main(void)
{
    tbi_backend *cpu = nullptr;
    if (tbi_backend_open(&cpu, "cpu")) {
        fprintf(stderr, "ops_emulate: no CPU backend\n");
        return 1;
    }
    if (tbi_backend_open(&cu, "cuda-emu")) {
        fprintf(stderr, "ops_emulate: no cuda-emu backend: %s\n", tb_errmsg());
        return 1;
    }
    share_fault_handler();
    const emu_place places[] = {EMU_PLACE_END, EMU_PLACE_START};
    for (emu_place p : places) {
        emu_placement = p;
        printf("device memory flush against the guard page at its %s:\n",
               p == EMU_PLACE_END ? "end" : "start");
        cases_ops(cpu);
    }
    emu_placement = EMU_PLACE_END;
    printf("LayerNorm against its kernels before the register kernels, bit for bit:\n");
    cases_layernorm_bits();
    printf("the vector forms (16-byte aligned twins) against the scalar forms (misaligned):\n");
    cases_vec_scalar();
    case_arguments();
    printf("the harness against planted bugs (the faults' own reports on stderr):\n");
    planted_bounds();
    planted_unwritten();
    planted_limits();
    planted_streams();
    tbi_backend_close(&cpu);
    tbi_backend_close(&cu);
    emu_release();
    printf("%d of %d checks failed\n", n_failed, n_checks);
    return n_failed ? 1 : 0;
}

/* tests/test_plan.c - the step's memory planner (src/model/plan.c): on random declarations,
 * no two buffers live at a common tick share a byte, and the peak lies between the most
 * bytes live at one tick and the sum of all; buffers whose lifetimes nest as a model's do
 * reach that lower bound; the slots get their buffers, a zero-byte one NULL; a plan larger
 * than the backend's free memory is refused naming what and the advice, before any arena.
 * The models' own declarations are checked by their parity tests (test_vit, test_mae,
 * test_clip: any buffer used outside its declared ticks would corrupt another's values). */
#define _POSIX_C_SOURCE 200809L
#include "model/plan.h"
#include "tb_test.h"
#include "tubelet/rng.h"

enum { N = 60, TICKS = 40 };

static int live_at(const struct tbi_plan_buf *b, int t)
{
    for (int i = 0; i < b->n; i++)
        if (b->live[i][0] <= t && t <= b->live[i][1])
            return 1;
    return 0;
}

/* The most bytes live at one tick: no placement can do with less. */
static size_t live_bound(const struct tbi_plan *p)
{
    size_t most = 0;
    for (int t = 0; t < TICKS; t++) {
        size_t sum = 0;
        for (int i = 0; i < p->n; i++)
            sum += live_at(&p->b[i], t) ? p->b[i].bytes : 0;
        most = sum > most ? sum : most;
    }
    return most;
}

/* Every pair live at a common tick in disjoint bytes; every buffer inside the peak. */
static int sound(const struct tbi_plan *p)
{
    int ok = 1;
    for (int i = 0; i < p->n; i++) {
        const struct tbi_plan_buf *a = &p->b[i];
        ok &= a->off + a->bytes <= p->peak && a->off % TBI_PLAN_ALIGN == 0;
        for (int j = i + 1; j < p->n; j++) {
            const struct tbi_plan_buf *b = &p->b[j];
            int together = 0;
            for (int t = 0; t < TICKS && !together; t++)
                together = live_at(a, t) && live_at(b, t);
            if (together && a->off < b->off + b->bytes && b->off < a->off + a->bytes) {
                TBT_FAIL("%s and %s are live together but share bytes", a->name, b->name);
                ok = 0;
            }
        }
    }
    return ok;
}

static void test_random(void)
{
    tbt_case = "random declarations: sound, between the bounds";
    float *slots[N];
    for (int round = 0; round < 50; round++) {
        tb_rng r;
        tb_rng_init(&r, (uint64_t)round, 0);
        struct tbi_plan p = {0};
        size_t sum = 0;
        for (int i = 0; i < N; i++) {
            size_t bytes = 1 + tb_rng_below(&r, 1 << 16);
            int a = (int)tb_rng_below(&r, TICKS), b = (int)tb_rng_below(&r, TICKS);
            tbi_plan_add(&p, "random", &slots[i], bytes, a < b ? a : b, a < b ? b : a);
            if (tb_rng_below(&r, 4) == 0) { /* a second range, after the first */
                int c = (a < b ? b : a) + 1 + (int)tb_rng_below(&r, 3);
                if (c < TICKS)
                    tbi_plan_also(&p, c, c + (int)tb_rng_below(&r, (uint64_t)(TICKS - c)));
            }
            sum += p.b[p.n - 1].bytes;
        }
        CHECK_EQ(tbi_plan_place(&p), 0);
        CHECK(sound(&p));
        size_t low = live_bound(&p);
        CHECK_MSG(p.peak >= low && p.peak <= sum, "round %d: peak %zu outside [%zu, %zu]", round,
                  p.peak, low, sum);
        if (round == 0)
            printf("random: peak %zu bytes, most live at once %zu, all %zu\n", p.peak, low, sum);
        tbi_plan_clear(&p);
    }
}

/* A tower's shape: L activation sets, each from its forward tick to its backward tick
 * (nested), then L gradients each from its backward tick to the end: the gradients go into
 * the dead sets, and the peak is the lower bound. */
static void test_tower(void)
{
    tbt_case = "a tower's lifetimes: gradients in dead activations, the peak at the bound";
    enum { L = 6 };
    float *acts[L], *grads[L];
    struct tbi_plan p = {0};
    int end = 2 * L + 1;
    for (int l = 0; l < L; l++)
        tbi_plan_add(&p, "acts", &acts[l], 100 * TBI_PLAN_ALIGN, l, 2 * L - l);
    for (int l = 0; l < L; l++)
        tbi_plan_add(&p, "grads", &grads[l], 40 * TBI_PLAN_ALIGN, 2 * L - l, end);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK(sound(&p));
    CHECK_EQ(p.peak, live_bound(&p));
    CHECK(p.peak < (size_t)L * 140 * TBI_PLAN_ALIGN);
    tbi_plan_clear(&p);
}

static void test_slots(void)
{
    tbt_case = "slots point into the arena; nothing for zero bytes";
    tbi_backend *be = NULL;
    CHECK_EQ(tbi_backend_open(&be, "cpu"), 0);
    if (!be)
        return;
    struct tbi_plan p = {0};
    float *a = NULL, *b = NULL, *none = (float *)&p;
    int32_t *c = NULL;
    tbi_plan_add(&p, "a", &a, 1000, 0, 1);
    tbi_plan_add(&p, "none", &none, 0, 0, 3);
    tbi_plan_add(&p, "b", &b, 1000, 2, 3);
    tbi_plan_add(&p, "c", &c, 10, 0, 3);
    CHECK(none == NULL);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK_EQ(tbi_plan_alloc(&p, be, "the test's buffers", "none"), 0);
    CHECK(a && b && c);
    CHECK(a == b); /* disjoint lifetimes, the same size: the same bytes */
    CHECK((char *)c >= (char *)p.arena && (char *)c + 10 <= (char *)p.arena + p.peak);
    CHECK((char *)a + 1000 <= (char *)c || (char *)c + 10 <= (char *)a);
    tbi_plan_clear(&p);

    tbt_case = "a plan larger than the free memory: refused, named";
    uint64_t have = 0;
    CHECK_EQ(be->ops->mem_avail(be, &have), 0);
    float *huge = NULL;
    tbi_plan_add(&p, "huge", &huge, (size_t)(have + (have >> 1) + 1), 0, 0);
    CHECK_EQ(tbi_plan_place(&p), 0);
    CHECK_EQ(tbi_plan_alloc(&p, be, "the activations of 99 clips", "lower --batch"), TB_ENOMEM);
    CHECK_STR_HAS(tb_errmsg(), "the activations of 99 clips need ");
    CHECK_STR_HAS(tb_errmsg(), "lower --batch");
    CHECK(p.arena == NULL);
    tbi_plan_clear(&p);
    tbi_backend_close(&be);
}

int main(void)
{
    tbt_begin("plan");
    test_random();
    test_tower();
    test_slots();
    TBT_EXIT();
}

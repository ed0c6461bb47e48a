/* tests/test_core.c - core: Philox known answers and stream independence, uniform ranges,
 * the purposes' streams (distinct, and the old ones unchanged), status text, the thread-local
 * error message, mkdir -p and atomic writes; CRC-32C on RFC 3720's vectors, against its
 * bitwise definition on seeded buffers of every length to 300 and continued over any split. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "tb_test.h"
#include "tubelet/rng.h"

/* Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors). */
static void test_philox_kat(void)
{
    tbt_case = "philox known answers";
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
        tb_rng r;
        tb_rng_init(&r, 0, 0);
        memcpy(r.ctr, kat[i].ctr, sizeof(r.ctr));
        memcpy(r.key, kat[i].key, sizeof(r.key));
        for (int j = 0; j < 4; j++) {
            uint32_t got = tb_rng_u32(&r);
            CHECK_MSG(got == kat[i].out[j], "vector %zu word %d: %08x != %08x", i, j, got,
                      kat[i].out[j]);
        }
    }
}

static void test_rng_streams(void)
{
    tbt_case = "rng streams";
    tb_rng a, b, c;
    tb_rng_init(&a, 42, tb_rng_stream(1, 2, 3));
    tb_rng_init(&b, 42, tb_rng_stream(1, 2, 3));
    tb_rng_init(&c, 42, tb_rng_stream(1, 2, 4));
    int same_ab = 1, same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = tb_rng_u64(&a), y = tb_rng_u64(&b), z = tb_rng_u64(&c);
        same_ab &= x == y;
        same_ac += x == z;
    }
    CHECK(same_ab);
    CHECK_EQ(same_ac, 0);
    CHECK(tb_rng_stream(1, 2, 3) != tb_rng_stream(2, 1, 3));

    /* Uniform draws stay in range and have the right mean; below() hits every value. */
    tb_rng r;
    tb_rng_init(&r, 7, 0);
    double sum = 0, sum_n = 0, sum_n2 = 0;
    int hits[10] = {0};
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = tb_rng_uniform(&r);
        CHECK(u >= 0 && u < 1);
        sum += u;
        uint64_t k = tb_rng_below(&r, 10);
        CHECK(k < 10);
        hits[k]++;
        double g = tb_rng_normal(&r);
        sum_n += g;
        sum_n2 += g * g;
    }
    CHECK_MSG(fabs(sum / n - 0.5) < 0.005, "uniform mean %f", sum / n);
    for (int k = 0; k < 10; k++)
        CHECK_MSG(abs(hits[k] - n / 10) < n / 100, "value %d drawn %d times of %d", k, hits[k], n);
    CHECK_MSG(fabs(sum_n / n) < 0.01 && fabs(sum_n2 / n - 1) < 0.02, "normal mean %f var %f",
              sum_n / n, sum_n2 / n);
}

/* The first n words of a generator. */
static void words(tb_rng r, uint32_t *out, int n)
{
    for (int k = 0; k < n; k++)
        out[k] = tb_rng_u32(&r);
}

/* Purpose p with keys (a, b, c) and a raw stream give the same numbers (the first 8 words). */
static int same_as_raw(uint64_t seed, enum tb_rng_purpose p, uint64_t a, uint64_t b,
                       uint64_t stream)
{
    tb_rng x, y;
    uint32_t wx[8], wy[8];
    tb_rng_init_for(&x, seed, p, a, b);
    tb_rng_init(&y, seed, stream);
    words(x, wx, 8);
    words(y, wy, 8);
    return !memcmp(wx, wy, sizeof(wx));
}

/* The compatibility contract: the purposes that replaced hand-made stream ids give exactly
 * the numbers of those ids, so a seed gives the same batches, initial weights and synthetic
 * datasets as before. Only the substitute's stream changed (it collided with the shuffle's). */
static void test_rng_legacy(void)
{
    tbt_case = "rng purposes: the old streams unchanged";
    const uint64_t seeds[] = {0, 1, 42, 0xfedcba9876543210ull};
    for (int s = 0; s < 4; s++) {
        uint64_t seed = seeds[s];
        for (uint64_t e = 0; e < 4; e++) {
            CHECK_MSG(same_as_raw(seed, TB_RNG_SHUFFLE, e, 0, tb_rng_stream(e, 0, 7)),
                      "shuffle, epoch %" PRIu64, e);
            for (uint64_t i = 0; i < 64; i++)
                CHECK_MSG(same_as_raw(seed, TB_RNG_CLIP, e, i, tb_rng_stream(e, i, 0)),
                          "clip, epoch %" PRIu64 " sample %" PRIu64, e, i);
        }
        for (uint64_t v = 0; v < 64; v++)
            CHECK_MSG(same_as_raw(seed, TB_RNG_SYNTH_VIDEO, v, 0, tb_rng_stream(1, v, 0)),
                      "synth video %" PRIu64, v);
        CHECK(same_as_raw(seed, TB_RNG_SYNTH_SPLIT, 0, 0, tb_rng_stream(2, 0, 0)));
        CHECK(same_as_raw(seed, TB_RNG_INIT, 0, 0, 0x5eed));
        CHECK(same_as_raw(seed, TB_RNG_FRAMES, 0, 0, 0));
    }
    /* The three-key form with c = 0 is the two-key form, for every purpose. */
    for (int p = 1; p < TB_RNG_N_PURPOSES; p++)
        for (uint64_t a = 0; a < 3; a++)
            for (uint64_t b = 0; b < 3; b++) {
                tb_rng x, y;
                uint32_t wx[4], wy[4];
                tb_rng_init_for(&x, 42, (enum tb_rng_purpose)p, a, b);
                tb_rng_init_for3(&y, 42, (enum tb_rng_purpose)p, a, b, 0);
                words(x, wx, 4);
                words(y, wy, 4);
                CHECK_MSG(!memcmp(wx, wy, sizeof(wx)), "purpose %d (%" PRIu64 ", %" PRIu64
                          ", 0)", p, a, b);
            }
}

struct drawn {
    uint64_t first;   /* the first 64 bits of the stream */
    int purpose;
    uint64_t a, b, c;
};

static int by_first(const void *x, const void *y)
{
    uint64_t u = ((const struct drawn *)x)->first, v = ((const struct drawn *)y)->first;
    return (u > v) - (u < v);
}

/* The one overlap the header documents: the synth's streams are CLIP's of epochs 1 and 2. */
static int documented_overlap(const struct drawn *x, const struct drawn *y)
{
    if (x->purpose != TB_RNG_CLIP) {
        const struct drawn *t = x;
        x = y;
        y = t;
    }
    if (x->purpose != TB_RNG_CLIP || x->c || y->b || y->c)
        return 0;
    if (y->purpose == TB_RNG_SYNTH_VIDEO)
        return x->a == 1 && x->b == y->a;
    return y->purpose == TB_RNG_SYNTH_SPLIT && y->a == 0 && x->a == 2 && x->b == 0;
}

/* Every purpose over a grid of keys (a: epochs 0-3, b: indices 0-63, c: 0 and attempts 1-7)
 * gives a stream of its own: no two (purpose, a, b, c) share their first output, except the
 * synth's documented overlap with CLIP. In particular the old collision, the shuffle of
 * epoch e equal to the substitute of position 0 at attempt 6, is gone. */
static void test_rng_purposes(void)
{
    tbt_case = "rng purposes: distinct streams";
    enum { NA = 4, NB = 64, NC = 8 };
    size_t n = (size_t)(TB_RNG_N_PURPOSES - 1) * NA * NB * NC, m = 0;
    struct drawn *d = malloc(sizeof(*d) * n);
    for (int p = 1; p < TB_RNG_N_PURPOSES; p++)
        for (uint64_t a = 0; a < NA; a++)
            for (uint64_t b = 0; b < NB; b++)
                for (uint64_t c = 0; c < NC; c++) {
                    tb_rng r;
                    tb_rng_init_for3(&r, 42, (enum tb_rng_purpose)p, a, b, c);
                    d[m++] = (struct drawn){tb_rng_u64(&r), p, a, b, c};
                }
    qsort(d, n, sizeof(*d), by_first);
    int overlaps = 0;
    for (size_t k = 1; k < n; k++) {
        if (d[k].first != d[k - 1].first)
            continue;
        const struct drawn *x = &d[k - 1], *y = &d[k];
        if (documented_overlap(x, y)) {
            overlaps++;
            continue;
        }
        TBT_FAIL("purpose %d (%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") and purpose %d (%" PRIu64
                 ", %" PRIu64 ", %" PRIu64 ") draw the same numbers", x->purpose, x->a, x->b,
                 x->c, y->purpose, y->a, y->b, y->c);
    }
    CHECK_EQ(overlaps, NA + 1); /* SYNTH_VIDEO (v < NA) = CLIP (1, v), SYNTH_SPLIT = CLIP (2, 0) */
    free(d);

    /* The collision that made the purposes: the old substitute id of position 0 at attempt 6
     * was the shuffle's. */
    for (uint64_t e = 0; e < NA; e++) {
        CHECK(tb_rng_stream(e, 0, 6 + 1) == tb_rng_stream(e, 0, 7));
        tb_rng shuffle, sub;
        tb_rng_init_for(&shuffle, 42, TB_RNG_SHUFFLE, e, 0);
        tb_rng_init_for3(&sub, 42, TB_RNG_SUBSTITUTE, e, 0, 6);
        CHECK_MSG(tb_rng_u64(&shuffle) != tb_rng_u64(&sub), "epoch %" PRIu64, e);
    }
}

static void *thread_err(void *arg)
{
    (void)arg;
    tbi_err(TB_EIO, "from another thread");
    return NULL;
}

static void test_errors(void)
{
    tbt_case = "errors";
    CHECK(!strcmp(tb_strerror(TB_OK), "success"));
    CHECK(!strcmp(tb_strerror(TB_EDECODE), "cannot demux or decode video"));
    CHECK(!strcmp(tb_strerror(12345), "unknown error"));
    for (int code = TB_EDIST; code <= 0; code++)
        CHECK_MSG(strcmp(tb_strerror(code), "unknown error"), "code %d has no text", code);
    int rc = tbi_err(TB_ENOENT, "%s: frame %d", "a.mp4", 7);
    CHECK_EQ(rc, TB_ENOENT);
    CHECK(!strcmp(tb_errmsg(), "a.mp4: frame 7"));
    rc = tbi_err_prefix(TB_EIO, "outer %d", 1);
    CHECK_EQ(rc, TB_EIO);
    CHECK(!strcmp(tb_errmsg(), "outer 1: a.mp4: frame 7"));
    /* The message is per thread. */
    pthread_t t;
    pthread_create(&t, NULL, thread_err, NULL);
    pthread_join(t, NULL);
    CHECK(!strcmp(tb_errmsg(), "outer 1: a.mp4: frame 7"));
    tb_errclear();
    CHECK(!strcmp(tb_errmsg(), ""));
}

static void test_fs(void)
{
    tbt_case = "file system";
    char dir[8192], path[8300];
    snprintf(dir, sizeof(dir), "%s/a/b/c", tbt_dir());
    CHECK_EQ(tbi_mkdirs(dir), 0);
    CHECK(tbi_is_dir(dir));
    CHECK_EQ(tbi_mkdirs(dir), 0); /* again: fine */
    snprintf(path, sizeof(path), "%s/file.txt", dir);
    CHECK_EQ(tbi_write_file_atomic(path, "hello\n", 6), 0);
    CHECK(tbi_is_file(path));
    char tmp[8400];
    snprintf(tmp, sizeof(tmp), "%s.part", path);
    CHECK(!tbt_exists(tmp));
    char *text = NULL;
    size_t len = 0;
    CHECK_EQ(tbi_read_file(path, &text, &len, 1024), 0);
    CHECK(text && len == 6 && !strcmp(text, "hello\n"));
    free(text);
    /* A directory under a file cannot be made; the message names the path. */
    snprintf(dir, sizeof(dir), "%s/sub", path);
    CHECK_EQ(tbi_mkdirs(dir), TB_EIO);
    CHECK_STR_HAS(tb_errmsg(), path);
    snprintf(path, sizeof(path), "%s/missing", tbt_dir());
    CHECK_EQ(tbi_read_file(path, &text, NULL, 1024), TB_ENOENT);
    CHECK(text == NULL);
    CHECK_STR_HAS(tb_errmsg(), "missing");
}

/* CRC-32C bit by bit, as its definition reads: the reference for the tables' answers. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void)
{
    tbt_case = "crc32c";
    /* RFC 3720 B.4, and the customary check value of "123456789". */
    unsigned char v[32];
    memset(v, 0, 32);
    CHECK_EQ(tbi_crc32c(v, 32), 0x8A9136AAu);
    memset(v, 0xff, 32);
    CHECK_EQ(tbi_crc32c(v, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        v[i] = (unsigned char)i;
    CHECK_EQ(tbi_crc32c(v, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        v[i] = (unsigned char)(31 - i);
    CHECK_EQ(tbi_crc32c(v, 32), 0x113FDB5Cu);
    CHECK_EQ(tbi_crc32c("123456789", 9), 0xE3069283u);
    CHECK_EQ(tbi_crc32c("", 0), 0);
    /* Seeded bytes at every length and alignment up to 300 (the 8-byte steps and the tail),
     * and every split continued with tbi_crc32c_extend. */
    unsigned char buf[308];
    tb_rng r;
    tb_rng_init(&r, 7, 0);
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(tb_rng_u32(&r) >> 24);
    int bad = 0, bad_split = 0;
    for (size_t n = 0; n <= 300; n++)
        for (size_t off = 0; off < 8; off++) {
            uint32_t want = crc32c_bitwise(buf + off, n);
            bad += tbi_crc32c(buf + off, n) != want;
            size_t cut = (n * 7 + off) % (n + 1);
            bad_split += tbi_crc32c_extend(tbi_crc32c(buf + off, cut), buf + off + cut,
                                           n - cut) != want;
        }
    CHECK_MSG(bad == 0 && bad_split == 0, "%d of 2408 CRCs differ from the bitwise definition, "
              "%d continued over a split", bad, bad_split);
}

static void test_strbuf(void)
{
    tbt_case = "strbuf";
    struct tbi_sb sb = {0};
    CHECK(!strcmp(tbi_sb_str(&sb), ""));
    for (int i = 0; i < 1000; i++)
        tbi_sb_printf(&sb, "%d,", i);
    CHECK(!sb.failed);
    CHECK(!strncmp(tbi_sb_str(&sb), "0,1,2,", 6));
    CHECK(strstr(tbi_sb_str(&sb), ",999,") != NULL);
    tbi_sb_free(&sb);
}

int main(void)
{
    tbt_begin("core");
    test_philox_kat();
    test_rng_streams();
    test_rng_legacy();
    test_rng_purposes();
    test_errors();
    test_fs();
    test_strbuf();
    test_crc32c();
    TBT_EXIT();
}

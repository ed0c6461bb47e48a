/* tests/test_synth.c - tubelet synth: a seed gives byte-identical videos and annotations, another
 * seed another dataset; the CSVs have the EPIC-Kitchens-100 columns and consistent rows (times,
 * frames, class ids, keys, narrations), a split by video; and every annotated action is really
 * in its video: the actor of the noun's colour moves, grows, shrinks or turns as its verb says
 * between the action's start and stop. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "tb_test.h"
#include "tubelet/synth.h"

#define SECONDS 20
#define W 320
#define H 240

static const char *ek_columns =
    "narration_id,participant_id,video_id,narration_timestamp,start_timestamp,stop_timestamp,"
    "start_frame,stop_frame,narration,verb,verb_class,noun,noun_class,all_nouns,"
    "all_noun_classes";

/* Split one CSV line into fields (double quotes protect commas). Modifies line. */
static int split_csv(char *line, char **fields, int max)
{
    int n = 0;
    char *p = line;
    while (n < max) {
        if (*p == '"') {
            fields[n++] = ++p;
            while (*p && *p != '"')
                p++;
            if (*p)
                *p++ = '\0';
        } else {
            fields[n++] = p;
            while (*p && *p != ',')
                p++;
        }
        if (*p != ',')
            break;
        *p++ = '\0';
    }
    return n;
}

static int parse_ts(const char *s)
{
    int h, m, sec, cs;
    char tail;
    if (strlen(s) != 11 || sscanf(s, "%2d:%2d:%2d.%2d%c", &h, &m, &sec, &cs, &tail) != 4)
        return -1;
    return ((h * 60 + m) * 60 + sec) * 100 + cs;
}

struct action {
    char video[16];
    int start_cs, stop_cs, verb, noun;
};

static int read_actions(const char *path, struct action *acts, int max, char videos[][16],
                        int *n_videos)
{
    size_t len;
    char *text = tbt_read(path, &len), *save = NULL;
    int n = 0, line_no = 0;
    CHECK_MSG(text != NULL, "cannot read %s", path);
    if (!text)
        return 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line_no++ == 0) {
            CHECK_MSG(!strcmp(line, ek_columns), "%s: header is '%s'", path, line);
            continue;
        }
        char *f[20];
        int nf = split_csv(line, f, 20);
        CHECK_MSG(nf == 15, "%s:%d: %d fields", path, line_no, nf);
        if (nf != 15 || n == max)
            continue;
        struct action *a = &acts[n++];
        snprintf(a->video, sizeof(a->video), "%s", f[2]);
        a->start_cs = parse_ts(f[4]);
        a->stop_cs = parse_ts(f[5]);
        a->verb = atoi(f[10]);
        a->noun = atoi(f[12]);
        CHECK_MSG(!strcmp(f[3], f[4]), "%s:%d: narration time %s", path, line_no, f[3]);
        CHECK_MSG(a->start_cs >= 0 && a->stop_cs > a->start_cs && a->stop_cs <= SECONDS * 100,
                  "%s:%d: times %s..%s", path, line_no, f[4], f[5]);
        CHECK_EQ(atoi(f[6]), (a->start_cs * 30 + 50) / 100);
        CHECK_EQ(atoi(f[7]), (a->stop_cs * 30 + 50) / 100);
        CHECK_MSG(!strncmp(f[0], f[2], strlen(f[2])) && !strncmp(f[1], f[2], 3),
                  "%s:%d: ids %s %s %s", path, line_no, f[0], f[1], f[2]);
        CHECK_MSG(a->verb >= 0 && a->verb < TB_SYNTH_N_VERBS &&
                  !strcmp(f[9], tb_synth_verb(a->verb)), "%s:%d: verb %s/%s", path, line_no,
                  f[9], f[10]);
        char noun[64];
        CHECK_MSG(a->noun >= 0 && a->noun < TB_SYNTH_N_NOUNS &&
                  !strcmp(f[11], tb_synth_noun(a->noun, noun, sizeof(noun))),
                  "%s:%d: noun %s/%s", path, line_no, f[11], f[12]);
        /* The narration says the verb, the colour and the shape: "move red square left". */
        char colour[32], shape[32];
        sscanf(f[11], "%31[^-]-%31s", colour, shape);
        CHECK_STR_HAS(f[8], colour);
        CHECK_STR_HAS(f[8], shape);
        char first[32];
        sscanf(f[9], "%31[^-]", first);
        CHECK_STR_HAS(f[8], first);
        char list[80];
        snprintf(list, sizeof(list), "['%s']", f[11]);
        CHECK_MSG(!strcmp(f[13], list), "%s:%d: all_nouns %s", path, line_no, f[13]);
        int known = 0;
        for (int v = 0; v < *n_videos; v++)
            known |= !strcmp(videos[v], a->video);
        if (!known)
            snprintf(videos[(*n_videos)++], 16, "%s", a->video);
    }
    free(text);
    return n;
}

/* Pixels of the actor: within a small distance of its colour. */
struct blob {
    double x, y, area;
    uint8_t *mask;
};

static void find_blob(const uint8_t *rgb, const uint8_t colour[3], struct blob *b)
{
    double sx = 0, sy = 0, n = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const uint8_t *p = rgb + ((size_t)y * W + x) * 3;
            int d = abs(p[0] - colour[0]) + abs(p[1] - colour[1]) + abs(p[2] - colour[2]);
            int in = d < 60;
            if (b->mask)
                b->mask[y * W + x] = (uint8_t)in;
            if (in) {
                sx += x;
                sy += y;
                n++;
            }
        }
    b->area = n;
    b->x = n ? sx / n : -1;
    b->y = n ? sy / n : -1;
}

static double iou(const uint8_t *a, const uint8_t *b)
{
    double inter = 0, uni = 0;
    for (int i = 0; i < W * H; i++) {
        inter += a[i] && b[i];
        uni += a[i] || b[i];
    }
    return uni ? inter / uni : 1;
}

static void check_actions_in_video(const char *syn, const struct action *acts, int n)
{
    char path[8192];
    uint8_t *rgb = NULL;
    const char *vid = acts[0].video;
    snprintf(path, sizeof(path), "%s/videos/%s.mp4", syn, vid);
    char cmd[8400];
    snprintf(cmd, sizeof(cmd), "ffmpeg -nostdin -v error -i %s -f rawvideo -pix_fmt rgb24 -",
             path);
    FILE *p = popen(cmd, "r");
    size_t fb = (size_t)W * H * 3, n_frames = (size_t)SECONDS * 30;
    rgb = malloc(fb * n_frames);
    size_t got = fread(rgb, fb, n_frames, p);
    pclose(p);
    CHECK_MSG(got == n_frames, "%s decodes to %zu frames, want %zu", path, got, n_frames);
    uint8_t *m0 = malloc(W * H), *m1 = malloc(W * H);
    for (int i = 0; i < n; i++) {
        const struct action *a = &acts[i];
        if (strcmp(a->video, vid))
            continue;
        uint8_t colour[3];
        tb_synth_noun_rgb(a->noun, colour);
        int f0 = a->start_cs * 30 / 100 + 1, f1 = a->stop_cs * 30 / 100 - 1;
        if ((size_t)f1 >= got)
            continue;
        struct blob b0 = {.mask = m0}, b1 = {.mask = m1};
        find_blob(rgb + f0 * fb, colour, &b0);
        find_blob(rgb + f1 * fb, colour, &b1);
        tbt_case = tb_synth_verb(a->verb);
        CHECK_MSG(b0.area > 100 && b1.area > 100, "%s at %d cs: actor of noun %d not found "
                  "(%.0f / %.0f px)", vid, a->start_cs, a->noun, b0.area, b1.area);
        double dx = b1.x - b0.x, dy = b1.y - b0.y, grow = b1.area / (b0.area + 1);
        int ok;
        switch (a->verb) {
        case 0: ok = dx < -0.2 * W && fabs(dy) < 0.05 * H; break;
        case 1: ok = dx > 0.2 * W && fabs(dy) < 0.05 * H; break;
        case 2: ok = dy < -0.2 * H && fabs(dx) < 0.05 * W; break;
        case 3: ok = dy > 0.2 * H && fabs(dx) < 0.05 * W; break;
        case 6: ok = grow > 2.5 && fabs(dx) < 0.05 * W; break;
        case 7: ok = grow < 0.4 && fabs(dx) < 0.05 * W; break;
        default: {
            /* Turning: stays in place, keeps its size, but its outline changes on the way. */
            double min_iou = 1;
            for (int q = 1; q <= 3; q++) {
                struct blob bq = {.mask = m1};
                find_blob(rgb + (f0 + (f1 - f0) * q / 4) * fb, colour, &bq);
                double o = iou(m0, m1);
                min_iou = o < min_iou ? o : min_iou;
            }
            ok = fabs(dx) < 0.03 * W && fabs(dy) < 0.03 * H && grow > 0.7 && grow < 1.4 &&
                 min_iou < 0.85;
        }
        }
        CHECK_MSG(ok, "%s %d..%d cs: '%s' of noun %d: moved (%.1f, %.1f) px, area x%.2f", vid,
                  a->start_cs, a->stop_cs, tb_synth_verb(a->verb), a->noun, dx, dy, grow);
    }
    free(m0);
    free(m1);
    free(rgb);
}

/* Pixels of an action's actor in the action's first frame. */
static double actor_area(const char *syn, const struct action *a)
{
    char cmd[8400];
    snprintf(cmd, sizeof(cmd),
             "ffmpeg -nostdin -v error -i %s/videos/%s.mp4 -f rawvideo -pix_fmt rgb24 -", syn,
             a->video);
    FILE *p = popen(cmd, "r");
    size_t fb = (size_t)W * H * 3;
    int f0 = a->start_cs * 30 / 100 + 1;
    uint8_t *rgb = malloc(fb);
    size_t got = 0;
    for (int f = 0; f <= f0; f++)
        got = fread(rgb, fb, 1, p);
    pclose(p);
    struct blob b = {0};
    uint8_t colour[3];
    tb_synth_noun_rgb(a->noun, colour);
    find_blob(rgb, colour, &b);
    free(rgb);
    return got == 1 ? b.area : -1;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = tbt_read(a, &la), *y = tbt_read(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

int main(void)
{
    tbt_begin("synth");
    const char *d = tbt_dir();
    char s1[4200], s2[4200], s3[4200], a[8192], b[8192], *out = NULL;
    snprintf(s1, sizeof(s1), "%s/s1", d);
    snprintf(s2, sizeof(s2), "%s/s2", d);
    snprintf(s3, sizeof(s3), "%s/s3", d);

    tbt_case = "synth runs";
    const char *fmt = "%s synth --out %s --videos 4 --seconds %d --size %dx%d --seed %d";
    CHECK_EQ(tbt_run(&out, 300, fmt, tbt_tubelet(), s1, SECONDS, W, H, 3), 0);
    CHECK_STR_HAS(out, "4 videos (3 train, 1 val)");
    free(out);
    /* The second run makes one video at a time: the files must not depend on it. */
    char fmt_jobs[256];
    snprintf(fmt_jobs, sizeof(fmt_jobs), "%s --jobs 1", fmt);
    CHECK_EQ(tbt_run(NULL, 300, fmt_jobs, tbt_tubelet(), s2, SECONDS, W, H, 3), 0);
    CHECK_EQ(tbt_run(NULL, 300, fmt, tbt_tubelet(), s3, SECONDS, W, H, 4), 0);

    tbt_case = "deterministic, whatever the number of jobs";
    const char *files[] = {"videos/P01_01.mp4", "videos/P01_04.mp4",
                           "annotations/EPIC_100_train.csv", "annotations/EPIC_100_validation.csv",
                           "annotations/EPIC_100_verb_classes.csv",
                           "annotations/EPIC_100_noun_classes.csv"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(a, sizeof(a), "%s/%s", s1, files[i]);
        snprintf(b, sizeof(b), "%s/%s", s2, files[i]);
        CHECK_MSG(same_file(a, b), "%s differs between two runs with one seed", files[i]);
    }
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_train.csv", s1);
    snprintf(b, sizeof(b), "%s/annotations/EPIC_100_train.csv", s3);
    CHECK_MSG(!same_file(a, b), "seeds 3 and 4 give the same annotations");

    tbt_case = "class lists";
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_verb_classes.csv", s1);
    char *text = tbt_read(a, NULL);
    CHECK(text && !strncmp(text, "id,key,instances,category\n", 26));
    CHECK_STR_HAS(text, "\n0,move-left,");
    CHECK_STR_HAS(text, "\n7,shrink,");
    free(text);
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_noun_classes.csv", s1);
    text = tbt_read(a, NULL);
    CHECK_STR_HAS(text, "\n0,red-square,");
    CHECK_STR_HAS(text, "\n15,yellow-bar,");
    free(text);

    tbt_case = "annotations";
    static struct action train[400], val[400];
    char train_v[8][16], val_v[8][16];
    int n_tv = 0, n_vv = 0;
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_train.csv", s1);
    int n_train = read_actions(a, train, 400, train_v, &n_tv);
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_validation.csv", s1);
    int n_val = read_actions(a, val, 400, val_v, &n_vv);
    CHECK_EQ(n_tv, 3);
    CHECK_EQ(n_vv, 1);
    for (int i = 0; i < n_tv; i++)
        for (int j = 0; j < n_vv; j++)
            CHECK_MSG(strcmp(train_v[i], val_v[j]), "video %s in both splits", train_v[i]);
    /* About one action per 2.6 s; all verbs appear over the dataset. */
    CHECK_MSG(n_train + n_val >= 4 * SECONDS / 4, "only %d actions", n_train + n_val);
    int seen[TB_SYNTH_N_VERBS] = {0};
    for (int i = 0; i < n_train; i++)
        seen[train[i].verb]++;
    for (int i = 0; i < n_val; i++)
        seen[val[i].verb]++;
    for (int v = 0; v < TB_SYNTH_N_VERBS; v++)
        CHECK_MSG(seen[v] > 0, "verb %s never appears", tb_synth_verb(v));

    /* Actions follow one another without overlapping in a video. */
    for (int i = 1; i < n_train; i++)
        if (!strcmp(train[i].video, train[i - 1].video))
            CHECK(train[i].start_cs > train[i - 1].stop_cs);

    tbt_case = "actions are in the videos";
    for (int v = 0; v < n_tv; v++) {
        int first = 0;
        while (first < n_train && strcmp(train[first].video, train_v[v]))
            first++;
        check_actions_in_video(s1, train + first, n_train - first);
    }
    check_actions_in_video(s1, val, n_val);

    tbt_case = "actor scale";
    /* The same plan (same actions at the same times) with shapes twice as large across. */
    char s4[4200];
    snprintf(s4, sizeof(s4), "%s/s4", d);
    char fmt_scale[256];
    snprintf(fmt_scale, sizeof(fmt_scale), "%s --actor-scale 2", fmt);
    CHECK_EQ(tbt_run(NULL, 300, fmt_scale, tbt_tubelet(), s4, SECONDS, W, H, 3), 0);
    static struct action big[400];
    char big_v[8][16];
    int n_bv = 0;
    snprintf(a, sizeof(a), "%s/annotations/EPIC_100_train.csv", s4);
    CHECK_EQ(read_actions(a, big, 400, big_v, &n_bv), n_train);
    for (int i = 0; i < 3 && i < n_train; i++) {
        CHECK(big[i].start_cs == train[i].start_cs && big[i].verb == train[i].verb);
        double a1 = actor_area(s1, &train[i]), a2 = actor_area(s4, &big[i]);
        CHECK_MSG(a1 > 50 && a2 > 2.5 * a1 && a2 < 6 * a1,
                  "action %d: actor of %.0f px at scale 1, %.0f px at scale 2", i, a1, a2);
    }

    tbt_case = "bad flags";
    CHECK_EQ(tbt_run(&out, 30, "%s synth --out %s --actor-scale 3", tbt_tubelet(), s3), 2);
    free(out);
    CHECK_EQ(tbt_run(&out, 30, "%s synth --out %s --size 321x240", tbt_tubelet(), s3), 1);
    CHECK_STR_HAS(out, "size must be even");
    free(out);
    CHECK_EQ(tbt_run(&out, 30, "%s synth --out %s/videos/P01_01.mp4/x", tbt_tubelet(), s3), 1);
    CHECK_STR_HAS(out, "not a directory");
    free(out);
    TBT_EXIT();
}

/* src/cli/cmd_plot.c - `tubelet plot RUN_DIR`: a run's metrics.jsonl (src/train/loop.c writes
 * it) as one PNG of panels drawn by chart.c: training and validation loss, evaluation accuracy
 * or retrieval, learning rate, gradient norm and clips/s, all against the step. Evaluation lines
 * carry an epoch, not a step: each is placed where its epoch ended (see steps_per_epoch). It
 * reads flat {"key": value} lines only, and neither smooths nor thins the curves.
 * Tests: tests/test_plot.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/chart.h"
#include "cli/cli.h"
#include "cli/sheet.h"
#include "tubelet/video.h"

struct plot_config {
    char *out;
    struct cli_size size;
    int log_loss;
    int json;
};

#define F(name, type, field, def, meta, help, ...)                                            \
    CLI_FLAG(name, type, struct plot_config, field, def, meta, help, __VA_ARGS__)
static const struct cli_flag plot_flags[] = {
    F("out", CLI_STR, out, NULL, "FILE.png", "the picture (default: RUN_DIR/plot.png)",
      CLI_NO_RANGE),
    F("size", CLI_SIZE, size, "1200x900", "WxH", "picture size in pixels", 200, 8192),
    F("log-loss", CLI_BOOL, log_loss, "false", "", "the loss panel on a log10 axis",
      CLI_NO_RANGE),
    F("json", CLI_BOOL, json, "false", "",
      "print what was drawn as JSON: each panel's plot area in pixels, its axes and curves",
      CLI_NO_RANGE),
};
#undef F

/* The keys of metrics.jsonl that are drawn or place a line; any other key is read and skipped. */
#define METRIC_KEYS(X)                                                                         \
    X(K_STEP, "step") X(K_EPOCH, "epoch") X(K_LOSS, "loss") X(K_LR, "lr")                      \
    X(K_GRAD, "grad_norm") X(K_RATE, "clips_per_s") X(K_EVAL_EPOCH, "eval_epoch")              \
    X(K_TOP1, "top1") X(K_TOP5, "top5") X(K_VAL_LOSS, "val_loss") X(K_MAP, "map")              \
    X(K_NDCG, "ndcg") X(K_MAP_V2T, "map_v2t") X(K_MAP_T2V, "map_t2v")                          \
    X(K_ZS_TOP1, "zeroshot_top1") X(K_ZS_TOP5, "zeroshot_top5") X(K_START, "start_step")
#define AS_ENUM(id, key) id,
#define AS_NAME(id, key) key,
enum { METRIC_KEYS(AS_ENUM) N_KEYS };
static const char *const key_names[N_KEYS] = {METRIC_KEYS(AS_NAME)};
#undef AS_ENUM
#undef AS_NAME

enum { P_LOSS, P_ACC, P_RETRIEVAL, P_LR, P_GRAD, P_RATE, N_PANELS };
static const char *const panel_titles[N_PANELS] = {
    "loss", "accuracy (evaluation)", "retrieval (evaluation)", "learning rate",
    "gradient norm", "clips/s"};

/* Every curve: its key, its panel, whether it comes from the evaluation lines, its legend. */
static const struct curve {
    int key, panel, eval;
    const char *label;
} curves[] = {
    {K_LOSS, P_LOSS, 0, "train"},        {K_VAL_LOSS, P_LOSS, 1, "val"},
    {K_TOP1, P_ACC, 1, "top-1"},         {K_TOP5, P_ACC, 1, "top-5"},
    {K_ZS_TOP1, P_ACC, 1, "zero-shot top-1"}, {K_ZS_TOP5, P_ACC, 1, "zero-shot top-5"},
    {K_MAP, P_RETRIEVAL, 1, "mAP"},      {K_NDCG, P_RETRIEVAL, 1, "nDCG"},
    {K_MAP_V2T, P_RETRIEVAL, 1, "mAP v2t"}, {K_MAP_T2V, P_RETRIEVAL, 1, "mAP t2v"},
    {K_LR, P_LR, 0, "lr"},               {K_GRAD, P_GRAD, 0, "grad norm"},
    {K_RATE, P_RATE, 0, "clips/s"},
};
enum { N_CURVES = (int)(sizeof(curves) / sizeof(curves[0])) };

/* The curves of a panel take these in turn; none is a grey of the frame, grid or text. */
static const uint8_t palette[][3] = {{31, 119, 180}, {214, 39, 40}, {44, 160, 44},
                                     {255, 127, 14}, {148, 103, 189}, {140, 86, 75}};

struct row {
    double v[N_KEYS]; /* NAN where the line lacks the key */
    int line;
};

struct metrics {
    struct row *steps, *evals;
    int n_steps, n_evals, cap_steps, cap_evals;
    int n_repeated; /* lines whose step (or eval epoch) a later line gave again */
    int n_partial;  /* an unfinished last line, left out */
};

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

/* Past a JSON string whose opening quote p points at; NULL if it does not end. */
static const char *skip_string(const char *p)
{
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1])
            p++;
    return *p == '"' ? p + 1 : NULL;
}

/* One line as a flat JSON object: the numbers of known keys into v (NAN when absent).
 * 0, or -1 with *why and *at (where it went wrong) set. */
static int parse_line(const char *s, double v[N_KEYS], const char **why, const char **at)
{
    const char *p = skip_ws(s);
    for (int k = 0; k < N_KEYS; k++)
        v[k] = NAN;
    *why = NULL;
    if (*p != '{') {
        *why = "expected '{'";
        goto bad;
    }
    p = skip_ws(p + 1);
    if (*p == '}')
        p++;
    else
        for (;;) {
            p = skip_ws(p);
            const char *key = p + 1, *end;
            if (*p != '"' || !(end = skip_string(p))) {
                *why = *p == '"' ? "unterminated key" : "expected a key in double quotes";
                goto bad;
            }
            size_t key_len = (size_t)(end - 1 - key);
            int k = -1;
            for (int i = 0; i < N_KEYS; i++)
                if (strlen(key_names[i]) == key_len && !strncmp(key, key_names[i], key_len))
                    k = i;
            p = skip_ws(end);
            if (*p != ':') {
                *why = "expected ':' after the key";
                goto bad;
            }
            p = skip_ws(p + 1);
            if (*p == '"') {
                if (!(end = skip_string(p))) {
                    *why = "unterminated string";
                    goto bad;
                }
                p = end;
            } else if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
                p += 4;
            } else if (!strncmp(p, "false", 5)) {
                p += 5;
            } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
                char *num_end;
                double x = strtod(p, &num_end);
                /* strtod also reads hexadecimal, "inf" and "nan", which JSON has not. */
                if (!isfinite(x) || memchr(p, 'x', (size_t)(num_end - p)) ||
                    memchr(p, 'X', (size_t)(num_end - p))) {
                    *why = "not a finite decimal number";
                    goto bad;
                }
                if (k >= 0)
                    v[k] = x;
                p = num_end;
            } else {
                *why = "expected a number (or a string, true, false, null)";
                goto bad;
            }
            p = skip_ws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            if (*p == '}') {
                p++;
                break;
            }
            *why = "expected ',' or '}'";
            goto bad;
        }
    p = skip_ws(p);
    if (*p && *p != '\n') {
        *why = "text after the closing '}'";
        goto bad;
    }
    return 0;
bad:
    *at = p;
    return -1;
}

static int push_row(struct row **rows, int *n, int *cap, const double v[N_KEYS], int line)
{
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 256;
        struct row *g = realloc(*rows, sizeof(*g) * (size_t)c);
        if (!g)
            return -1;
        *rows = g;
        *cap = c;
    }
    memcpy((*rows)[*n].v, v, sizeof((*rows)[*n].v));
    (*rows)[(*n)++].line = line;
    return 0;
}

/* Read path into m. 0, or 1 after printing an error naming the file and line. A line that
 * does not parse is an error, except an unfinished last line (no newline: a run being written
 * or killed mid-line), which is left out with a warning. */
static int load_metrics(const char *path, struct metrics *m)
{
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int line_no = 0, status = 0;
    if (!f) {
        fprintf(stderr, "tubelet plot: %s: cannot open: %s%s\n", path, strerror(errno),
                errno == ENOENT ? " (tubelet train --out DIR writes DIR/metrics.jsonl)" : "");
        return 1;
    }
    while (!status && (len = getline(&line, &cap, f)) >= 0) {
        double v[N_KEYS];
        const char *why, *at;
        line_no++;
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        if (strlen(line) != (size_t)len) {
            fprintf(stderr, "tubelet plot: %s:%d: a NUL byte: not a text line\n", path, line_no);
            status = 1;
        } else if (parse_line(line, v, &why, &at) < 0) {
            if (line[len - 1] != '\n') {
                fprintf(stderr, "tubelet plot: warning: %s:%d: the last line is unfinished "
                        "(%s at column %d); left out\n", path, line_no, why,
                        (int)(at - line) + 1);
                m->n_partial++;
                continue;
            }
            fprintf(stderr, "tubelet plot: %s:%d:%d: %s (each line of metrics.jsonl is one "
                    "JSON object)\n", path, line_no, (int)(at - line) + 1, why);
            status = 1;
        } else if (!isnan(v[K_STEP]) || !isnan(v[K_EVAL_EPOCH])) {
            int is_step = !isnan(v[K_STEP]);
            double key = v[is_step ? K_STEP : K_EVAL_EPOCH];
            if (key < 0) {
                fprintf(stderr, "tubelet plot: %s:%d: \"%s\" is %g, less than 0\n", path,
                        line_no, is_step ? "step" : "eval_epoch", key);
                status = 1;
                break;
            }
            /* Zero-shot accuracy not measured is written as -1. */
            for (int k = K_ZS_TOP1; k <= K_ZS_TOP5; k++)
                if (v[k] < 0)
                    v[k] = NAN;
            if ((is_step ? push_row(&m->steps, &m->n_steps, &m->cap_steps, v, line_no)
                         : push_row(&m->evals, &m->n_evals, &m->cap_evals, v, line_no)) < 0) {
                fprintf(stderr, "tubelet plot: out of memory\n");
                status = 1;
            }
        } else if (!isnan(v[K_START])) {
            /* a start's data line (rows skipped, settings changed): nothing to draw */
        } else {
            fprintf(stderr, "tubelet plot: %s:%d: neither \"step\" nor \"eval_epoch\": not a "
                    "line of tubelet train's metrics\n", path, line_no);
            status = 1;
        }
    }
    if (!status && ferror(f)) {
        fprintf(stderr, "tubelet plot: %s: read error: %s\n", path, strerror(errno));
        status = 1;
    }
    free(line);
    fclose(f);
    if (!status && m->n_steps + m->n_evals == 0) {
        fprintf(stderr, "tubelet plot: %s: no metrics in it (%s; tubelet train writes a line "
                "every --log-every steps and after each evaluation)\n", path,
                line_no == 0 ? "an empty file" : "no complete line");
        status = 1;
    }
    return status;
}

static int cmp_rows(const struct row *a, const struct row *b, int key)
{
    if (a->v[key] != b->v[key])
        return a->v[key] < b->v[key] ? -1 : 1;
    return (a->line > b->line) - (a->line < b->line);
}
static int cmp_steps(const void *a, const void *b) { return cmp_rows(a, b, K_STEP); }
static int cmp_evals(const void *a, const void *b) { return cmp_rows(a, b, K_EVAL_EPOCH); }

/* In order of key; of lines with the same key (a resumed run logs the steps after its last
 * checkpoint again) the last one stays. Returns the rows kept. */
static int sort_unique(struct row *r, int n, int key, int *n_repeated)
{
    int k = 0;
    if (n == 0)
        return 0; /* r may be NULL, which qsort may not take */
    qsort(r, (size_t)n, sizeof(*r), key == K_STEP ? cmp_steps : cmp_evals);
    for (int i = 0; i < n; i++) {
        if (k > 0 && r[k - 1].v[key] == r[i].v[key]) {
            r[k - 1] = r[i];
            (*n_repeated)++;
        } else {
            r[k++] = r[i];
        }
    }
    return k;
}

/* The steps of one epoch, to put evaluation lines (which name the epochs done, from 1) at the
 * step where their epoch ended: the smallest count that keeps every step line in its epoch
 * (the line of step s, epoch e from 1, has (e - 1) * P < s <= e * P). Exact when an epoch's
 * last step is logged (always with --log-every 1, or when it divides the epoch); else short of
 * the true count by less than --log-every. 0 if no step line gives its epoch. */
static double steps_per_epoch(const struct metrics *m)
{
    double p = 0;
    for (int i = 0; i < m->n_steps; i++) {
        double s = m->steps[i].v[K_STEP], e = m->steps[i].v[K_EPOCH];
        if (e >= 1)
            p = fmax(p, ceil(s / e));
    }
    return p;
}

static void print_json(const struct plot_config *c, const struct metrics *m, double per_epoch,
                       const struct chart_panel *panels, const int *panel_ids, int n_panels)
{
    printf("{\"out\": ");
    cli_json_string(stdout, c->out);
    printf(", \"width\": %d, \"height\": %d, \"steps\": %d, \"evaluations\": %d, "
           "\"steps_per_epoch\": %.17g, \"repeated_lines\": %d, \"unfinished_lines\": %d, "
           "\"panels\": [", c->size.w, c->size.h, m->n_steps, m->n_evals, per_epoch,
           m->n_repeated, m->n_partial);
    for (int i = 0; i < n_panels; i++) {
        const struct chart_panel *p = &panels[i];
        printf("%s{\"title\": ", i ? ", " : "");
        cli_json_string(stdout, p->title);
        printf(", \"left\": %d, \"right\": %d, \"top\": %d, \"bottom\": %d, \"x_min\": %.17g, "
               "\"x_max\": %.17g, \"y_min\": %.17g, \"y_max\": %.17g, \"log_y\": %s, "
               "\"dropped\": %d, \"series\": [", p->left, p->right, p->top, p->bottom, p->x_min,
               p->x_max, p->y_min, p->y_max, p->log_y ? "true" : "false", p->n_dropped);
        int k = 0;
        for (int j = 0; j < N_CURVES; j++) {
            if (curves[j].panel != panel_ids[i])
                continue;
            for (int s = 0; s < p->n_series; s++)
                if (!strcmp(p->series[s].label, curves[j].label)) {
                    const struct chart_series *cs = &p->series[s];
                    printf("%s{\"key\": \"%s\", \"label\": ", k++ ? ", " : "",
                           key_names[curves[j].key]);
                    cli_json_string(stdout, cs->label);
                    printf(", \"rgb\": [%d, %d, %d], \"points\": %d}", cs->rgb[0], cs->rgb[1],
                           cs->rgb[2], cs->n);
                }
        }
        printf("]}");
    }
    printf("]}\n");
}

enum { PATH_CAP = 4096 };

/* The metrics file of run directory dir into mpath and the picture's path (--out, else
 * RUN_DIR/plot.png) into out, both PATH_CAP bytes. 0, or the exit status after saying why. */
static int resolve_paths(const struct plot_config *c, const char *dir, char *mpath, char *out)
{
    struct stat st;
    int missing = stat(dir, &st) != 0;
    if (missing || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tubelet plot: %s: %s (expected the run directory of tubelet train "
                "--out)\n", dir, missing ? strerror(errno) : "not a directory");
        return 1;
    }
    if (snprintf(mpath, PATH_CAP, "%s/metrics.jsonl", dir) >= PATH_CAP ||
        (c->out[0] ? snprintf(out, PATH_CAP, "%s", c->out)
                   : snprintf(out, PATH_CAP, "%s/plot.png", dir)) >= PATH_CAP) {
        fprintf(stderr, "tubelet plot: %s: path too long\n", dir);
        return 1;
    }
    size_t out_len = strlen(out);
    if (out_len < 5 || (strcmp(out + out_len - 4, ".png") && strcmp(out + out_len - 4, ".ppm"))) {
        fprintf(stderr, "tubelet plot: --out %s: expected a .png (or .ppm) file\n", out);
        return 2;
    }
    return 0;
}

/* The steps per epoch that place the evaluation lines, and the x axis's name in *x_label. */
static double eval_placement(const struct metrics *m, const char *mpath, const char **x_label)
{
    double per_epoch = steps_per_epoch(m);
    *x_label = "step";
    if (!m->n_steps) {
        *x_label = "epoch"; /* evaluations alone: against their epochs */
        per_epoch = 1;
    } else if (per_epoch == 0 && m->n_evals) {
        per_epoch = m->steps[m->n_steps - 1].v[K_STEP] / m->evals[m->n_evals - 1].v[K_EVAL_EPOCH];
        fprintf(stderr, "tubelet plot: warning: %s: no step line gives its epoch; evaluations "
                "are placed as if the last one ended at the last step\n", mpath);
    }
    return per_epoch;
}

/* The points of curve cv that have a value into x and y; returns how many, and raises *x_max to
 * the largest x. */
static int curve_points(const struct curve *cv, const struct metrics *m, double per_epoch,
                        double *x, double *y, double *x_max)
{
    const struct row *rows = cv->eval ? m->evals : m->steps;
    int n = cv->eval ? m->n_evals : m->n_steps, k = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(rows[i].v[cv->key]))
            continue;
        x[k] = cv->eval ? rows[i].v[K_EVAL_EPOCH] * per_epoch : rows[i].v[K_STEP];
        y[k] = rows[i].v[cv->key];
        *x_max = fmax(*x_max, x[k++]);
    }
    return k;
}

/* The panels that have a point, each over its curves in series, their points in xy (room for
 * every curve's points, x then y); their ids into panel_ids, the largest x into *x_max.
 * Returns how many panels. */
static int build_panels(const struct plot_config *c, const struct metrics *m, double per_epoch,
                        const char *x_label, double *xy, struct chart_series *series,
                        struct chart_panel *panels, int *panel_ids, double *x_max)
{
    size_t used = 0;
    int n_series = 0, n_panels = 0;
    *x_max = 0;
    for (int p = 0; p < N_PANELS; p++) {
        int first = n_series;
        for (int j = 0; j < N_CURVES; j++) {
            const struct curve *cv = &curves[j];
            if (cv->panel != p)
                continue;
            int n = cv->eval ? m->n_evals : m->n_steps;
            double *x = xy + used, *y = x + n;
            used += 2 * (size_t)n;
            int k = curve_points(cv, m, per_epoch, x, y, x_max);
            if (!k)
                continue;
            struct chart_series *s = &series[n_series++];
            *s = (struct chart_series){.label = cv->label, .x = x, .y = y, .n = k,
                                       .markers = cv->eval};
            memcpy(s->rgb, palette[(n_series - 1 - first) % 6], 3);
        }
        if (n_series == first)
            continue;
        panels[n_panels] = (struct chart_panel){
            .title = panel_titles[p], .x_label = x_label, .log_y = p == P_LOSS && c->log_loss,
            /* The title alone does not say which loss or which accuracy. */
            .legend = p == P_LOSS || p == P_ACC || p == P_RETRIEVAL,
            .series = series + first, .n_series = n_series - first};
        panel_ids[n_panels++] = p;
    }
    return n_panels;
}

/* The picture: a heading line naming the run, then the panels on a grid of one or two columns
 * sharing the x axis [0, x_max]. Returns it (malloc'ed, W x H RGB), or NULL after saying so. */
static uint8_t *draw_sheet(const struct plot_config *c, const struct metrics *m, const char *dir,
                           double per_epoch, struct chart_panel *panels, int n_panels,
                           double x_max)
{
    const int W = c->size.w, H = c->size.h;
    int s = W / 600 < H / 450 ? W / 600 : H / 450;
    s = s < 1 ? 1 : s;
    const int pad = 6 * s, head_h = SHEET_GLYPH_H * s + 2 * pad;
    const int cols = n_panels > 1 ? 2 : 1, n_grid_rows = (n_panels + cols - 1) / cols;
    const int pw = (W - pad * (cols + 1)) / cols;
    const int ph = (H - head_h - pad * n_grid_rows) / n_grid_rows;
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb) {
        fprintf(stderr, "tubelet plot: out of memory\n");
        return NULL;
    }
    memset(rgb, 255, (size_t)W * H * 3);
    char head[4400];
    static const uint8_t ink[3] = {30, 30, 30};
    if (m->n_steps)
        snprintf(head, sizeof(head), "%s: steps %.0f-%.0f, %d evaluations at their epoch's end "
                 "(%.0f steps/epoch)", dir, m->steps[0].v[K_STEP],
                 m->steps[m->n_steps - 1].v[K_STEP], m->n_evals, per_epoch);
    else
        snprintf(head, sizeof(head), "%s: %d evaluations, no step lines", dir, m->n_evals);
    sheet_text(rgb, W, H, pad, pad, head, s, ink);
    for (int i = 0; i < n_panels; i++) {
        panels[i].x_min = 0;
        panels[i].x_max = x_max > 0 ? x_max : 1;
        chart_draw(rgb, W, H, pad + (i % cols) * (pw + pad), head_h + (i / cols) * (ph + pad), pw,
                   ph, s, &panels[i]);
    }
    return rgb;
}

static int run_plot(void *config, int n_args, char **args)
{
    struct plot_config *c = config;
    struct metrics m = {0};
    struct chart_series series[N_CURVES];
    struct chart_panel panels[N_PANELS];
    int panel_ids[N_PANELS], n_panels = 0, status, rc;
    double *xy = NULL, x_max;
    uint8_t *rgb = NULL;
    char mpath[PATH_CAP], out[PATH_CAP];
    const char *dir = args[0], *x_label;
    (void)n_args;
    if ((status = resolve_paths(c, dir, mpath, out)) != 0)
        return status;
    status = 1;
    c->out = out;
    if (load_metrics(mpath, &m))
        goto end;
    m.n_steps = sort_unique(m.steps, m.n_steps, K_STEP, &m.n_repeated);
    m.n_evals = sort_unique(m.evals, m.n_evals, K_EVAL_EPOCH, &m.n_repeated);
    double per_epoch = eval_placement(&m, mpath, &x_label);

    /* Every curve's points, x then y, in one allocation. */
    size_t n_points = 0;
    for (int j = 0; j < N_CURVES; j++)
        n_points += (size_t)(curves[j].eval ? m.n_evals : m.n_steps);
    if (!(xy = malloc(sizeof(double) * 2 * n_points + 1))) {
        fprintf(stderr, "tubelet plot: out of memory\n");
        goto end;
    }
    n_panels = build_panels(c, &m, per_epoch, x_label, xy, series, panels, panel_ids, &x_max);
    if (!(rgb = draw_sheet(c, &m, dir, per_epoch, panels, n_panels, x_max)))
        goto end;
    if ((rc = tb_image_write(out, rgb, c->size.w, c->size.h, 1)) < 0) {
        cli_report("plot", rc);
        goto end;
    }
    if (c->json)
        print_json(c, &m, per_epoch, panels, panel_ids, n_panels);
    else
        printf("plot: %s: %d steps, %d evaluations, %d panels\n", out, m.n_steps, m.n_evals,
               n_panels);
    if (m.n_repeated)
        fprintf(stderr, "tubelet plot: note: %d lines gave a step or evaluation epoch again (a "
                "resumed run); the later ones are drawn\n", m.n_repeated);
    status = 0;
end:
    free(m.steps);
    free(m.evals);
    free(xy);
    free(rgb);
    return status;
}

const struct cli_command cli_cmd_plot = {
    .name = "plot",
    .args = "RUN_DIR",
    .summary = "draw a run's loss, evaluations, learning rate and clips/s as one PNG",
    .details = "Reads RUN_DIR/metrics.jsonl (tubelet train --out RUN_DIR) and draws one panel\n"
               "per kind of curve against the step: loss (training, and validation at each\n"
               "evaluation), accuracy or retrieval scores, learning rate, gradient norm and\n"
               "clips/s. An evaluation line names its epoch; it is drawn at the step where that\n"
               "epoch ended (epochs x steps per epoch, inferred from the step lines). A line\n"
               "that is not a JSON object is an error naming its file and line, except an\n"
               "unfinished last line, which is left out with a warning.",
    .flags = plot_flags,
    .n_flags = (int)(sizeof(plot_flags) / sizeof(plot_flags[0])),
    .config_size = sizeof(struct plot_config),
    .min_args = 1,
    .max_args = 1,
    .run = run_plot,
};

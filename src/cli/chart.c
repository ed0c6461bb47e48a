/* src/cli/chart.c - line charts for `tubelet plot`: a panel's title and legend, a frame with
 * grid lines at round ticks (1, 2 or 5 times a power of ten; whole decades on a log axis wider
 * than one) and their labels, and each series as a polyline (with markers if asked) in its own
 * exact colour, clipped to the plot area. It neither smooths nor thins the points.
 * Tests: tests/test_plot.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/chart.h"
#include "cli/sheet.h"

static const uint8_t ink[3] = {30, 30, 30}, frame_rgb[3] = {90, 90, 90},
                     grid_rgb[3] = {226, 226, 226}, muted[3] = {120, 120, 120};

enum { MAX_TICKS = 64 };

/* The tick spacing for about target ticks over range: 1, 2 or 5 times a power of ten, the one
 * nearest range / target, or with at_most the smallest not closer (so labels of a known width
 * cannot overlap). */
static double nice_step(double range, int target, int at_most)
{
    double raw = range / (target > 1 ? target : 1);
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    if (at_most)
        return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The multiples of step within [lo, hi]; returns how many (at most MAX_TICKS). */
static int ticks_in(double lo, double hi, double step, double *out)
{
    int n = 0;
    for (double k = ceil(lo / step - 1e-9); n < MAX_TICKS; k++) {
        double v = k * step;
        if (v > hi + step * 1e-9)
            break;
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    }
    return n;
}

/* "2.50e-05" -> "2.5e-5": no trailing zeros in the mantissa, no '+' or leading zeros in the
 * exponent. */
static void compact_exponent(char *s)
{
    char *e = strchr(s, 'e'), *m = e, *dot = strchr(s, '.');
    if (!e)
        return;
    int ev = atoi(e + 1);
    if (dot && dot < e) {
        while (m > dot + 1 && m[-1] == '0')
            m--;
        if (m == dot + 1)
            m = dot;
    }
    char tail[16];
    snprintf(tail, sizeof(tail), "e%d", ev);
    strcpy(m, tail); /* never longer than the "e-05" it replaces */
}

void chart_format_tick(char *buf, int size, double v, double step, double max_abs)
{
    if (v == 0) {
        snprintf(buf, (size_t)size, "0");
        return;
    }
    int e = (int)floor(log10(step) + 1e-9); /* step = (1, 2 or 5) x 10^e */
    if (max_abs >= 1e5 || max_abs < 1e-2) {
        int digits = (int)floor(log10(max_abs) + 1e-9) - e;
        digits = digits < 0 ? 0 : digits > 6 ? 6 : digits;
        snprintf(buf, (size_t)size, "%.*e", digits, v);
        compact_exponent(buf);
    } else {
        snprintf(buf, (size_t)size, "%.*f", e < 0 ? -e : 0, v);
    }
}

/* Ticks of the y axis [lo, hi] (log10 values when log_y) with their labels. */
static int y_ticks(const struct chart_panel *p, int target, double *pos, char (*label)[32])
{
    double t[MAX_TICKS], step;
    int n;
    if (p->log_y && p->y_max - p->y_min >= 1) {
        step = fmax(1, round(nice_step(p->y_max - p->y_min, target, 0)));
        n = ticks_in(p->y_min, p->y_max, step, t);
        for (int i = 0; i < n; i++) {
            double v = pow(10, t[i]);
            pos[i] = t[i];
            chart_format_tick(label[i], 32, v, v, v);
        }
        return n;
    }
    double lo = p->log_y ? pow(10, p->y_min) : p->y_min;
    double hi = p->log_y ? pow(10, p->y_max) : p->y_max;
    step = nice_step(hi - lo, target, 0);
    n = ticks_in(lo, hi, step, t);
    double max_abs = 0;
    for (int i = 0; i < n; i++)
        max_abs = fmax(max_abs, fabs(t[i]));
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (p->log_y && t[i] <= 0)
            continue;
        pos[k] = p->log_y ? log10(t[i]) : t[i];
        chart_format_tick(label[k++], 32, t[i], step, max_abs);
    }
    return k;
}

static int map_x(const struct chart_panel *p, double x)
{
    double f = (x - p->x_min) / (p->x_max - p->x_min);
    f = fmax(-4, fmin(5, f)); /* a point outside the axis stays near it (and is clipped) */
    return (int)lround(p->left + f * (p->right - p->left));
}

static int map_y(const struct chart_panel *p, double y)
{
    double f = (y - p->y_min) / (p->y_max - p->y_min);
    f = fmax(-4, fmin(5, f));
    return (int)lround(p->bottom - f * (p->bottom - p->top));
}

/* The y of point i of s on the panel's axis (log10 when log_y); NAN when it is left out. */
static double axis_y(const struct chart_panel *p, const struct chart_series *s, int i)
{
    double y = s->y[i];
    if (!isfinite(s->x[i]) || !isfinite(y) || (p->log_y && y <= 0))
        return NAN;
    return p->log_y ? log10(y) : y;
}

static void fill_clipped(uint8_t *rgb, int w, int h, const struct sheet_clip *c, int x, int y,
                         int rw, int rh, const uint8_t colour[3])
{
    int x0 = x > c->x0 ? x : c->x0, y0 = y > c->y0 ? y : c->y0;
    int x1 = x + rw < c->x1 ? x + rw : c->x1, y1 = y + rh < c->y1 ? y + rh : c->y1;
    if (x1 > x0 && y1 > y0)
        sheet_fill(rgb, w, h, x0, y0, x1 - x0, y1 - y0, colour);
}

/* The title, then the legend (where asked or there are several curves) to its right if it fits, else
 * on the lines below. Returns the y below the last line of text. */
static int draw_heading(uint8_t *rgb, int w, int h, int bx, int by, int bw, int s,
                        const struct chart_panel *p)
{
    const int gh = 7 * s, adv = 6 * s, pad = 4 * s;
    int x = bx + pad, y = by + pad, right = bx + bw - pad;
    x += sheet_text(rgb, w, h, x, y, p->title, s, ink);
    if (p->n_series < 2 && !p->legend)
        return y + gh;
    int lw = 0;
    for (int i = 0; i < p->n_series; i++)
        lw += gh + s * 3 + sheet_text_width(p->series[i].label, s) + 2 * adv;
    if (x + 2 * adv + lw <= right) {
        x = right - lw + 2 * adv;
    } else {
        x = bx + pad;
        y += gh + 3 * s;
    }
    for (int i = 0; i < p->n_series; i++) {
        int ew = gh + s * 3 + sheet_text_width(p->series[i].label, s);
        if (x + ew > right && x > bx + pad) {
            x = bx + pad;
            y += gh + 3 * s;
        }
        sheet_fill(rgb, w, h, x, y, gh, gh, p->series[i].rgb);
        sheet_text(rgb, w, h, x + gh + s * 3, y, p->series[i].label, s, ink);
        x += ew + 2 * adv;
    }
    return y + gh;
}

/* The y axis of p from its points (6% clear of the frame above and below) and the points left
 * out (p->n_dropped). Returns the points drawn. */
static int fit_y(struct chart_panel *p)
{
    double lo = INFINITY, hi = -INFINITY;
    int n_points = 0;
    p->n_dropped = 0;
    for (int k = 0; k < p->n_series; k++)
        for (int i = 0; i < p->series[k].n; i++) {
            double y = axis_y(p, &p->series[k], i);
            if (isnan(y)) {
                p->n_dropped++;
                continue;
            }
            lo = fmin(lo, y);
            hi = fmax(hi, y);
            n_points++;
        }
    if (!n_points) {
        lo = 0;
        hi = 1;
    }
    /* A margin of 6% above and below the curves, so their extremes clear the frame. */
    double margin = 0.06 * (hi - lo);
    if (!(hi - lo > 1e-12 * fmax(fabs(hi), fabs(lo))))
        margin = p->log_y ? 0.5 : fabs(hi) > 0 ? 0.1 * fabs(hi) : 1;
    p->y_min = lo - margin;
    p->y_max = hi + margin;
    return n_points;
}

/* The y grid lines at ypos[0..n_y), their ticks and labels left of the plot area. */
static void draw_y_grid(uint8_t *rgb, int w, int h, int s, const struct chart_panel *p,
                        int n_y, const double *ypos, char (*ylab)[32])
{
    const int gh = 7 * s, tick = 2 * s;
    for (int i = 0; i < n_y; i++) {
        int py = map_y(p, ypos[i]);
        sheet_fill(rgb, w, h, p->left, py, p->right - p->left + 1, 1, grid_rgb);
        sheet_fill(rgb, w, h, p->left - 1 - tick, py, tick, 1, frame_rgb);
        sheet_text(rgb, w, h, p->left - 1 - tick - s * 2 - sheet_text_width(ylab[i], s),
                   py - gh / 2, ylab[i], s, ink);
    }
}

/* The x grid lines at the multiples of xstep on the axis, their ticks and labels below it. */
static void draw_x_grid(uint8_t *rgb, int w, int h, int s, const struct chart_panel *p,
                        double xstep)
{
    const int tick = 2 * s;
    double xt[MAX_TICKS], x_abs = 0;
    char label[32];
    int n_x = ticks_in(p->x_min, p->x_max, xstep, xt);
    for (int i = 0; i < n_x; i++)
        x_abs = fmax(x_abs, fabs(xt[i]));
    for (int i = 0; i < n_x; i++) {
        int px = map_x(p, xt[i]);
        chart_format_tick(label, 32, xt[i], xstep, x_abs);
        sheet_fill(rgb, w, h, px, p->top, 1, p->bottom - p->top + 1, grid_rgb);
        sheet_fill(rgb, w, h, px, p->bottom + 2, 1, tick, frame_rgb);
        sheet_text(rgb, w, h, px - sheet_text_width(label, s) / 2, p->bottom + 2 + tick + s * 2,
                   label, s, ink);
    }
}

/* The frame around the plot area and the x axis's name below its labels. */
static void draw_frame(uint8_t *rgb, int w, int h, int s, const struct chart_panel *p)
{
    const int gh = 7 * s, tick = 2 * s;
    int fw = p->right - p->left + 3, fh = p->bottom - p->top + 3;
    sheet_fill(rgb, w, h, p->left - 1, p->top - 1, fw, 1, frame_rgb);
    sheet_fill(rgb, w, h, p->left - 1, p->bottom + 1, fw, 1, frame_rgb);
    sheet_fill(rgb, w, h, p->left - 1, p->top - 1, 1, fh, frame_rgb);
    sheet_fill(rgb, w, h, p->right + 1, p->top - 1, 1, fh, frame_rgb);
    if (p->x_label)
        sheet_text(rgb, w, h, (p->left + p->right - sheet_text_width(p->x_label, s)) / 2,
                   p->bottom + 2 + tick + 3 * s + gh, p->x_label, s, muted);
}

/* Each series as a polyline clipped to the plot area, with its markers where asked. */
static void draw_curves(uint8_t *rgb, int w, int h, int s, const struct chart_panel *p)
{
    const int pen = (s / 2) * 2 + 1, mark = 2 * s + 3;
    const struct sheet_clip clip = {p->left, p->top, p->right + 1, p->bottom + 1};
    /* The first series last, on top: it is the panel's main curve (the training loss). */
    for (int k = p->n_series - 1; k >= 0; k--) {
        const struct chart_series *c = &p->series[k];
        int have = 0, px0 = 0, py0 = 0;
        for (int i = 0; i < c->n; i++) {
            double y = axis_y(p, c, i);
            if (isnan(y))
                continue;
            int px = map_x(p, c->x[i]), py = map_y(p, y);
            if (have)
                sheet_line(rgb, w, h, &clip, px0, py0, px, py, pen, c->rgb);
            else
                sheet_line(rgb, w, h, &clip, px, py, px, py, pen, c->rgb);
            if (c->markers)
                fill_clipped(rgb, w, h, &clip, px - mark / 2, py - mark / 2, mark, mark, c->rgb);
            have = 1;
            px0 = px;
            py0 = py;
        }
    }
}

void chart_draw(uint8_t *rgb, int w, int h, int bx, int by, int bw, int bh, int s,
                struct chart_panel *p)
{
    const int gh = 7 * s, adv = 6 * s, pad = 4 * s, tick = 2 * s;
    int n_points = fit_y(p);
    p->top = draw_heading(rgb, w, h, bx, by, bw, s, p) + 2 * pad;
    p->bottom = by + bh - pad - gh - 2 * s - gh - tick - 2 * s - 1;
    double ypos[MAX_TICKS];
    char ylab[MAX_TICKS][32];
    int target = (p->bottom - p->top) / (3 * gh);
    /* Labels take at least six characters' room, so panels above one another line up. */
    int n_y = y_ticks(p, target < 2 ? 2 : target > 8 ? 8 : target, ypos, ylab), label_w = 6 * adv;
    for (int i = 0; i < n_y; i++)
        if (sheet_text_width(ylab[i], s) > label_w)
            label_w = sheet_text_width(ylab[i], s);
    /* The label of x_max sizes the room between x ticks and the margin right of the plot. */
    double xstep = nice_step(p->x_max - p->x_min, 6, 1);
    char last[32];
    chart_format_tick(last, 32, p->x_max, xstep, fabs(p->x_max));
    int xlabel_w = sheet_text_width(last, s);
    p->left = bx + pad + label_w + 2 * s + tick + 1;
    p->right = bx + bw - pad - xlabel_w / 2 - 1;
    if (p->right - p->left < 8 || p->bottom - p->top < 8)
        return; /* no room for a plot: the title alone */
    target = (p->right - p->left) / (xlabel_w + 3 * adv);
    xstep = nice_step(p->x_max - p->x_min, target < 2 ? 2 : target, 1);

    /* Grid and ticks first, the frame around them, the curves last. */
    draw_y_grid(rgb, w, h, s, p, n_y, ypos, ylab);
    draw_x_grid(rgb, w, h, s, p, xstep);
    draw_frame(rgb, w, h, s, p);
    if (!n_points) {
        static const char none[] = "no data";
        sheet_text(rgb, w, h, (p->left + p->right - sheet_text_width(none, s)) / 2,
                   (p->top + p->bottom - gh) / 2, none, s, muted);
        return;
    }
    draw_curves(rgb, w, h, s, p);
}

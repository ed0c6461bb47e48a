/* src/cli/chart.h - line charts drawn into an RGB buffer (chart.c): one panel with a title, a
 * legend, a frame, grid lines, ticks with labels, and curves of (x, y) points. Used by
 * `tubelet plot`. */
#ifndef TUBELET_CLI_CHART_H
#define TUBELET_CLI_CHART_H

#include <stdint.h>

struct chart_series {
    const char *label;
    const double *x, *y; /* n points; a non-finite y (or one <= 0 on a log axis) is left out */
    int n;
    uint8_t rgb[3];      /* the curve's own colour: no other pixel of the plot area has it */
    int markers;         /* 1: a square at each point as well (for a few evaluations) */
};

struct chart_panel {
    /* Set by the caller. */
    const char *title;
    const char *x_label;
    double x_min, x_max; /* the x axis (panels of one figure share it) */
    int log_y;           /* 1: y on a log10 axis */
    int legend;          /* 1: name the curves beside the title (always where there are two) */
    const struct chart_series *series; /* drawn last to first: the first is on top */
    int n_series;
    /* Set by chart_draw: the plot area (pixels left..right, top..bottom, all included) and
     * the y axis (log10 of the values when log_y). A point (x, y) lies at pixel
     * left + (x - x_min) / (x_max - x_min) * (right - left),
     * bottom - (y - y_min) / (y_max - y_min) * (bottom - top), rounded to nearest. */
    int left, right, top, bottom;
    double y_min, y_max;
    int n_dropped;       /* points left out: not finite, or <= 0 on a log axis */
};

/* Draw panel p into the w x h RGB image rgb, within the box of bw x bh pixels at (bx, by);
 * text is drawn at scale (1: the 5x7 font as is). */
void chart_draw(uint8_t *rgb, int w, int h, int bx, int by, int bw, int bh, int scale,
                struct chart_panel *p);

/* A tick value as a short label: "0", "250", "0.05", "2e-4". step is the tick spacing and
 * max_abs the largest tick's magnitude (they set the digits shown). */
void chart_format_tick(char *buf, int size, double v, double step, double max_abs);

#endif /* TUBELET_CLI_CHART_H */

/* src/cli/sheet.h - the CLI's pixel drawing (sheet.c): text in a built-in font, copies,
 * rectangles and lines, for `peek`'s contact sheets and `plot`'s charts. */
#ifndef TUBELET_CLI_SHEET_H
#define TUBELET_CLI_SHEET_H

#include <stdint.h>

#define SHEET_GLYPH_H 7 /* pixels of a glyph at scale 1; advance is 6 */

/* Draw text into an RGB image (w x h) at (x, y), clipped; returns the width drawn. */
int sheet_text(uint8_t *rgb, int w, int h, int x, int y, const char *text, int scale,
               const uint8_t colour[3]);
/* Width in pixels that sheet_text would draw text at scale (unclipped). */
int sheet_text_width(const char *text, int scale);
/* Copy a w x h RGB image into dst (dst_w wide) at (x, y). */
void sheet_blit(uint8_t *dst, int dst_w, int x, int y, const uint8_t *src, int w, int h);

/* A clip rectangle: pixels x0 <= x < x1, y0 <= y < y1 (also kept within the image). */
struct sheet_clip {
    int x0, y0, x1, y1;
};
/* Fill the rectangle of rw x rh pixels at (x, y) of an RGB image (w x h), clipped to it. */
void sheet_fill(uint8_t *rgb, int w, int h, int x, int y, int rw, int rh, const uint8_t colour[3]);
/* A straight line from (x0, y0) to (x1, y1), both ends included, drawn with a square pen of
 * thick x thick pixels (no anti-aliasing: every pixel is exactly colour), clipped to clip. */
void sheet_line(uint8_t *rgb, int w, int h, const struct sheet_clip *clip, int x0, int y0, int x1,
                int y1, int thick, const uint8_t colour[3]);

#endif /* TUBELET_CLI_SHEET_H */

/* src/cli/sheet.h - drawing for contact sheets (sheet.c). */
#ifndef TUBELET_CLI_SHEET_H
#define TUBELET_CLI_SHEET_H

#include <stdint.h>

#define SHEET_GLYPH_H 7 /* pixels of a glyph at scale 1; advance is 6 */

/* Draw text into an RGB image (w x h) at (x, y), clipped; returns the width drawn. */
int sheet_text(uint8_t *rgb, int w, int h, int x, int y, const char *text, int scale,
               const uint8_t colour[3]);
/* Copy a w x h RGB image into dst (dst_w wide) at (x, y). */
void sheet_blit(uint8_t *dst, int dst_w, int x, int y, const uint8_t *src, int w, int h);

#endif /* TUBELET_CLI_SHEET_H */

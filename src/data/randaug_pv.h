/* src/data/randaug_pv.h - pytorchvideo's RandAugment (randaug_pv.c) for randaug.c, which
 * parses, draws and applies both families, and for tests/test_augment.c, which compares its
 * float frames with torchvision's. */
#ifndef TB_DATA_RANDAUG_PV_H
#define TB_DATA_RANDAUG_PV_H

#include "tubelet/data.h"
#include "tubelet/rng.h"

#define TBI_PV_N_OPS (TB_RA_N_OPS - TB_RA_PV_BRIGHTNESS)

static inline int tbi_randaug_is_pv(enum tb_ra_op op)
{
    return op >= TB_RA_PV_BRIGHTNESS && op < TB_RA_N_OPS;
}

/* pytorchvideo's name of op ("AdjustBrightness", ..., "TranslateY"). */
const char *tbi_randaug_pv_name(enum tb_ra_op op);
/* Its level function: the argument of op at magnitude, negated when negate and the op has a
 * sign; 0 for the ops that take none. */
double tbi_randaug_pv_level_arg(enum tb_ra_op op, double magnitude, int negate);
/* Its draws for one clip from r (o: family TB_RA_PYTORCHVIDEO, checked). */
void tbi_randaug_pv_draw(const struct tb_randaug_opts *o, tb_rng *r, struct tb_ra_plan *plan);

/* The ops steps[0..n) with their arguments, in order, on one frame of floats (H, W, 3) in
 * place; scratch holds a frame of floats. */
void tbi_randaug_pv_frame(float *px, int width, int height, const struct tb_ra_step *steps, int n,
                          float *scratch);
/* Each frame of clip (T, H, W, 3) as floats v / 255, through steps[0..n), back to the nearest
 * level. 0 or TB_ENOMEM. */
int tbi_randaug_pv_clip(uint8_t *clip, int n_frames, int width, int height,
                        const struct tb_ra_step *steps, int n);

#endif

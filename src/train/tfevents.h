/* src/train/tfevents.h - forwards to src/metrics/tfevents.h, where the TensorBoard event files
 * now live, until the training loop's include names that (loop.c is being reworked on
 * another branch); nothing else includes this one. */
#include "metrics/tfevents.h"

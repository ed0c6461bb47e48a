/* src/train/settings.h - the settings a user chooses by flag, one row each: `tubelet train`
 * and `tubelet step` take the flag (--help, --config, --print-config and the range or choice
 * check come from the row), the options get the value, the checkpoint records it (written only
 * where it is not its default, which is its zero value: the first choice, 0) and reads it
 * back, `tubelet eval` and `--init` follow, and Python's tubelet.checkpoint_settings shows it.
 * Adding a setting is one row here and its field (the row's path in struct tb_ckpt_info and
 * struct tb_train_opts, which share model, mae, clip, max_margin and margin). The older flags
 * with values of their own (auto, 0 for derived, another default per command) are still the
 * commands' own rows (src/cli/cmd_train.c, cmd_step.c) and settings.c's.
 *
 * X(kind, key, flag, field, meta, default, help, lo, hi): kind INT, DOUBLE or NAME (an enum,
 * meta its choices "a|b|c", stored as its index; else meta names the value in --help, "N");
 * lo > hi for no range. */
#ifndef TUBELET_TRAIN_SETTINGS_H
#define TUBELET_TRAIN_SETTINGS_H

#define TBI_SETTING_FLAGS(X)                                                                       \
    X(NAME, "attention", "attention", model.attention, "global", "global",                         \
      "the blocks' attention: global (every token attends to every token of its clip)", 1, 0)

#include "tubelet/train.h"

/* The settings chosen by flag from a command's (or a checkpoint's) into the run's options. */
static inline void tbi_settings_take(struct tb_train_opts *to, const struct tb_ckpt_info *from)
{
#define TBI_TAKE(kind, key, flag, field, ...) to->field = from->field;
    TBI_SETTING_FLAGS(TBI_TAKE)
#undef TBI_TAKE
}

#endif /* TUBELET_TRAIN_SETTINGS_H */

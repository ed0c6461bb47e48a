/* src/cli/cli.h - what the subcommand files share: the command descriptors, the Ctrl-C flag,
 * and small output helpers. Only src/cli prints or exits. */
#ifndef TUBELET_CLI_CLI_H
#define TUBELET_CLI_CLI_H

#include <stdio.h>

#include "cli/flags.h"

extern const struct cli_command cli_cmd_synth;
extern const struct cli_command cli_cmd_prep;
extern const struct cli_command cli_cmd_probe;
extern const struct cli_command cli_cmd_frames;
extern const struct cli_command cli_cmd_bench_load;
extern const struct cli_command cli_cmd_peek;
extern const struct cli_command cli_cmd_step;
extern const struct cli_command cli_cmd_train;
extern const struct cli_command cli_cmd_eval;
extern const struct cli_command cli_cmd_tokenize;
extern const struct cli_command cli_cmd_ann;
extern const struct cli_command cli_cmd_plot;

/* A row of src/train/settings.h's table as a flag of a command whose config keeps those
 * settings in a member `set` (struct tb_ckpt_info): TBI_SETTING_FLAGS(X) with X calling
 * CLI_SETTING(config type, ...the row). The run takes them with tbi_settings_take. */
#define CLI_OF_INT CLI_INT
#define CLI_OF_DOUBLE CLI_DOUBLE
#define CLI_OF_NAME CLI_CHOICE
#define CLI_SETTING(cfg, kind, key, flag, field, meta, def, help, lo, hi)                         \
    {flag, CLI_OF_##kind, offsetof(cfg, set.field), def, meta, help, lo, hi}

/* mkdir -p for the CLI; 0 or -1 (message printed). */
int tbi_cli_mkdir(const char *dir);

/* "epic", "kinetics" or "narration" to the annotation format; -1 if unknown. */
#include "tubelet/data.h"
int cli_ann_format(const char *name, enum tb_ann_format *out);

/* Annotation files for the commands that make clips (src/cli/rows.c). cli_ann_load: the
 * file with its bad rows skipped and counted. cli_ann_check, once any action numbering is
 * done (it counts every parsed row, as AVION's): with a root, also drops the rows whose
 * video is missing or unreadable, or whose window lies outside it (tb_ann_drop_unreadable);
 * then the skipped rows are reported on stderr (how many, the first few as file:line:
 * cause; CLI_ROWS_REPORT), or refuse the file (CLI_ROWS_REFUSE: an evaluation scores every
 * row or says why not). quiet: no report of skipped rows (the other processes under
 * mpirun). 0, or -1: a failure is said by every process, its rank named (cli_report). */
enum cli_rows { CLI_ROWS_REPORT, CLI_ROWS_REFUSE };
int cli_ann_load(struct tb_annotations **out, const char *cmd, const char *path,
                 enum tb_ann_format format);
int cli_ann_check(struct tb_annotations *a, const char *cmd, const char *root, const char *ext,
                  enum cli_rows policy, int quiet);

/* --precision: "fp32" or "bf16" to the model's dtype; -1 if neither. One help text for the
 * commands that take it. */
#include "tubelet/tensor.h"
int cli_precision(const char *name, enum tb_dtype *out);
#define CLI_PRECISION_HELP                                                                     \
    "auto (bf16 on cuda, else fp32), fp32, or bf16: the products' operands and outputs "      \
    "rounded to bf16 and the saved "                                                          \
    "activations stored as bf16; f32 arithmetic, residual stream, master weights, optimizer " \
    "state, norms and losses (docs/"                                                          \
    "PRECISION.md)"

/* --device, --backend and --precision to the backend's name and the dtype: --backend, where
 * given, names the backend (cpu, cuda, or a test backend: cpu-guarded, cuda-emu); else
 * --device cpu or cuda, or auto: cuda where a GPU is found, else cpu. --precision auto is bf16
 * on a CUDA device, fp32 elsewhere. 0, or 2 (the exit status) after a message. */
int cli_device(const char *cmd, const char *device, const char *backend, const char *precision,
               const char **backend_out, enum tb_dtype *dtype);
/* The line that names the device cli_device chose and why, on stderr, once, by the lead
 * process: said where the device is first used (a model opens), not by a command that stops
 * before. */
void cli_device_say(void);
#define CLI_DEVICE_HELP "cpu, cuda, or auto: cuda where a GPU and its driver are found, else cpu"
#define CLI_BACKEND_HELP                                                                       \
    "the backend itself, over --device: cpu, cuda, or a test backend: cpu-guarded (memory "   \
    "unreadable outside its ops), cuda-emu (the CUDA kernels on an emulated device: slow)"

/* Set to 1 by the first Ctrl-C (SIGINT) or SIGTERM; long commands poll it and stop cleanly. */
extern volatile int cli_cancel;

/* Print "tubelet <cmd>: <what>: <tb_errmsg or tb_strerror>" for a failed library call. */
void cli_report(const char *cmd, int status);

/* Write s as a JSON string literal. */
void cli_json_string(FILE *f, const char *s);

/* A file's text made in memory, then written atomically (a full disk leaves no partial
 * file under the name): cli_mem_open gives m->f (0, or -1 out of memory, printed);
 * cli_mem_save closes it and writes path (0, or -1 with "tubelet CMD: ..." printed); either
 * way m is freed. */
struct cli_mem {
    FILE *f;
    char *buf;
    size_t len;
};
int cli_mem_open(struct cli_mem *m, const char *cmd);
int cli_mem_save(struct cli_mem *m, const char *cmd, const char *path);
/* The text written, NUL-terminated, in m->buf (the caller frees it); -1 (said on stderr) on
 * failure, m->buf then NULL. */
int cli_mem_close(struct cli_mem *m, const char *cmd);

/* Seconds since an arbitrary start, monotonic. */
double cli_now(void);

/* Number of online processors (at least 1). */
int cli_n_cpus(void);

#endif /* TUBELET_CLI_CLI_H */

/* src/cli/flags.h - one table per subcommand describes its flags: name, type, where the value
 * goes, default, range and help. Parsing, --help, --config files and --print-config all read
 * that table, so they cannot drift apart. Tests: tests/test_cli.c. */
#ifndef TUBELET_CLI_FLAGS_H
#define TUBELET_CLI_FLAGS_H

#include <stddef.h>
#include <stdio.h>

enum cli_flag_type {
    CLI_INT,    /* int */
    CLI_DOUBLE, /* double */
    CLI_STR,    /* char * (owned by the parser's arena) */
    CLI_SIZE,   /* struct cli_size, "WxH" */
    CLI_RATE,   /* struct cli_rate, "30" or "30000/1001" */
    CLI_BOOL,   /* int 0/1; "--x" alone means 1 */
    CLI_CHOICE, /* int: the index of its value among the metavar's "a|b|c" */
};

struct cli_size {
    int w, h;
};

struct cli_rate {
    int num, den;
};

struct cli_flag {
    const char *name;       /* without "--"; also the key in --config files */
    enum cli_flag_type type;
    size_t offset;          /* of the value in the command's config struct */
    const char *def;        /* default, as text; NULL: no default (empty string for CLI_STR) */
    const char *metavar;    /* e.g. "N", "DIR"; of a CLI_STR, "a|b|c" lists the only values
                               it takes (and "" where that is its default) */
    const char *help;
    double min, max;        /* allowed range of CLI_INT/CLI_DOUBLE, and of each number of
                               CLI_SIZE/CLI_RATE; ignored when min > max */
};

/* The trailing arguments are the range: lo, hi, or CLI_NO_RANGE. */
#define CLI_FLAG(name, type, cfg, field, def, metavar, help, ...)                              \
    { name, type, offsetof(cfg, field), def, metavar, help, __VA_ARGS__ }
#define CLI_NO_RANGE 1, 0

struct cli_command {
    const char *name;
    const char *args;       /* positional arguments for the usage line, e.g. "SRC..." */
    const char *summary;    /* one line */
    const char *details;    /* paragraph printed by help, may be NULL */
    const struct cli_flag *flags;
    int n_flags;
    size_t config_size;
    int min_args, max_args; /* positional argument count; max < 0 means unbounded */
    /* The command's rules between settings, after parsing and before --print-config or run:
     * settings a choice fixes or leaves unread (cli_flag_fix, cli_flag_unread), settings that
     * give the same thing twice. 0, or -1 after printing why (exit 2). May be NULL. */
    int (*resolve)(void *config);
    int (*run)(void *config, int n_args, char **args);
};

/* Where a value came from. A later source overrides an earlier one: the command line wins
 * over --config's file, which wins over the default. */
enum cli_from {
    CLI_FROM_DEFAULT,
    CLI_FROM_FILE,
    CLI_FROM_ARGS,
};

/* Parse argv (after the subcommand name) into config: defaults, then --config FILE, then the
 * command line, then cmd->resolve. A flag given twice in the file with two values is refused,
 * both lines named; given twice on the command line (also by its old spelling), the later
 * wins and a note on stderr says so. Positional arguments
 * are collected into *args (pointers into argv).
 * Returns 0 to run, 1 when --help or --print-config was handled (exit 0), or -1 after
 * printing a usage error to stderr (exit 2). */
int cli_parse(const struct cli_command *cmd, int argc, char **argv, void *config, int *n_args,
              char ***args);

void cli_print_help(FILE *f, const struct cli_command *cmd);
/* The resolved configuration as "key = value" lines, which --config reads back; a value that
 * is not the default says where it came from in a comment ("# the command line",
 * "# FILE:LINE", or the choice that fixed it), and the settings the run does not read follow
 * as comment lines under each reason. */
void cli_print_config(FILE *f, const struct cli_command *cmd, const void *config);

/* Of the last cli_parse of cmd: where flag name's value came from, and into *where (when not
 * NULL) "the command line", "FILE:LINE" or "the default", for messages. */
enum cli_from cli_flag_from(const struct cli_command *cmd, const char *name, const char **where);

/* For resolve: "--name VALUE (WHERE)" of flag name into out, as messages name a setting. */
void cli_flag_said(const struct cli_command *cmd, const void *config, const char *name,
                   char *out, size_t size);

/* For resolve: flag name is not read by this run (why: the reason, a phrase). Given with a
 * value other than its default, that is refused: -1 after printing which and why. */
int cli_flag_unread(const struct cli_command *cmd, const void *config, const char *name,
                    const char *why);

/* For resolve: flag name, given, loses to another flag that sets the same thing from a later
 * source (why: which wins); --print-config shows it as not read. */
void cli_flag_overridden(const struct cli_command *cmd, const char *name, const char *why);

/* 1 when flag name is read by this run (not marked by cli_flag_unread). */
int cli_flag_read(const struct cli_command *cmd, const char *name);

/* For resolve: a choice fixes flag name to value (why: the choice and its reason). Given
 * with another value, that is refused: -1 after printing which and why; else the value is
 * set, and --print-config says why. */
int cli_flag_fix(const struct cli_command *cmd, void *config, const char *name,
                 const char *value, const char *why);

/* The flags whose value in config file path (as --config reads it: aliases, comments)
 * differs from config's, but those named in skip (n_skip): "name old -> new" items joined by
 * "; " into out (size bytes; "" when none; items that do not fit are left out). Keys path has
 * and cmd lacks, and values it cannot read, are not compared. 0, or -1 when path cannot be
 * read (said). */
int cli_config_diff(const struct cli_command *cmd, const void *config, const char *path,
                    const char *const *skip, int n_skip, char *out, size_t size);

/* Free strings the parser allocated. */
void cli_parse_free(void);

#endif /* TUBELET_CLI_FLAGS_H */

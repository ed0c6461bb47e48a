/* tests/fuzz/fuzz_flags.c - the CLI's flag parser and --config files (src/cli/flags.c) with
 * every subcommand's real table. The input: byte 0 picks the command (main.c's list), then
 * command-line words, one per line, up to a NUL byte; what follows the NUL is a config file,
 * and a word "@" names it. The parser returns 0, 1 (help, --print-config) or -1 (a usage
 * error it printed: run.sh silences the output). What it accepts must survive
 * --print-config: the printed text read back as a --config file gives the same settings
 * (their notes say where each came from, so they differ), for string values that a config
 * line can hold (no '#', no surrounding blanks: a note and trimming would take them).
 * Seeds: --print-config of every command, recipes' lines. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/* The command table, from the program itself; its main is not this program's. */
#define main tbi_cli_main
#include "cli/main.c"
#undef main

#define MAX_WORDS 256

/* A config line "key = value" gives a string value back only when it has no '#' (a note or
 * comment would start there), no blanks at either end (trimmed), no line break, and fits the
 * line buffer. */
static int round_trips(const struct cli_command *cmd, const void *config)
{
    for (int i = 0; i < cmd->n_flags; i++) {
        if (cmd->flags[i].type != CLI_STR)
            continue;
        const char *v = *(char *const *)((const char *)config + cmd->flags[i].offset);
        size_t n = v ? strlen(v) : 0;
        if (n > 3900 || (v && strpbrk(v, "#\r\n")) ||
            (n && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t')))
            return 0;
    }
    return 1;
}

/* The settings alone, in place: each line's note ('#' on) and the blanks before it dropped,
 * comment lines (the header, settings this run does not read) dropped. */
static char *settings(char *text)
{
    char *dst = text;
    for (char *line = text; *line;) {
        char *eol = strchr(line, '\n'), *end = eol ? eol : line + strlen(line);
        char *stop = memchr(line, '#', (size_t)(end - line));
        stop = stop ? stop : end;
        while (stop > line && stop[-1] == ' ')
            stop--;
        if (stop > line) {
            memmove(dst, line, (size_t)(stop - line));
            dst += stop - line;
            *dst++ = '\n';
        }
        line = eol ? eol + 1 : end;
    }
    *dst = '\0';
    return text;
}

static char *print_config(const struct cli_command *cmd, const void *config)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        tbf_fail("open_memstream");
    cli_print_config(f, cmd, config);
    if (fclose(f) != 0)
        tbf_fail("cli_print_config: cannot write");
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const struct cli_command *cmd = commands[data[0] % N_COMMANDS];
    char *buf = malloc(size), *words[MAX_WORDS + 4];
    if (!buf)
        tbf_fail("out of memory");
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    const char *path = NULL;
    size_t n_text = strlen(buf);
    if (n_text + 1 < size)
        path = tbf_put(0, buf + n_text + 1, size - 1 - n_text - 1);
    int argc = 0;
    for (char *w = buf, *nl; w && argc < MAX_WORDS; w = nl ? nl + 1 : NULL) {
        if ((nl = strchr(w, '\n')))
            *nl = '\0';
        if (!*w && !nl)
            break;
        words[argc++] = path && !strcmp(w, "@") ? (char *)path : w;
    }
    words[argc] = NULL;

    void *config = calloc(1, cmd->config_size), *again = calloc(1, cmd->config_size);
    char **args = NULL, *first = NULL;
    int n_args = -1;
    if (!config || !again)
        tbf_fail("out of memory");
    int rc = cli_parse(cmd, argc, words, config, &n_args, &args);
    if (rc < -1 || rc > 1)
        tbf_fail("cli_parse returned %d", rc);
    tbf_count(rc, "cli_parse");
    if (rc == 0) {
        if (n_args < cmd->min_args || (cmd->max_args >= 0 && n_args > cmd->max_args) ||
            args[n_args] != NULL)
            tbf_fail("%s: %d arguments accepted (%d to %d)", cmd->name, n_args, cmd->min_args,
                     cmd->max_args);
        first = print_config(cmd, config);
    }
    if (first && round_trips(cmd, config)) {
        /* Read it back as the only settings, the same arguments after "--". */
        char *reparse[MAX_WORDS + 4];
        int k = 0;
        reparse[k++] = "--config";
        reparse[k++] = (char *)tbf_put(1, first, strlen(first));
        reparse[k++] = "--";
        for (int i = 0; i < n_args; i++)
            reparse[k++] = args[i];
        reparse[k] = NULL;
        cli_parse_free();
        char **args2 = NULL;
        int n2 = 0;
        if (cli_parse(cmd, k, reparse, again, &n2, &args2) != 0)
            tbf_fail("%s: its --print-config does not parse:\n%s", cmd->name, first);
        tbf_count(0, "--print-config read back");
        char *second = print_config(cmd, again);
        if (strcmp(settings(first), settings(second)))
            tbf_fail("%s: --print-config read back prints differently:\n--- first\n%s--- "
                     "second\n%s", cmd->name, first, second);
        free(second);
    }
    cli_parse_free();
    free(first);
    free(config);
    free(again);
    free(buf);
    return 0;
}

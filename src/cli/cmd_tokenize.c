/* src/cli/cmd_tokenize.c - `tubelet tokenize [--context N] TEXT...`: the CLIP token ids of each
 * caption (AVION's tokenizer, tubelet/text.h), one line of N ids per caption; "-" reads
 * captions from standard input, one a line. Tests: tests/test_tokenizer.c. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tubelet/text.h"

struct tokenize_config {
    int context;
    char *merges;
    int lengths;
};

static const struct cli_flag tokenize_flags[] = {
    CLI_FLAG("context", CLI_INT, struct tokenize_config, context, "77", "N",
             "ids per caption: start, tokens, end, zero padding; longer captions are cut "
             "keeping the end token last",
             2, 1 << 20),
    CLI_FLAG("merges", CLI_STR, struct tokenize_config, merges, NULL, "FILE",
             "a bpe_simple_vocab_16e6.txt[.gz] to use instead of the built-in copy", CLI_NO_RANGE),
    CLI_FLAG("lengths", CLI_BOOL, struct tokenize_config, lengths, "false", "",
             "start each line with the caption's length before the cut (start and end "
             "included) and a tab",
             CLI_NO_RANGE),
};

/* Print one caption's ids; 0, or 1 after reporting where it failed. */
static int print_caption(tb_tokenizer *t, const struct tokenize_config *c, int32_t *ids,
                         const char *text, const char *where, long line)
{
    int n_tokens;
    int rc = tb_tokenize(t, text, ids, c->context, &n_tokens);
    if (rc < 0) {
        if (line > 0)
            fprintf(stderr, "tubelet tokenize: %s line %ld: %s\n", where, line, tb_errmsg());
        else
            fprintf(stderr, "tubelet tokenize: %s: %s\n", where, tb_errmsg());
        return 1;
    }
    if (c->lengths)
        printf("%d\t", n_tokens);
    for (int i = 0; i < c->context; i++)
        printf("%s%d", i ? " " : "", (int)ids[i]);
    putchar('\n');
    return 0;
}

static int tokenize_stdin(tb_tokenizer *t, const struct tokenize_config *c, int32_t *ids)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long line_no = 0;
    int status = 0;
    while (status == 0 && !cli_cancel && (n = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        if (strlen(line) != (size_t)n) {
            fprintf(stderr, "tubelet tokenize: standard input line %ld: has a NUL byte\n", line_no);
            status = 1;
            break;
        }
        status = print_caption(t, c, ids, line, "standard input", line_no);
    }
    if (status == 0 && ferror(stdin)) {
        fprintf(stderr, "tubelet tokenize: cannot read standard input\n");
        status = 1;
    }
    free(line);
    return status;
}

static int run_tokenize(void *config, int n_args, char **args)
{
    struct tokenize_config *c = config;
    tb_tokenizer *t = NULL;
    int rc = tb_tokenizer_open(&t, c->merges[0] ? c->merges : NULL);
    if (rc < 0) {
        cli_report("tokenize", rc);
        return 1;
    }
    int32_t *ids = malloc(sizeof(*ids) * (size_t)c->context);
    int status = ids ? 0 : 1;
    if (!ids)
        fprintf(stderr, "tubelet tokenize: out of memory\n");
    for (int i = 0; i < n_args && status == 0; i++) {
        char where[32];
        snprintf(where, sizeof(where), "argument %d", i + 1);
        status = strcmp(args[i], "-") ? print_caption(t, c, ids, args[i], where, 0)
                                      : tokenize_stdin(t, c, ids);
    }
    if (fflush(stdout) != 0 && status == 0) {
        fprintf(stderr, "tubelet tokenize: cannot write the ids\n");
        status = 1;
    }
    free(ids);
    tb_tokenizer_close(&t);
    return status;
}

const struct cli_command cli_cmd_tokenize = {
    .name = "tokenize",
    .args = "TEXT...",
    .summary = "print the CLIP token ids of captions (AVION's tokenizer)",
    .details = "One line per caption: --context ids separated by spaces, the start token\n"
               "49406 first and the end token 49407 after the caption's tokens, then zeros.\n"
               "TEXT '-' reads captions from standard input, one a line; put a caption that\n"
               "starts with '-' after '--'. Cleaning is AVION's without ftfy.fix_text\n"
               "(docs/TEXT.md).",
    .flags = tokenize_flags,
    .n_flags = (int)(sizeof(tokenize_flags) / sizeof(tokenize_flags[0])),
    .config_size = sizeof(struct tokenize_config),
    .min_args = 1,
    .max_args = -1,
    .run = run_tokenize,
};

/* src/cli/flags.c - table-driven flag parsing (see flags.h). Numbers are parsed whole with
 * strtol/strtod and range-checked; an unknown flag, a missing value or trailing junk is a
 * usage error that names the flag (or the config file and line); old spellings of flags
 * parse through one alias table. Tests: tests/test_cli.c, tests/test_configs.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"
#include "core/choices.h"

/* Strings from config files and defaults live until the program exits; keep them to free. */
static char **owned;
static size_t n_owned, cap_owned;
static char **args_owned;

static char *own(const char *s, size_t len)
{
    if (n_owned == cap_owned) {
        size_t cap = cap_owned ? 2 * cap_owned : 16;
        char **grown = realloc(owned, sizeof(*grown) * cap);
        if (!grown)
            return NULL;
        owned = grown;
        cap_owned = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    owned[n_owned++] = copy;
    return copy;
}

/* Where each flag of the last parsed command got its value, and what resolve said of it. */
struct flag_state {
    enum cli_from from;
    int line;        /* CLI_FROM_FILE: the line in st_file */
    int unread;      /* cli_flag_unread: not read by this run */
    const char *why; /* cli_flag_unread's or cli_flag_fix's reason (owned) */
};
static const struct cli_command *st_cmd;
static struct flag_state *st;
static const char *st_file; /* --config's path */

void cli_parse_free(void)
{
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(args_owned);
    free(st);
    owned = NULL;
    args_owned = NULL;
    n_owned = cap_owned = 0;
    st = NULL;
    st_cmd = NULL;
    st_file = NULL;
}

static int in_range(const struct cli_flag *f, double v)
{
    return f->min > f->max || (v >= f->min && v <= f->max);
}

static int parse_int(const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno)
        return -1;
    *out = v;
    return 0;
}

/* A CLI_STR flag whose metavar lists its values ("cls|mae|clip") takes one of them, or ""
 * where that is its default. */
static int is_choice(const struct cli_flag *f, const char *val)
{
    return !strchr(f->metavar, '|') || (!val[0] && f->def && !f->def[0]) ||
           tbi_choice_index(f->metavar, val) >= 0;
}

/* "A<sep>B" as two whole numbers: 0, or -1 when there is no sep or a side is not a number. */
static int split_pair(const char *val, char sep, long long *a, long long *b)
{
    const char *at = strchr(val, sep);
    char num[32];
    if (!at || (size_t)(at - val) >= sizeof(num))
        return -1;
    memcpy(num, val, (size_t)(at - val));
    num[at - val] = '\0';
    return parse_int(num, a) || parse_int(at + 1, b) ? -1 : 0;
}

/* A CLI_STR flag's value: one of its choices, kept until cli_parse_free. 0, or -1 (said). */
static int set_string(const struct cli_flag *f, char **dst, const char *val, const char *where)
{
    if (!is_choice(f, val)) {
        fprintf(stderr, "tubelet: %s--%s: '%s' is none of %s\n", where, f->name, val,
                f->metavar);
        return -1;
    }
    char *copy = own(val, strlen(val));
    if (!copy) {
        fprintf(stderr, "tubelet: out of memory\n");
        return -1;
    }
    *dst = copy;
    return 0;
}

/* Set one flag from text. where says where the text came from, for the message. */
static int set_value(const struct cli_flag *f, void *config, const char *val, const char *where)
{
    char *dst = (char *)config + f->offset;
    long long a, b;
    char *end;
    switch (f->type) {
    case CLI_INT:
        if (parse_int(val, &a) || a < INT32_MIN || a > INT32_MAX)
            goto bad;
        if (!in_range(f, (double)a))
            goto range;
        *(int *)dst = (int)a;
        return 0;
    case CLI_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v))
            goto bad;
        if (!in_range(f, v))
            goto range;
        *(double *)dst = v;
        return 0;
    }
    case CLI_STR:
        return set_string(f, (char **)dst, val, where);
    case CLI_CHOICE:
        if ((a = tbi_choice_index(f->metavar, val)) < 0) {
            fprintf(stderr, "tubelet: %s--%s: '%s' is none of %s\n", where, f->name, val,
                    f->metavar);
            return -1;
        }
        *(int *)dst = (int)a;
        return 0;
    case CLI_SIZE:
        if (split_pair(val, 'x', &a, &b) || a > INT32_MAX || b > INT32_MAX)
            goto bad;
        if (!in_range(f, (double)a) || !in_range(f, (double)b))
            goto range;
        ((struct cli_size *)dst)->w = (int)a;
        ((struct cli_size *)dst)->h = (int)b;
        return 0;
    case CLI_RATE:
        b = 1;
        if (strchr(val, '/') ? split_pair(val, '/', &a, &b) : parse_int(val, &a))
            goto bad;
        if (a <= 0 || b <= 0 || a > INT32_MAX || b > INT32_MAX)
            goto bad;
        if (!in_range(f, (double)a / (double)b))
            goto range;
        ((struct cli_rate *)dst)->num = (int)a;
        ((struct cli_rate *)dst)->den = (int)b;
        return 0;
    case CLI_BOOL:
        if (!strcmp(val, "1") || !strcmp(val, "true") || !strcmp(val, "yes"))
            *(int *)dst = 1;
        else if (!strcmp(val, "0") || !strcmp(val, "false") || !strcmp(val, "no"))
            *(int *)dst = 0;
        else
            goto bad;
        return 0;
    }
bad:
    fprintf(stderr, "tubelet: %s--%s: malformed value '%s' (expected %s)\n", where, f->name, val,
            f->type == CLI_INT      ? "a whole number"
            : f->type == CLI_DOUBLE ? "a number"
            : f->type == CLI_SIZE   ? "WxH, e.g. 320x240"
            : f->type == CLI_RATE   ? "a rate such as 30 or 30000/1001"
                                    : "true or false");
    return -1;
range:
    fprintf(stderr, "tubelet: %s--%s: %s is out of range [%g, %g]\n", where, f->name, val,
            f->min, f->max);
    return -1;
}

/* Old spellings, still accepted from the command line and config files alike, and shown by
 * help: one vocabulary across commands (docs/FORMATS.md, "Flags") - the prepared videos are
 * --data, a square clip's side is --size. */
static const struct {
    const char *cmd, *old, *now;
} aliases[] = {
    {"peek", "root", "data"},
    {"bench-load", "root", "data"},
    {"ann", "root", "data"},
    {"train", "input-size", "size"},
    {"train", "crop", "crop-mode"},
    {"step", "batch", "batch-file"},
};
#define N_ALIASES (int)(sizeof(aliases) / sizeof(aliases[0]))

static const struct cli_flag *find_named(const struct cli_command *cmd, const char *name,
                                         size_t len)
{
    for (int i = 0; i < cmd->n_flags; i++)
        if (strlen(cmd->flags[i].name) == len && !strncmp(cmd->flags[i].name, name, len))
            return &cmd->flags[i];
    return NULL;
}

static const struct cli_flag *find_flag(const struct cli_command *cmd, const char *name,
                                        size_t len)
{
    const struct cli_flag *f = find_named(cmd, name, len);
    for (int i = 0; !f && i < N_ALIASES; i++)
        if (!strcmp(aliases[i].cmd, cmd->name) && strlen(aliases[i].old) == len &&
            !strncmp(aliases[i].old, name, len))
            f = find_named(cmd, aliases[i].now, strlen(aliases[i].now));
    return f;
}

/* The old spelling of flag f of cmd, or NULL. */
static const char *alias_of(const struct cli_command *cmd, const struct cli_flag *f)
{
    for (int i = 0; i < N_ALIASES; i++)
        if (!strcmp(aliases[i].cmd, cmd->name) && !strcmp(aliases[i].now, f->name))
            return aliases[i].old;
    return NULL;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* Each "key = value" line of path ('#' starts a comment) to fn(ctx, key, val, where, line),
 * where "path:line: " for messages, until fn returns -1. 0, or -1 (said): a line without '=',
 * one too long, a file that cannot be read, or fn's failure. */
static int config_lines(const char *path, int (*fn)(void *ctx, const char *key,
                                                    const char *val, const char *where,
                                                    int line),
                        void *ctx)
{
    FILE *f = fopen(path, "r");
    char line[8192], where[4200];
    int line_no = 0, rc = 0;
    if (!f) {
        fprintf(stderr, "tubelet: --config %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        line_no++;
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "tubelet: %s:%d: line too long\n", path, line_no);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            fprintf(stderr, "tubelet: %s:%d: expected 'key = value', got '%s'\n", path, line_no,
                    s);
            rc = -1;
            break;
        }
        *eq = '\0';
        snprintf(where, sizeof(where), "%s:%d: ", path, line_no);
        rc = fn(ctx, trim(s), trim(eq + 1), where, line_no);
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "tubelet: %s: read error\n", path);
        rc = -1;
    }
    fclose(f);
    return rc;
}

struct apply {
    const struct cli_command *cmd;
    void *config;
};

static void format_value(char *buf, size_t size, const struct cli_flag *f, const void *config);

/* Flag f set to val from (line: the file's line). A second, other value of one flag in the
 * file contradicts the first: refused, both named. On the command line the later one wins
 * (a script's base command, then an override), and that is said. */
static int set_from(const struct cli_command *cmd, const struct cli_flag *f, void *config,
                    const char *val, const char *where, enum cli_from from, int line)
{
    struct flag_state *s = &st[f - cmd->flags];
    char was[4200], now[4200];
    format_value(was, sizeof(was), f, config);
    int again = s->from == from;
    if (set_value(f, config, val, where) < 0)
        return -1;
    format_value(now, sizeof(now), f, config);
    if (again && strcmp(was, now) && from == CLI_FROM_FILE) {
        fprintf(stderr, "tubelet: %s%s is given twice: %s at line %d, %s here\n", where, f->name,
                was, s->line, now);
        return -1;
    }
    if (again && strcmp(was, now)) /* a script's base command, then an override: said */
        fprintf(stderr, "tubelet %s: note: --%s %s replaces --%s %s given before it on the "
                "command line\n", cmd->name, f->name, now, f->name, was);
    s->from = from;
    s->line = line;
    return 0;
}

static int apply_line(void *ctx, const char *key, const char *val, const char *where, int line)
{
    const struct apply *a = ctx;
    const struct cli_flag *fl = find_flag(a->cmd, key, strlen(key));
    if (!fl || !strcmp(key, "config")) {
        fprintf(stderr, "tubelet: %sunknown key '%s' for 'tubelet %s'\n", where, key,
                a->cmd->name);
        return -1;
    }
    return set_from(a->cmd, fl, a->config, val, where, CLI_FROM_FILE, line);
}

static int load_config(const struct cli_command *cmd, void *config, const char *path)
{
    struct apply a = {cmd, config};
    st_file = path;
    return config_lines(path, apply_line, &a);
}

struct diff {
    const struct cli_command *cmd;
    const void *config;
    void *scratch;             /* the file's values, one at a time */
    const char *const *skip;
    int n_skip;
    char *out;
    size_t size;
};

static int diff_line(void *ctx, const char *key, const char *val, const char *where, int line)
{
    (void)line;
    struct diff *d = ctx;
    const struct cli_flag *fl = find_flag(d->cmd, key, strlen(key));
    for (int i = 0; fl && i < d->n_skip; i++)
        if (!strcmp(fl->name, d->skip[i]))
            fl = NULL;
    char was[4200], now[4200], item[600];
    if (!fl || set_value(fl, d->scratch, val, where) < 0)
        return 0; /* a key this version lacks, or a value it cannot read: not compared */
    format_value(was, sizeof(was), fl, d->scratch);
    format_value(now, sizeof(now), fl, d->config);
    size_t used = strlen(d->out), n;
    if (!strcmp(was, now))
        return 0;
    snprintf(item, sizeof(item), "%s%.40s %.250s -> %.250s", used ? "; " : "", fl->name, was, now);
    if (used + (n = strlen(item)) < d->size)
        memcpy(d->out + used, item, n + 1);
    return 0;
}

int cli_config_diff(const struct cli_command *cmd, const void *config, const char *path,
                    const char *const *skip, int n_skip, char *out, size_t size)
{
    struct diff d = {cmd, config, calloc(1, cmd->config_size), skip, n_skip, out, size};
    out[0] = '\0';
    int rc = d.scratch ? config_lines(path, diff_line, &d) : -1;
    free(d.scratch);
    return rc;
}

static int is_flag(const char *a)
{
    return a[0] == '-' && a[1] == '-' && a[2];
}

/* Every flag's default, and "" for a string flag without one. 0, or -1 (said). */
static int set_defaults(const struct cli_command *cmd, void *config)
{
    for (int i = 0; i < cmd->n_flags; i++) {
        const struct cli_flag *f = &cmd->flags[i];
        if (f->def && set_value(f, config, f->def, "default of ") < 0)
            return -1;
        if (!f->def && f->type == CLI_STR)
            *(char **)((char *)config + f->offset) = own("", 0);
    }
    return 0;
}

/* The first pass: --help, --print-config and --config, so the file applies before any
 * command-line flag whatever the order. 0, or -1 (said). */
static int scan_early(const struct cli_command *cmd, int argc, char **argv, int *help,
                      int *print_config, const char **config_path)
{
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            break;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            *help = 1;
        else if (!strcmp(argv[i], "--print-config"))
            *print_config = 1;
        else if (!strcmp(argv[i], "--config") || !strncmp(argv[i], "--config=", 9)) {
            if (argv[i][8] == '=')
                *config_path = argv[i] + 9;
            else if (i + 1 < argc)
                *config_path = argv[++i];
            else {
                fprintf(stderr, "tubelet %s: --config needs a file\n", cmd->name);
                return -1;
            }
        }
    }
    return 0;
}

/* The value of flag f given at argv[*i]: "false" when negated, the text after eq (its '=', or
 * NULL), or the next word where the flag takes one (*i moves onto it). NULL (said) when the
 * value is missing. */
static const char *flag_value(const struct cli_command *cmd, const struct cli_flag *f,
                              int negated, const char *eq, int argc, char **argv, int *i)
{
    if (negated)
        return "false";
    if (eq)
        return eq + 1;
    if (f->type == CLI_BOOL) {
        /* "--flag" alone is true; "--flag false" reads the next word when it is one. */
        static const char *const words[] = {"true", "false", "yes", "no", "1", "0"};
        for (int w = 0; *i + 1 < argc && w < 6; w++)
            if (!strcmp(argv[*i + 1], words[w]))
                return argv[++*i];
        return "true";
    }
    if (*i + 1 < argc)
        return argv[++*i];
    fprintf(stderr, "tubelet %s: --%s needs a value (%s)\n", cmd->name, f->name, f->metavar);
    return NULL;
}

/* The flag word argv[*i] into config (--print-config and --config, read by the first pass,
 * are passed over); *i moves past a value it takes. 0, or -1 (said). */
static int parse_flag(const struct cli_command *cmd, void *config, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--print-config"))
        return 0;
    if (!strcmp(a, "--config") || !strncmp(a, "--config=", 9)) {
        if (a[8] != '=')
            ++*i;
        return 0;
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    const struct cli_flag *f = find_flag(cmd, name, len);
    int negated = 0; /* --no-FLAG: a boolean FLAG false */
    if (!f && !eq && len > 3 && !strncmp(name, "no-", 3)) {
        f = find_flag(cmd, name + 3, len - 3);
        negated = f && f->type == CLI_BOOL;
        f = negated ? f : NULL;
    }
    if (!f) {
        fprintf(stderr, "tubelet %s: unknown flag '--%.*s' (see 'tubelet help %s')\n",
                cmd->name, (int)len, name, cmd->name);
        return -1;
    }
    const char *val = flag_value(cmd, f, negated, eq, argc, argv, i);
    if (!val || set_from(cmd, f, config, val, "", CLI_FROM_ARGS, 0) < 0)
        return -1;
    return 0;
}

/* The second pass over the words: flags into config, the arguments into pos (*n_pos of them).
 * 0, or -1 (said). */
static int parse_words(const struct cli_command *cmd, void *config, int argc, char **argv,
                       char **pos, int *n_pos)
{
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (!only_pos && !strcmp(a, "--")) { /* the rest are arguments, even "-x" */
            only_pos = 1;
            continue;
        }
        if (only_pos || !is_flag(a)) {
            if (!only_pos && a[0] == '-' && a[1] && strcmp(a, "-")) {
                fprintf(stderr, "tubelet %s: unknown option '%s' (flags are --long-names; see "
                        "'tubelet help %s')\n", cmd->name, a, cmd->name);
                return -1;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        if (parse_flag(cmd, config, argc, argv, &i) < 0)
            return -1;
    }
    return 0;
}

int cli_parse(const struct cli_command *cmd, int argc, char **argv, void *config, int *n_args,
              char ***args)
{
    const char *config_path = NULL;
    int help = 0, print_config = 0;
    char **pos = NULL;
    int n_pos = 0;

    memset(config, 0, cmd->config_size);
    free(st);
    st_cmd = cmd;
    st_file = NULL;
    if (!(st = calloc((size_t)cmd->n_flags + 1, sizeof(*st)))) {
        fprintf(stderr, "tubelet: out of memory\n");
        return -1;
    }
    if (set_defaults(cmd, config) < 0 ||
        scan_early(cmd, argc, argv, &help, &print_config, &config_path) < 0)
        return -1;
    if (help) {
        cli_print_help(stdout, cmd);
        return 1;
    }
    if (config_path && load_config(cmd, config, config_path) < 0)
        return -1;

    pos = malloc(sizeof(*pos) * (size_t)(argc + 1));
    if (!pos) {
        fprintf(stderr, "tubelet: out of memory\n");
        return -1;
    }
    if (parse_words(cmd, config, argc, argv, pos, &n_pos) < 0 ||
        (cmd->resolve && cmd->resolve(config) < 0))
        goto fail;
    if (print_config) {
        cli_print_config(stdout, cmd, config);
        free(pos);
        return 1;
    }
    if (n_pos < cmd->min_args || (cmd->max_args >= 0 && n_pos > cmd->max_args)) {
        fprintf(stderr, "tubelet %s: expected %s; see 'tubelet help %s'\n", cmd->name,
                cmd->args && cmd->args[0] ? cmd->args : "no arguments", cmd->name);
        goto fail;
    }
    pos[n_pos] = NULL;
    *n_args = n_pos;
    *args = pos;
    /* The argument list lives until cli_parse_free. */
    free(args_owned);
    args_owned = pos;
    return 0;
fail:
    free(pos);
    return -1;
}

static void format_value(char *buf, size_t size, const struct cli_flag *f, const void *config)
{
    const char *src = (const char *)config + f->offset;
    switch (f->type) {
    case CLI_INT:
    case CLI_BOOL:
        if (f->type == CLI_BOOL)
            snprintf(buf, size, "%s", *(const int *)src ? "true" : "false");
        else
            snprintf(buf, size, "%d", *(const int *)src);
        break;
    case CLI_DOUBLE: /* the shortest text that reads back to the same number */
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, size, "%.*g", digits, *(const double *)src);
            if (strtod(buf, NULL) == *(const double *)src)
                break;
        }
        break;
    case CLI_STR:
        snprintf(buf, size, "%s", *(char *const *)src ? *(char *const *)src : "");
        break;
    case CLI_CHOICE: {
        size_t len;
        const char *p = tbi_choice_at(f->metavar, *(const int *)src, &len);
        snprintf(buf, size, "%.*s", p ? (int)len : 0, p ? p : "");
        break;
    }
    case CLI_SIZE:
        snprintf(buf, size, "%dx%d", ((const struct cli_size *)src)->w,
                 ((const struct cli_size *)src)->h);
        break;
    case CLI_RATE: {
        const struct cli_rate *r = (const struct cli_rate *)src;
        if (r->den == 1)
            snprintf(buf, size, "%d", r->num);
        else
            snprintf(buf, size, "%d/%d", r->num, r->den);
        break;
    }
    }
}

/* The last parse's state of cmd's flag name, or NULL. */
static struct flag_state *state_of(const struct cli_command *cmd, const char *name,
                                   const struct cli_flag **flag)
{
    const struct cli_flag *f = cmd == st_cmd ? find_named(cmd, name, strlen(name)) : NULL;
    if (flag)
        *flag = f;
    return f ? &st[f - cmd->flags] : NULL;
}

static const char *where_of(const struct flag_state *s, char *buf, size_t size)
{
    if (s && s->from == CLI_FROM_FILE)
        snprintf(buf, size, "%s:%d", st_file, s->line);
    else
        snprintf(buf, size, "%s", s && s->from == CLI_FROM_ARGS ? "the command line"
                                                                 : "the default");
    return buf;
}

enum cli_from cli_flag_from(const struct cli_command *cmd, const char *name, const char **where)
{
    static char buf[4200];
    const struct flag_state *s = state_of(cmd, name, NULL);
    if (where)
        *where = where_of(s, buf, sizeof(buf));
    return s ? s->from : CLI_FROM_DEFAULT;
}

void cli_flag_said(const struct cli_command *cmd, const void *config, const char *name,
                   char *out, size_t size)
{
    const struct cli_flag *f;
    const struct flag_state *s = state_of(cmd, name, &f);
    char val[4200], where[4200];
    if (!f) {
        snprintf(out, size, "--%s", name);
        return;
    }
    format_value(val, sizeof(val), f, config);
    snprintf(out, size, "--%s %s (%s)", name, val, where_of(s, where, sizeof(where)));
}

/* 1 when flag f holds another value than text would give it. */
static int differs(const struct cli_flag *f, const void *config, const char *text)
{
    char *scratch = calloc(1, st_cmd->config_size);
    char a[4200], b[4200];
    if (!scratch)
        return 1;
    format_value(a, sizeof(a), f, config);
    int bad = set_value(f, scratch, text, "") < 0;
    format_value(b, sizeof(b), f, scratch);
    free(scratch);
    return bad || strcmp(a, b);
}

int cli_flag_unread(const struct cli_command *cmd, const void *config, const char *name,
                    const char *why)
{
    const struct cli_flag *f;
    struct flag_state *s = state_of(cmd, name, &f);
    if (!s)
        return 0;
    if (s->from != CLI_FROM_DEFAULT && differs(f, config, f->def ? f->def : "")) {
        char said[8500];
        cli_flag_said(cmd, config, name, said, sizeof(said));
        fprintf(stderr, "tubelet %s: %s would be ignored: %s; leave it out\n", cmd->name, said,
                why);
        return -1;
    }
    s->unread = 1;
    s->why = own(why, strlen(why));
    return 0;
}

void cli_flag_overridden(const struct cli_command *cmd, const char *name, const char *why)
{
    struct flag_state *s = state_of(cmd, name, NULL);
    if (s) {
        s->unread = 1;
        s->why = own(why, strlen(why));
    }
}

int cli_flag_read(const struct cli_command *cmd, const char *name)
{
    const struct flag_state *s = state_of(cmd, name, NULL);
    return !s || !s->unread;
}

int cli_flag_fix(const struct cli_command *cmd, void *config, const char *name,
                 const char *value, const char *why)
{
    const struct cli_flag *f;
    struct flag_state *s = state_of(cmd, name, &f);
    if (!s)
        return 0;
    if (s->from != CLI_FROM_DEFAULT && differs(f, config, value)) {
        char said[8500];
        cli_flag_said(cmd, config, name, said, sizeof(said));
        fprintf(stderr, "tubelet %s: %s, but %s (--%s %s); leave --%s out\n", cmd->name, said,
                why, name, value, name);
        return -1;
    }
    s->why = own(why, strlen(why));
    return s->why && set_value(f, config, value, "") == 0 ? 0 : -1;
}

void cli_print_config(FILE *f, const struct cli_command *cmd, const void *config)
{
    char val[4200], line[8500], where[4200];
    const struct flag_state *s = cmd == st_cmd ? st : NULL;
    fprintf(f, "# tubelet %s (a value without a note is the default)\n", cmd->name);
    for (int i = 0; i < cmd->n_flags; i++) {
        if (s && s[i].unread)
            continue;
        format_value(val, sizeof(val), &cmd->flags[i], config);
        snprintf(line, sizeof(line), "%s = %s", cmd->flags[i].name, val);
        if (s && (s[i].why || s[i].from != CLI_FROM_DEFAULT))
            fprintf(f, "%-31s # %s\n", line, s[i].why ? s[i].why : where_of(&s[i], where,
                                                                            sizeof(where)));
        else
            fprintf(f, "%s\n", line);
    }
    /* the settings this run does not read, as comments, under each reason once */
    for (int i = 0; s && i < cmd->n_flags; i++) {
        int first = s[i].unread;
        for (int j = 0; first && j < i; j++)
            first = !(s[j].unread && !strcmp(s[j].why, s[i].why));
        if (!first)
            continue;
        fprintf(f, "# not read: %s\n", s[i].why);
        for (int j = i; j < cmd->n_flags; j++)
            if (s[j].unread && !strcmp(s[j].why, s[i].why)) {
                format_value(val, sizeof(val), &cmd->flags[j], config);
                fprintf(f, "#   %s = %s\n", cmd->flags[j].name, val);
            }
    }
}

void cli_print_help(FILE *f, const struct cli_command *cmd)
{
    fprintf(f, "usage: tubelet %s [FLAGS]%s%s\n\n%s\n", cmd->name, cmd->args ? " " : "",
            cmd->args ? cmd->args : "", cmd->summary);
    if (cmd->details)
        fprintf(f, "\n%s\n", cmd->details);
    fprintf(f, "\nflags:\n");
    for (int i = 0; i < cmd->n_flags; i++) {
        const struct cli_flag *fl = &cmd->flags[i];
        char left[64];
        snprintf(left, sizeof(left), "--%s %s", fl->name, fl->type == CLI_BOOL ? "" : fl->metavar);
        fprintf(f, "  %-26s %s", left, fl->help);
        if (fl->def && fl->def[0])
            fprintf(f, " (default: %s)", fl->def);
        if (alias_of(cmd, fl))
            fprintf(f, " (also --%s)", alias_of(cmd, fl));
        fprintf(f, "\n");
    }
    fprintf(f, "  %-26s %s\n", "--config FILE", "read 'flag = value' lines (command line wins)");
    fprintf(f, "  %-26s %s\n", "--print-config", "print the resolved flags as a config file");
    fprintf(f, "  %-26s %s\n", "--help", "this text");
}

/* src/cli/main.c - the `tubelet` program: picks the subcommand, installs the log sink and the
 * Ctrl-C handler, and turns library status codes into messages and exit codes
 * (0 success, 1 failure, 2 usage error). Tests: tests/test_cli.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tubelet/dist.h"
#include "tubelet/base.h"

#define TUBELET_VERSION "0.1.0"

/* TB_CLI_STEP_ONLY: the GPU bundle's program (bench/gpu-bundle.sh), `tubelet step` alone, so
 * the video libraries (FFmpeg) need not travel with it. */
static const struct cli_command *const commands[] = {
#ifdef TB_CLI_STEP_ONLY
    &cli_cmd_step,
#else
    &cli_cmd_synth,
    &cli_cmd_prep,
    &cli_cmd_probe,
    &cli_cmd_frames,
    &cli_cmd_bench_load,
    &cli_cmd_ann,
    &cli_cmd_peek,
    &cli_cmd_step,
    &cli_cmd_train,
    &cli_cmd_eval,
    &cli_cmd_plot,
    &cli_cmd_tokenize,
#endif
};
#define N_COMMANDS ((int)(sizeof(commands) / sizeof(commands[0])))

volatile int cli_cancel;

static void on_signal(int sig)
{
    if (cli_cancel) {
        /* A second Ctrl-C means now. */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cli_cancel = 1;
    static const char msg[] = "\ntubelet: stopping after the current step (Ctrl-C again to "
                              "quit at once)\n";
    ssize_t unused = write(2, msg, sizeof(msg) - 1);
    (void)unused;
}

/* TUBELET_LOG=debug also shows FFmpeg's own messages. */
static enum tb_log_level log_level = TB_LOG_INFO;

static void log_to_stderr(enum tb_log_level level, const char *msg, void *user)
{
    (void)user;
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level <= log_level)
        fprintf(stderr, "tubelet: %s: %s\n", names[level], msg);
}

void cli_report(const char *cmd, int status)
{
    const char *msg = tb_errmsg();
    char rank[32] = ""; /* data parallelism: which process (a failure may be one's alone) */
    if (tb_dist_world() > 1 && strncmp(msg, "rank ", 5)) /* not when the message names it */
        snprintf(rank, sizeof(rank), "rank %d: ", tb_dist_rank());
    fprintf(stderr, "tubelet %s: %s%s\n", cmd, rank, msg[0] ? msg : tb_strerror(status));
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int tbi_cli_mkdir(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0777);
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "tubelet: %s: cannot create: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_mem_open(struct cli_mem *m, const char *cmd)
{
    m->buf = NULL;
    m->len = 0;
    if (!(m->f = open_memstream(&m->buf, &m->len))) {
        fprintf(stderr, "tubelet %s: out of memory\n", cmd);
        return -1;
    }
    return 0;
}

int cli_mem_close(struct cli_mem *m, const char *cmd)
{
    int failed = ferror(m->f) != 0;
    failed |= fclose(m->f) != 0;
    m->f = NULL;
    if (failed) {
        free(m->buf);
        m->buf = NULL;
        fprintf(stderr, "tubelet %s: out of memory\n", cmd);
        return -1;
    }
    return 0;
}

int cli_mem_save(struct cli_mem *m, const char *cmd, const char *path)
{
    if (cli_mem_close(m, cmd) < 0)
        return -1;
    int rc = tb_file_write_atomic(path, m->buf, m->len);
    free(m->buf);
    m->buf = NULL;
    if (rc < 0) {
        fprintf(stderr, "tubelet %s: %s\n", cmd, tb_errmsg());
        return -1;
    }
    return 0;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_n_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tubelet COMMAND [FLAGS] [ARGS]\n\n"
               "tubelet trains video models on one machine: it prepares videos (prep), checks\n"
               "annotations and clips (ann, peek), trains an action classifier, VideoMAE or a\n"
               "video-text CLIP model (train --task cls, mae or clip) and evaluates them (eval).\n"
               "\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-10s %s\n", "help", "help for a command: tubelet help COMMAND");
    fprintf(f, "\n'tubelet COMMAND --help' lists a command's flags with their defaults.\n");
}

static const struct cli_command *find_command(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i]->name, name))
            return commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        if (argc > 2 && strcmp(name, "help") == 0 && strcmp(argv[2], "help")) {
            const struct cli_command *cmd = find_command(argv[2]);
            if (!cmd) {
                fprintf(stderr, "tubelet: no command '%s'\n\n", argv[2]);
                usage(stderr);
                return 2;
            }
            cli_print_help(stdout, cmd);
            return 0;
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(name, "--version")) {
        printf("tubelet %s\n", TUBELET_VERSION);
        return 0;
    }
#if defined(__x86_64__) && defined(TB_BUILT_FOR_V3)
    /* The library is compiled for x86-64-v3 (AVX2, FMA): say so rather than die of an
     * illegal instruction on an older processor. */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("x86-64-v3")) {
        fprintf(stderr, "tubelet: this build needs an x86-64-v3 processor (AVX2, FMA); this one "
                "lacks it: rebuild with CMAKE_ARGS=-DTB_ARCH= (the compiler's default)\n");
        return 1;
    }
#endif
    const struct cli_command *cmd = find_command(name);
    if (!cmd) {
        fprintf(stderr, "tubelet: no command '%s'\n\n", name);
        usage(stderr);
        return 2;
    }

    void *config = calloc(1, cmd->config_size);
    int n_args = 0, status;
    char **args = NULL;
    if (!config) {
        fprintf(stderr, "tubelet: out of memory\n");
        return 1;
    }
    int rc = cli_parse(cmd, argc - 2, argv + 2, config, &n_args, &args);
    if (rc != 0) {
        status = rc > 0 ? 0 : 2;
    } else {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        const char *lv = getenv("TUBELET_LOG");
        if (lv && !strcmp(lv, "debug"))
            log_level = TB_LOG_DEBUG;
        tb_set_log(log_to_stderr, NULL);
        /* A command shares a busy machine: its CPU ops' team follows the free cores (the
         * library leaves a caller's threads alone unless told). */
        tb_backend_set_share(1);
        status = cmd->run(config, n_args, args);
    }
    cli_parse_free();
    free(config);
    return status;
}

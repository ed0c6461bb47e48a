/* tests/test_cli.c - the tubelet program's flags and usage errors: unknown flags, malformed
 * and out-of-range numbers, missing values, --config files (with line numbers in errors),
 * --print-config round trips, help that lists every flag with its default, and exit codes
 * (0 ok, 1 failure, 2 usage). */
#define _GNU_SOURCE
#include <ctype.h>

#include "tb_test.h"

static void test_usage_errors(void)
{
    const char *t = tbt_tubelet();
    char *out = NULL;
    int rc;

    tbt_case = "no command";
    rc = tbt_run(&out, 10, "%s", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "usage: tubelet COMMAND");
    free(out);

    /* The first screen names every task train has (from train --help's --task line), and
     * no longer calls the tool a data-preparation kit. */
    tbt_case = "top-level help";
    char *train_help = NULL;
    /* Run under the loader's log: help maps no CUDA library (the runtime is linked in
     * statically, cuBLASLt is opened only with a CUDA backend). */
    rc = tbt_run(&out, 10, "LD_DEBUG=files LD_DEBUG_OUTPUT=%s %s help", tbt_path("ld-help"), t);
    CHECK_EQ(rc, 0);
    char cuda_libs[512];
    CHECK_MSG(tbt_cuda_libs_mapped(tbt_path("ld-help"), cuda_libs, sizeof(cuda_libs)) > 0 &&
              !cuda_libs[0], "tubelet help mapped CUDA libraries: %s", cuda_libs);
    CHECK_MSG(out && !strstr(out, "prepare and inspect video data"), "%s", out);
    CHECK_STR_HAS(out, "(prep)");
    CHECK_STR_HAS(out, "(eval)");
    char *list = out ? strstr(out, "\ncommands:") : NULL;
    if (list)
        *list = '\0'; /* the intro alone, not the commands' summaries */
    rc = tbt_run(&train_help, 10, "%s train --help", t);
    const char *task = train_help ? strstr(train_help, "--task cls|mae|clip") : NULL;
    CHECK(rc == 0 && task != NULL);
    int n_tasks = 0;
    for (const char *p = task; p && *p && *p != '\n'; p++) {
        /* each task is named as a word followed by " (": "cls (supervised ...)" */
        if (p[0] == ' ' && p[1] == '(' && p > task) {
            const char *w = p;
            while (w > task && w[-1] >= 'a' && w[-1] <= 'z')
                w--;
            char name[32];
            snprintf(name, sizeof(name), "%.*s", (int)(p - w), w);
            if (p - w >= 2 && p - w < 16) {
                int found = 0; /* as a word */
                for (const char *h = out; h && (h = strstr(h, name)); h++)
                    found |= (h == out || !isalpha((unsigned char)h[-1])) &&
                             !isalpha((unsigned char)h[strlen(name)]);
                CHECK_MSG(found, "the top-level help's intro misses task '%s': %s", name, out);
                n_tasks++;
            }
        }
    }
    CHECK_MSG(n_tasks >= 3, "%d tasks read from: %.300s", n_tasks, task ? task : "");
    free(train_help);
    free(out);

    tbt_case = "unknown command";
    rc = tbt_run(&out, 10, "%s frobnicate", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "no command 'frobnicate'");
    free(out);

    tbt_case = "unknown flag";
    rc = tbt_run(&out, 10, "%s prep --out x --chunk-secs 5 a.mp4", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "unknown flag '--chunk-secs'");
    free(out);

    tbt_case = "short option";
    rc = tbt_run(&out, 10, "%s prep -o x a.mp4", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "unknown option '-o'");
    free(out);

    tbt_case = "malformed number";
    const char *bad[] = {"--gop 3x", "--gop ''", "--gop 1e3", "--crf 2.5", "--fps 30/0",
                         "--fps abc", "--gop 99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rc = tbt_run(&out, 10, "%s prep --out x %s a.mp4", t, bad[i]);
        CHECK_MSG(rc == 2, "'%s' exited %d", bad[i], rc);
        CHECK_STR_HAS(out, "malformed value");
        free(out);
    }

    tbt_case = "out of range";
    rc = tbt_run(&out, 10, "%s prep --out x --crf 60 a.mp4", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--crf: 60 is out of range [0, 51]");
    free(out);
    rc = tbt_run(&out, 10, "%s synth --out x --size 10x10", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "out of range");
    free(out);

    tbt_case = "missing value";
    rc = tbt_run(&out, 10, "%s prep a.mp4 --out", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--out needs a value");
    free(out);

    tbt_case = "required flag";
    rc = tbt_run(&out, 10, "%s prep a.mp4", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "--out ROOT is required");
    free(out);

    tbt_case = "positional count";
    rc = tbt_run(&out, 10, "%s prep --out x", t);
    CHECK_EQ(rc, 2);
    CHECK_STR_HAS(out, "expected SRC...");
    free(out);
    rc = tbt_run(&out, 10, "%s probe a b", t);
    CHECK_EQ(rc, 2);
    free(out);
}

static void test_help(void)
{
    const char *t = tbt_tubelet();
    char *out = NULL, *out2 = NULL;
    tbt_case = "help";
    CHECK_EQ(tbt_run(&out, 10, "%s help", t), 0);
    CHECK_STR_HAS(out, "prep");
    CHECK_STR_HAS(out, "synth");
    CHECK_STR_HAS(out, "probe");
    free(out);
    /* 'help prep' and 'prep --help' print the same text, every flag with its default. */
    CHECK_EQ(tbt_run(&out, 10, "%s help prep", t), 0);
    CHECK_EQ(tbt_run(&out2, 10, "%s prep --help", t), 0);
    CHECK(out && out2 && !strcmp(out, out2));
    const char *flags[] = {"--out ROOT", "--chunk-seconds S", "--short-side PX", "--fps F",
                           "--gop N", "--crf Q", "--preset NAME", "--ext EXT", "--jobs J",
                           "--threads N", "--config FILE"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        CHECK_STR_HAS(out, flags[i]);
    CHECK_STR_HAS(out, "(default: 15)");
    free(out);
    free(out2);
    /* help is a command too */
    CHECK_EQ(tbt_run(&out, 10, "%s help help", t), 0);
    CHECK_STR_HAS(out, "\ncommands:\n");
    free(out);
    /* a flag with a fixed set of values lists them in help, and a value outside is named */
    CHECK_EQ(tbt_run(&out, 10, "%s help train", t), 0);
    CHECK_STR_HAS(out, "  --task cls|mae|clip ");
    free(out);
    static const char *const bad[][2] = {
        {"train --task cl --data d --train t --out o", "--task: 'cl' is none of cls|mae|clip"},
        {"eval --format csv --ckpt c --data d --val v",
         "--format: 'csv' is none of epic|kinetics|narration"},
        {"eval --crops 2 --ckpt c --data d --val v", "--crops is 1 (the centre) or 3"},
        {"train --val-crops 2 --data d --train t --out o", "--val-crops is 1 (the centre) or 3"},
        {"step --pool max --weights w --batch-file b --out o",
         "--pool: 'max' is none of mean|cls|none"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(tbt_run(&out, 10, "%s %s", t, bad[i][0]), 2);
        CHECK_STR_HAS(out, bad[i][1]);
        free(out);
    }
}

/* Flags as `tubelet CMD --help` lists them: name and metavar of each "  --name META  help"
 * line into names[] / metas[]; their number. */
enum { MAX_FLAGS = 128 };
static int help_flags(const char *cmd, char names[][40], char metas[][40])
{
    char *out = NULL;
    int n = 0;
    CHECK_EQ(tbt_run(&out, 10, "%s %s --help", tbt_tubelet(), cmd), 0);
    for (char *ln = out; ln && *ln && n < MAX_FLAGS; ln = strchr(ln, '\n'), ln = ln ? ln + 1 : 0) {
        if (strncmp(ln, "  --", 4))
            continue;
        names[n][0] = metas[n][0] = '\0';
        if (sscanf(ln + 4, "%39[a-z0-9-] %39[^ \n]", names[n], metas[n]) < 1)
            continue;
        if (strchr(metas[n], '|'))
            snprintf(metas[n], 40, "a|b"); /* one of a list: each flag's own list */
        else if (!strcmp(metas[n], "") || (metas[n][0] >= 'a' && metas[n][0] <= 'z'))
            metas[n][0] = '\0'; /* a boolean: the help text follows */
        n++;
    }
    free(out);
    return n;
}

/* One vocabulary: parsed from every command's --help, a flag that several commands have is
 * spelled one way and takes one kind of value: the prepared videos are --data (the old --root
 * shown only as an alias), a size is --size WxH, or PX for a square clip (the old
 * --input-size an alias), annotation files are FILE; and the README and docs/FORMATS.md use
 * no old spelling but where they name it as one. */
static void test_vocabulary(void)
{
    tbt_case = "one vocabulary";
    static const char *const cmds[] = {"synth", "prep", "probe", "frames", "bench-load", "ann",
                                       "peek", "step", "train", "eval", "plot", "tokenize"};
    enum { N = sizeof(cmds) / sizeof(cmds[0]) };
    static char names[N][MAX_FLAGS][40], metas[N][MAX_FLAGS][40];
    int n[N], data_cmds = 0, size_cmds = 0;
    for (int c = 0; c < N; c++)
        n[c] = help_flags(cmds[c], names[c], metas[c]);
    static const char *const old[] = {"root", "input-size", "data-dir", "annotations"};
    for (int c = 0; c < N; c++)
        for (int i = 0; i < n[c]; i++) {
            const char *name = names[c][i], *meta = metas[c][i];
            for (size_t k = 0; k < sizeof(old) / sizeof(old[0]); k++)
                CHECK_MSG(strcmp(name, old[k]), "tubelet %s has --%s, an old spelling", cmds[c],
                          name);
            if (!strcmp(name, "size")) {
                size_cmds++;
                CHECK_MSG(!strcmp(meta, "WxH") || !strcmp(meta, "PX"), "tubelet %s --size %s: "
                          "a size is WxH, or PX for a square", cmds[c], meta);
            }
            if (!strcmp(name, "data")) {
                data_cmds++;
                CHECK_MSG(!strcmp(meta, "DIR"), "tubelet %s --data %s, not DIR", cmds[c], meta);
            }
            if (!strcmp(name, "ann") || !strcmp(name, "train") || !strcmp(name, "val"))
                CHECK_MSG(!strcmp(meta, "FILE") || (!strcmp(cmds[c], "peek") && !meta[0]),
                          "tubelet %s --%s %s: annotations are a FILE", cmds[c], name, meta);
            /* the same name in another command: the same kind of value (--out names a file
             * or a directory by what the command writes; --frames a list only in frames) */
            for (int d = c + 1; d < N; d++)
                for (int j = 0; j < n[d]; j++)
                    if (!strcmp(name, names[d][j]) && strcmp(name, "size") &&
                        strcmp(name, "out") && strcmp(name, "frames") &&
                        strcmp(name, "train") && strcmp(meta, metas[d][j]))
                        TBT_FAIL("--%s is %s in tubelet %s, %s in tubelet %s", name,
                                 meta[0] ? meta : "a switch", cmds[c],
                                 metas[d][j][0] ? metas[d][j] : "a switch", cmds[d]);
        }
    CHECK_MSG(data_cmds >= 5, "only %d commands take --data", data_cmds);
    CHECK_MSG(size_cmds >= 6, "only %d commands take --size", size_cmds);
    /* the old spellings still parse, and help names them */
    char *out = NULL;
    CHECK_EQ(tbt_run(&out, 10, "%s peek --help", tbt_tubelet()), 0);
    CHECK_STR_HAS(out, "(also --root)");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, "%s train --input-size 64 --print-config", tbt_tubelet()), 0);
    CHECK_STR_HAS(out, "\nsize = 64 ");
    free(out);
    static const char *const docs[] = {"README.md", "docs/FORMATS.md", "docs/RECIPES.md",
                                       "docs/PYTHON.md"};
    for (size_t k = 0; k < sizeof(docs) / sizeof(docs[0]); k++) {
        char path[4200];
        snprintf(path, sizeof(path), "%s/%s", TB_SOURCE_DIR, docs[k]);
        char *text = tbt_read(path, NULL);
        CHECK_MSG(text, "%s: cannot read", path);
        for (char *p = text; p && (p = strstr(p, "--")); p += 2) {
            char *eol = strchr(p, '\n'), *bol = p;
            while (bol > text && bol[-1] != '\n')
                bol--;
            int alias_note = eol && (memmem(bol, (size_t)(eol - bol), "also --", 7) ||
                                     memmem(bol, (size_t)(eol - bol), "also `--", 8));
            if (!alias_note && (!strncmp(p, "--root ", 7) || !strncmp(p, "--input-size", 12)))
                TBT_FAIL("%s uses the old %.12s: %.*s", docs[k], p,
                         (int)(eol ? eol - bol : 80), bol);
        }
        free(text);
    }
}

/* out has the line "SETTING  # NOTE..." (setting: "key = value"; note: the start of its note;
 * NULL: a line without a note). */
static void check_line(const char *out, const char *setting, const char *note)
{
    char want[512];
    snprintf(want, sizeof(want), "\n%s%s", setting, note ? " " : "\n");
    const char *p = out ? strstr(out, want) : NULL;
    const char *eol = p ? strchr(p + 1, '\n') : NULL;
    const char *hash = p && note ? strstr(p + strlen(want) - 1, "# ") : NULL;
    CHECK_MSG(p && (!note || (hash && hash < eol && !strncmp(hash + 2, note, strlen(note)))),
              "no line '%s # %s' in:\n%s", setting, note ? note : "", out);
}

/* Writes text to the scratch file name; its path. */
static const char *write_conf(const char *name, const char *text)
{
    const char *path = tbt_path(name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static void test_config(void)
{
    const char *t = tbt_tubelet();
    const char *d = tbt_dir();
    char *out = NULL, *out2 = NULL;
    char path[4200];

    tbt_case = "config file";
    snprintf(path, sizeof(path), "%s/prep.conf", d);
    FILE *f = fopen(path, "w");
    fprintf(f, "# prep settings\nchunk-seconds = 5   # short\n\ngop=12\npreset = ultrafast\n"
               "fps = 30000/1001\nout = %s/root\n", d);
    fclose(f);
    CHECK_EQ(tbt_run(&out, 10, "%s prep --config %s --gop 24 --print-config", t, path), 0);
    /* each value says where it came from; the command line wins, whatever the order */
    check_line(out, "chunk-seconds = 5", path);
    CHECK_STR_HAS(out, "prep.conf:2\n");
    check_line(out, "gop = 24", "the command line\n");
    check_line(out, "preset = ultrafast", path);
    check_line(out, "fps = 30000/1001", path);
    check_line(out, "crf = 23", NULL); /* defaults fill the rest, without a note */

    /* The dump is itself a config file that gives the same configuration back. */
    char dump[4200];
    snprintf(dump, sizeof(dump), "%s/dump.conf", d);
    f = fopen(dump, "w");
    fputs(out, f);
    fclose(f);
    CHECK_EQ(tbt_run(&out2, 10, "%s prep --config %s --print-config", t, dump), 0);
    CHECK_STR_HAS(out2, "dump.conf:"); /* now from the dump */
    CHECK(out && out2 && !strcmp(tbt_config_values(out), tbt_config_values(out2)));
    free(out);
    free(out2);

    tbt_case = "config errors";
    f = fopen(path, "w");
    fprintf(f, "gop = 12\ncolour = red\n");
    fclose(f);
    CHECK_EQ(tbt_run(&out, 10, "%s prep --config %s --out x a.mp4", t, path), 2);
    CHECK_STR_HAS(out, "prep.conf:2: unknown key 'colour'");
    free(out);
    f = fopen(path, "w");
    fprintf(f, "gop = 12\n\ncrf = high\n");
    fclose(f);
    CHECK_EQ(tbt_run(&out, 10, "%s prep --config %s --out x a.mp4", t, path), 2);
    CHECK_STR_HAS(out, "prep.conf:3: --crf: malformed value 'high'");
    free(out);
    f = fopen(path, "w");
    fprintf(f, "gop 12\n");
    fclose(f);
    CHECK_EQ(tbt_run(&out, 10, "%s prep --config %s --out x a.mp4", t, path), 2);
    CHECK_STR_HAS(out, "prep.conf:1: expected 'key = value'");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, "%s prep --config %s/nope.conf --out x a.mp4", t, d), 2);
    CHECK_STR_HAS(out, "nope.conf: cannot open");
    free(out);
}

/* Issue 42's S1 and its class: one rule for settings from several sources. The command line
 * wins over a file and says so; two settings of one thing from one source are refused, both
 * named; a setting a choice fixes or leaves unread is refused when given otherwise. */
static void test_sources(void)
{
    const char *t = tbt_tubelet();
    const char *base = "%s train --data d --train t.csv --out o ";
    char fmt[256], *out = NULL;
    snprintf(fmt, sizeof(fmt), "%s%%s", base);

    tbt_case = "--lr over a file's --blr";
    const char *blr = write_conf("blr.conf", "task = mae\nblr = 0.00015\n");
    char flags[4400];
    snprintf(flags, sizeof(flags), "--config %s --lr 0.0003 --print-config", blr);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, flags), 0);
    check_line(out, "lr = 0.0003", "the command line\n");
    CHECK_STR_HAS(out, "\n# not read: --lr 0.0003 (the command line) wins over --blr 0.00015 (");
    CHECK_STR_HAS(out, "blr.conf:2)\n#   blr = 0.00015\n");
    check_line(out, "task = mae", blr); /* where from: the file */
    free(out);

    tbt_case = "--blr over a file's --lr";
    const char *lr = write_conf("lr.conf", "lr = 0.01\n");
    snprintf(flags, sizeof(flags), "--config %s --blr 0.001 --print-config", lr);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, flags), 0);
    CHECK_STR_HAS(out, "\n# not read: --blr 0.001 (the command line) wins over --lr 0.01 (");
    CHECK_STR_HAS(out, "lr.conf:1)\n#   lr = 0.01\n");
    CHECK_STR_HAS(out, "\nblr = 0.001 ");
    free(out);

    tbt_case = "--lr and --blr from one source";
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--lr 0.01 --blr 0.001"), 2);
    CHECK_STR_HAS(out, "--lr 0.01 (the command line) and --blr 0.001 (the command line) both "
                  "set the peak learning rate");
    free(out);
    const char *both = write_conf("both.conf", "blr = 0.001\n# a comment\nlr = 0.01\n");
    snprintf(flags, sizeof(flags), "--config %s", both);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, flags), 2);
    CHECK_STR_HAS(out, "both.conf:3) and --blr 0.001 (");
    CHECK_STR_HAS(out, "both.conf:1) both set the peak");
    free(out);

    tbt_case = "a key twice";
    const char *twice = write_conf("twice.conf", "epochs = 3\nbatch = 4\nepochs = 5\n");
    snprintf(flags, sizeof(flags), "--config %s --print-config", twice);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, flags), 2);
    CHECK_STR_HAS(out, "twice.conf:3: epochs is given twice: 3 at line 1, 5 here");
    free(out);
    twice = write_conf("same.conf", "epochs = 3\nepochs = 3\n"); /* no contradiction */
    snprintf(flags, sizeof(flags), "--config %s --print-config", twice);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, flags), 0);
    free(out);
    /* on the command line an override of a script's base flags: the later wins, said */
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--batch 4 --epochs 2 --batch 8 --print-config"), 0);
    CHECK_STR_HAS(out, "note: --batch 8 replaces --batch 4 given before it on the command line");
    check_line(out, "batch = 8", "the command line");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--input-size 64 --size 32 --print-config"), 0);
    CHECK_STR_HAS(out, "note: --size 32 replaces --size 64"); /* the old spelling is the flag */
    free(out);

    tbt_case = "settings a task does not read";
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task mae --mixup 0.8"), 2);
    CHECK_STR_HAS(out, "--mixup 0.8 (the command line) would be ignored: only --task cls reads "
                  "it, not --task mae");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task cls --text-width 64"), 2);
    CHECK_STR_HAS(out, "--text-width 64 (the command line) would be ignored: only --task clip");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task clip --classes 5"), 2);
    CHECK_STR_HAS(out, "--classes 5 (the command line) would be ignored: --task clip has no "
                  "classifier head");
    free(out);
    /* the default value given again contradicts nothing; --print-config says it is unread */
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task mae --mixup 0 --print-config"), 0);
    const char *unread = out ? strstr(out, "\n# not read: only --task cls reads it, not --task "
                                            "mae\n") : NULL;
    CHECK_MSG(unread && strstr(unread, "\n#   mixup = 0\n"), "%s", out);
    CHECK_MSG(out && !strstr(out, "\nmixup = "), "%s", out); /* not among the settings read */
    free(out);

    tbt_case = "settings a choice fixes";
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task clip --pool mean"), 2);
    CHECK_STR_HAS(out, "--pool mean (the command line), but --task clip: AVION's CLIP video "
                  "tower pools by its class token");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--cls-backbone clip --pos sincos"), 2);
    CHECK_STR_HAS(out, "--pos sincos (the command line), but --cls-backbone clip: ");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task clip --flip true"), 2);
    CHECK_STR_HAS(out, "--flip true (the command line), but --task clip: ");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task mae --qv-bias false"), 2);
    CHECK_STR_HAS(out, "--qv-bias false (the command line), but --task mae: ");
    free(out);
    CHECK_EQ(tbt_run(&out, 10, fmt, t, "--task clip --print-config"), 0);
    check_line(out, "pool = cls", "--task clip: ");
    check_line(out, "flip = false", "--task clip: ");
    free(out);
}

int main(void)
{
    tbt_begin("cli");
    test_usage_errors();
    test_help();
    test_vocabulary();
    test_config();
    test_sources();
    TBT_EXIT();
}

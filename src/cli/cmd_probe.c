/* src/cli/cmd_probe.c - `tubelet probe PATH`: JSON about a video file or a prepared video
 * directory (codec, size, rate, duration, true frame count, keyframes, chunks).
 * Tests: tests/test_prep.c, tests/test_cli.c. */
#include <inttypes.h>
#include <stdio.h>

#include "cli/cli.h"
#include "tubelet/video.h"

struct probe_config {
    int decode;
};

static const struct cli_flag probe_flags[] = {
    CLI_FLAG("decode", CLI_BOOL, struct probe_config, decode, "true", "",
             "decode every frame of a file for the true frame count and keyframes", CLI_NO_RANGE),
};

static void print_i64_list(const int64_t *v, int64_t n)
{
    putchar('[');
    for (int64_t i = 0; i < n; i++)
        printf("%s%" PRId64, i ? ", " : "", v[i]);
    putchar(']');
}

static void print_probe(const struct tb_probe *p)
{
    printf("{\n  \"path\": ");
    cli_json_string(stdout, p->path);
    printf(",\n  \"container\": ");
    cli_json_string(stdout, p->container);
    printf(",\n  \"codec\": ");
    cli_json_string(stdout, p->codec);
    printf(",\n  \"pix_fmt\": ");
    cli_json_string(stdout, p->pix_fmt);
    printf(",\n  \"width\": %d,\n  \"height\": %d,\n  \"rotation\": %d,\n", p->width, p->height,
           p->rotation);
    printf("  \"fps\": \"%d/%d\",\n  \"fps_value\": %.6f,\n", p->fps_num, p->fps_den,
           p->fps_den ? (double)p->fps_num / p->fps_den : 0.0);
    printf("  \"start_time\": %.6f,\n  \"duration\": %.6f,\n", p->start_time, p->duration);
    printf("  \"frames_declared\": %" PRId64 ",\n", p->n_frames_declared);
    if (p->decoded) {
        printf("  \"frames\": %" PRId64 ",\n  \"bad_packets\": %" PRId64 ",\n", p->n_frames,
               p->n_bad_packets);
        printf("  \"keyframes\": ");
        print_i64_list(p->keyframes, p->n_keyframes);
    } else {
        printf("  \"frames\": null,\n  \"keyframes\": null");
    }
    if (p->index) {
        const struct tb_video_index *idx = p->index;
        printf(",\n  \"source\": ");
        cli_json_string(stdout, idx->source);
        printf(",\n  \"params\": ");
        cli_json_string(stdout, idx->params);
        printf(",\n  \"chunk_seconds\": %d,\n  \"chunk_frames\": %" PRId64 ",\n  \"chunks\": [",
               idx->chunk_seconds, idx->chunk_frames);
        for (int i = 0; i < idx->n_chunks; i++) {
            const struct tb_chunk_info *c = &idx->chunks[i];
            printf("%s\n    {\"file\": ", i ? "," : "");
            cli_json_string(stdout, c->file);
            printf(", \"start_frame\": %" PRId64 ", \"frames\": %" PRId64 ", \"bytes\": %" PRId64
                   ", \"keyframes\": ", c->start_frame, c->n_frames, c->bytes);
            print_i64_list(c->keyframes, c->n_keyframes);
            putchar('}');
        }
        printf("\n  ]");
    }
    printf("\n}\n");
}

static int run_probe(void *config, int n_args, char **args)
{
    struct probe_config *c = config;
    struct tb_probe *p = NULL;
    (void)n_args;
    int rc = tb_probe(&p, args[0], c->decode);
    if (rc < 0) {
        cli_report("probe", rc);
        return 1;
    }
    print_probe(p);
    fflush(stdout);
    /* A file cut short decodes to less than it declares: the JSON says what decodes, and the
     * exit status says prep will refuse it. */
    int status = 0;
    if (p->warning[0]) {
        fprintf(stderr, "tubelet probe: warning: %s\n", p->warning);
        status = 1;
    }
    tb_probe_free(&p);
    return status;
}

const struct cli_command cli_cmd_probe = {
    .name = "probe",
    .args = "PATH",
    .summary = "print JSON about a video file or a prepared video directory",
    .details = "For a file, --decode (the default) decodes every frame to count them and find\n"
               "the keyframes; for a prepared directory the index already holds both. A file\n"
               "that decodes to much less than its container declares (cut short or corrupt;\n"
               "prep refuses it) is still printed, with a warning naming both lengths and what\n"
               "to do, and the exit status is 1. \"rotation\" is the turn (clockwise degrees)\n"
               "the display matrix asks for; ffprobe counts the same turn anticlockwise. prep\n"
               "applies it; frames and training refuse a rotated plain file.",
    .flags = probe_flags,
    .n_flags = (int)(sizeof(probe_flags) / sizeof(probe_flags[0])),
    .config_size = sizeof(struct probe_config),
    .min_args = 1,
    .max_args = 1,
    .run = run_probe,
};

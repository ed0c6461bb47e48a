/* src/video/index.c - reading and writing the index files of prepared videos: video.idx for a
 * whole video and <start>.idx per chunk. Line-based text ("key value"), so a person can read
 * them; the first line names the kind and the version. Validation is strict: anything
 * inconsistent is TB_EFORMAT naming the file and line. Tests: tests/test_prep.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "video/internal.h"

#define INDEX_MAX_BYTES (64u << 20)

static const char *kind_magic(enum tbi_index_kind kind)
{
    return kind == TBI_INDEX_VIDEO ? "tubelet-video" : "tubelet-chunk";
}

struct tb_video_index *tbi_index_alloc(int n_chunks)
{
    struct tb_video_index *idx = tbi_calloc(1, sizeof(*idx));
    if (!idx)
        return NULL;
    if (n_chunks > 0 && !(idx->chunks = tbi_calloc((size_t)n_chunks, sizeof(*idx->chunks)))) {
        free(idx);
        return NULL;
    }
    idx->n_chunks = n_chunks;
    return idx;
}

void tb_index_free(struct tb_video_index **p)
{
    if (!p || !*p)
        return;
    struct tb_video_index *idx = *p;
    for (int i = 0; i < idx->n_chunks; i++)
        free(idx->chunks[i].keyframes);
    free(idx->chunks);
    free(idx);
    *p = NULL;
}

static void format_chunk(struct tbi_sb *sb, const struct tb_chunk_info *c, int no)
{
    tbi_sb_printf(sb, "chunk %d file=%s start_frame=%" PRId64 " frames=%" PRId64 " bytes=%" PRId64
                  "\nkeyframes",
                  no, c->file, c->start_frame, c->n_frames, c->bytes);
    for (int i = 0; i < c->n_keyframes; i++)
        tbi_sb_printf(sb, " %" PRId64, c->keyframes[i]);
    tbi_sb_printf(sb, "\n");
}

void tbi_index_format(struct tbi_sb *sb, enum tbi_index_kind kind, const struct tb_video_index *idx,
                      int chunk_no)
{
    tbi_sb_printf(sb, "%s %d\n", kind_magic(kind), TB_INDEX_VERSION);
    tbi_sb_printf(sb, "source %s\n", idx->source);
    tbi_sb_printf(sb, "params %s\n", idx->params);
    tbi_sb_printf(sb, "fps %d/%d\n", idx->fps_num, idx->fps_den);
    tbi_sb_printf(sb, "size %dx%d\n", idx->width, idx->height);
    tbi_sb_printf(sb, "chunk_seconds %d\n", idx->chunk_seconds);
    tbi_sb_printf(sb, "chunk_frames %" PRId64 "\n", idx->chunk_frames);
    if (kind == TBI_INDEX_CHUNK) {
        format_chunk(sb, &idx->chunks[0], chunk_no);
        return;
    }
    tbi_sb_printf(sb, "frames %" PRId64 "\n", idx->n_frames);
    tbi_sb_printf(sb, "chunks %d\n", idx->n_chunks);
    for (int i = 0; i < idx->n_chunks; i++)
        format_chunk(sb, &idx->chunks[i], i);
}

/* Parse "k=v" among space-separated fields of s; copies v into val. 0 or -1 if absent. */
static int field(const char *s, const char *key, char *val, size_t val_size)
{
    size_t klen = strlen(key);
    const char *p = s;
    while (*p) {
        while (*p == ' ')
            p++;
        const char *tok = p;
        while (*p && *p != ' ')
            p++;
        if ((size_t)(p - tok) > klen && !strncmp(tok, key, klen) && tok[klen] == '=') {
            size_t n = (size_t)(p - tok) - klen - 1;
            if (n >= val_size)
                return -1;
            memcpy(val, tok + klen + 1, n);
            val[n] = '\0';
            return 0;
        }
    }
    return -1;
}

/* "A<sep>B" of two whole numbers in [1, INT32_MAX]: 0 or -1. Not sscanf, which takes trailing
 * junk (a line whose newline was lost would swallow the next) and overflows silently. */
static int parse_pair(const char *s, char sep, int *a, int *b)
{
    char left[32];
    const char *at = strchr(s, sep);
    int64_t x, y;
    if (!at || (size_t)(at - s) >= sizeof(left))
        return -1;
    memcpy(left, s, (size_t)(at - s));
    left[at - s] = '\0';
    if (tbi_parse_i64(left, 1, INT32_MAX, &x) || tbi_parse_i64(at + 1, 1, INT32_MAX, &y))
        return -1;
    *a = (int)x;
    *b = (int)y;
    return 0;
}

static int field_i64(const char *s, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    char v[32];
    return field(s, key, v, sizeof(v)) || tbi_parse_i64(v, lo, hi, out) ? -1 : 0;
}

static int parse_keyframes(struct tb_chunk_info *c, char *rest)
{
    int cap = 16, n = 0;
    int64_t *kf = tbi_malloc(sizeof(*kf) * (size_t)cap);
    if (!kf)
        return TB_ENOMEM;
    char *save = NULL;
    for (char *tok = strtok_r(rest, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        int64_t v;
        if (tbi_parse_i64(tok, 0, INT64_MAX, &v) || (n > 0 && v <= kf[n - 1])) {
            free(kf);
            return TB_EFORMAT;
        }
        if (n == cap) {
            int64_t *grown = tbi_realloc(kf, sizeof(*kf) * (size_t)(cap *= 2));
            if (!grown) {
                free(kf);
                return TB_ENOMEM;
            }
            kf = grown;
        }
        kf[n++] = v;
    }
    free(c->keyframes);
    c->keyframes = kf;
    c->n_keyframes = n;
    return 0;
}

/* Checks that need the whole file: chunks contiguous, counts consistent. */
static int validate(const struct tb_video_index *idx, enum tbi_index_kind kind, const char *path)
{
    if (idx->fps_num <= 0 || idx->fps_den <= 0 || idx->width <= 0 || idx->height <= 0 ||
        idx->chunk_seconds <= 0 || idx->chunk_frames <= 0)
        return tbi_err(TB_EFORMAT, "%s: missing or bad fps, size, chunk_seconds or chunk_frames",
                       path);
    int64_t total = 0;
    for (int i = 0; i < idx->n_chunks; i++) {
        const struct tb_chunk_info *c = &idx->chunks[i];
        if (!c->file[0] || c->n_frames <= 0 || c->n_frames > idx->chunk_frames)
            return tbi_err(TB_EFORMAT, "%s: chunk %d is missing or has a bad frame count", path,
                           i);
        if (c->n_keyframes < 1 || c->keyframes[0] != 0 ||
            c->keyframes[c->n_keyframes - 1] >= c->n_frames)
            return tbi_err(TB_EFORMAT, "%s: chunk %d: keyframes must start at 0 and lie below "
                           "%" PRId64, path, i, c->n_frames);
        if (kind == TBI_INDEX_VIDEO) {
            if (c->start_frame != total)
                return tbi_err(TB_EFORMAT, "%s: chunk %d starts at frame %" PRId64
                               ", expected %" PRId64, path, i, c->start_frame, total);
            if (i + 1 < idx->n_chunks && c->n_frames != idx->chunk_frames)
                return tbi_err(TB_EFORMAT, "%s: chunk %d holds %" PRId64 " frames; only the "
                               "last may hold fewer than %" PRId64, path, i, c->n_frames,
                               idx->chunk_frames);
        }
        if (c->n_frames > INT64_MAX - total)
            return tbi_err(TB_EFORMAT, "%s: chunk %d: the frame counts add up past 2^63", path,
                           i);
        total += c->n_frames;
    }
    if (kind == TBI_INDEX_VIDEO && (idx->n_chunks < 1 || total != idx->n_frames))
        return tbi_err(TB_EFORMAT, "%s: chunks hold %" PRId64 " frames but the video has %" PRId64,
                       path, total, idx->n_frames);
    return 0;
}

/* What a record line's parser returns for a line that is malformed or not expected there. */
enum { BAD_LINE = 1 };

/* The first line: the kind's name and the version this tubelet reads. */
static int check_magic(const char *path, enum tbi_index_kind kind, const char *key,
                       const char *rest)
{
    int64_t v;
    if (strcmp(key, kind_magic(kind)) || tbi_parse_i64(rest, 1, 1000000, &v))
        return tbi_err(TB_EFORMAT, "%s:1: not a %s index", path, kind_magic(kind));
    if (v != TB_INDEX_VERSION)
        return tbi_err(TB_EFORMAT, "%s:1: index version %" PRId64 ", this tubelet reads "
                       "version %d; run tubelet prep again", path, v, TB_INDEX_VERSION);
    return 0;
}

/* A "chunk N file=... start_frame=... frames=... bytes=..." line: chunk N becomes *cur (the
 * next in a video index, the only one in a chunk index, whose number goes to *chunk_no). */
static int parse_chunk(struct tb_video_index *idx, enum tbi_index_kind kind, char *rest,
                       int *cur, int *chunk_no)
{
    int64_t v;
    char *sp = strchr(rest, ' ');
    if (!sp)
        return BAD_LINE;
    *sp = '\0';
    if (tbi_parse_i64(rest, 0, 10000000, &v))
        return BAD_LINE;
    if (kind == TBI_INDEX_VIDEO) {
        if (v != *cur + 1 || v >= idx->n_chunks)
            return BAD_LINE;
        *cur = (int)v;
    } else {
        if (*cur != -1)
            return BAD_LINE;
        *cur = 0;
        if (chunk_no)
            *chunk_no = (int)v;
    }
    struct tb_chunk_info *c = &idx->chunks[*cur];
    if (field(sp + 1, "file", c->file, sizeof(c->file)) || strchr(c->file, '/') ||
        field_i64(sp + 1, "start_frame", 0, INT64_MAX, &c->start_frame) ||
        field_i64(sp + 1, "frames", 1, INT64_MAX, &c->n_frames) ||
        field_i64(sp + 1, "bytes", 0, INT64_MAX, &c->bytes))
        return BAD_LINE;
    return 0;
}

/* The "chunks N" line of a video index: room for N chunk records. */
static int parse_chunk_count(struct tb_video_index *idx, const char *rest, const char *path)
{
    int64_t v;
    if (tbi_parse_i64(rest, 1, 10000000, &v) || idx->chunks)
        return BAD_LINE;
    if (!(idx->chunks = tbi_calloc((size_t)v, sizeof(*idx->chunks))))
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    idx->n_chunks = (int)v;
    return 0;
}

/* One line after the first, split into its key and the rest: 0, BAD_LINE, or an error. */
static int parse_record(struct tb_video_index *idx, enum tbi_index_kind kind, const char *key,
                        char *rest, const char *path, int *cur, int *chunk_no)
{
    int64_t v;
    int rc;
    if (!strcmp(key, "source")) {
        snprintf(idx->source, sizeof(idx->source), "%s", rest);
    } else if (!strcmp(key, "params")) {
        snprintf(idx->params, sizeof(idx->params), "%s", rest);
    } else if (!strcmp(key, "fps")) {
        return parse_pair(rest, '/', &idx->fps_num, &idx->fps_den) ? BAD_LINE : 0;
    } else if (!strcmp(key, "size")) {
        return parse_pair(rest, 'x', &idx->width, &idx->height) ? BAD_LINE : 0;
    } else if (!strcmp(key, "chunk_seconds")) {
        if (tbi_parse_i64(rest, 1, 1 << 30, &v))
            return BAD_LINE;
        idx->chunk_seconds = (int)v;
    } else if (!strcmp(key, "chunk_frames")) {
        return tbi_parse_i64(rest, 1, INT64_MAX, &idx->chunk_frames) ? BAD_LINE : 0;
    } else if (!strcmp(key, "frames") && kind == TBI_INDEX_VIDEO) {
        return tbi_parse_i64(rest, 0, INT64_MAX, &idx->n_frames) ? BAD_LINE : 0;
    } else if (!strcmp(key, "chunks") && kind == TBI_INDEX_VIDEO) {
        return parse_chunk_count(idx, rest, path);
    } else if (!strcmp(key, "chunk")) {
        return parse_chunk(idx, kind, rest, cur, chunk_no);
    } else if (!strcmp(key, "keyframes")) {
        if (*cur < 0 || idx->chunks[*cur].keyframes)
            return BAD_LINE;
        rc = parse_keyframes(&idx->chunks[*cur], rest);
        if (rc == TB_ENOMEM)
            return tbi_err(rc, "%s: out of memory", path);
        return rc < 0 ? BAD_LINE : 0;
    } else {
        return BAD_LINE;
    }
    return 0;
}

int tbi_index_read(struct tb_video_index **out, const char *path, enum tbi_index_kind kind,
                   int *chunk_no)
{
    char *text = NULL;
    int rc = tbi_read_file(path, &text, NULL, INDEX_MAX_BYTES);
    *out = NULL;
    if (rc < 0)
        return rc;

    struct tb_video_index *idx = tbi_index_alloc(kind == TBI_INDEX_CHUNK ? 1 : 0);
    int line_no = 0, cur = -1;
    char *save = NULL, *line = NULL;
    if (!idx) {
        free(text);
        return tbi_err(TB_ENOMEM, "%s: out of memory", path);
    }
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        char *rest = strchr(line, ' ');
        if (rest)
            *rest++ = '\0';
        else
            rest = line + strlen(line);
        rc = line_no == 1 ? check_magic(path, kind, line, rest)
                          : parse_record(idx, kind, line, rest, path, &cur, chunk_no);
        if (rc == BAD_LINE)
            rc = tbi_err(TB_EFORMAT, "%s:%d: malformed or unexpected '%.40s' line", path,
                         line_no, line);
        if (rc < 0)
            goto fail;
    }
    if (line_no == 0) {
        rc = tbi_err(TB_EFORMAT, "%s: empty index file", path);
        goto fail;
    }
    if (cur + 1 != idx->n_chunks) {
        rc = tbi_err(TB_EFORMAT, "%s: %d chunk records, expected %d", path, cur + 1,
                     idx->n_chunks);
        goto fail;
    }
    if ((rc = validate(idx, kind, path)) < 0)
        goto fail;
    free(text);
    *out = idx;
    return 0;
fail:
    free(text);
    tb_index_free(&idx);
    return rc;
}

int tb_index_exists(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/%s", dir, TB_VIDEO_INDEX_NAME) >= (int)sizeof(path))
        return 0;
    return tbi_is_file(path);
}

int tb_index_load(struct tb_video_index **out, const char *dir)
{
    char path[4096];
    *out = NULL;
    int rc = tbi_fmt(path, sizeof(path), "%s/%s", dir, TB_VIDEO_INDEX_NAME);
    if (rc < 0)
        return rc;
    if (!tbi_is_file(path)) {
        if (tbi_is_dir(dir))
            return tbi_err(TB_ENOENT, "%s: no %s: not a prepared video, or its prep did not "
                           "finish (run tubelet prep again)", dir, TB_VIDEO_INDEX_NAME);
        return tbi_err(TB_ENOENT, "%s: no such prepared video directory", dir);
    }
    return tbi_index_read(out, path, TBI_INDEX_VIDEO, NULL);
}

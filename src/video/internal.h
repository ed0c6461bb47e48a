/* src/video/internal.h - index files shared by prep (writes them) and probe and the reader
 * (read them). Not public; the format is described in docs/FORMATS.md. */
#ifndef TUBELET_VIDEO_INTERNAL_H
#define TUBELET_VIDEO_INTERNAL_H

#include "core/strbuf.h"
#include "tubelet/video.h"

enum tbi_index_kind { TBI_INDEX_VIDEO, TBI_INDEX_CHUNK };

/* Append idx as a video.idx (all chunks) or as a chunk index (idx->chunks[0] only, with its
 * number chunk_no) to sb. */
void tbi_index_format(struct tbi_sb *sb, enum tbi_index_kind kind, const struct tb_video_index *idx,
                      int chunk_no);

/* Parse an index file of the given kind. For a chunk index, *chunk_no receives its number and
 * the index holds one chunk. Errors name path and line. */
int tbi_index_read(struct tb_video_index **out, const char *path, enum tbi_index_kind kind,
                   int *chunk_no);

/* Allocate an empty index with room for n_chunks (keyframe arrays not allocated). */
struct tb_video_index *tbi_index_alloc(int n_chunks);

#endif /* TUBELET_VIDEO_INTERNAL_H */

/* ---- H.264 file writer (prep's chunks, synth's videos) ----------------------------------- */

#include <libavutil/frame.h>

struct tbi_writer_opts {
    int width, height;      /* even */
    int fps_num, fps_den;
    int gop;                /* keyframe interval; <= 0 keeps x264's default (250) */
    int crf;
    const char *preset;
    const char *tune;       /* x264 tune, "" or NULL for none */
    int no_bframes;         /* 1: x264 bframes=0; 0: the preset's */
    int n_threads;
    int colorspace, primaries, trc; /* AVColorSpace, AVColorPrimaries, AVColorTransferCharac-
                                       teristic of the frames (0 or 2: unspecified, untagged);
                                       the range is limited (MPEG) */
};

/* Writes yuv420p frames to an H.264 MP4 file. The file is built as "<path>.part" and renamed to
 * path by tbi_writer_finish, so path never names a half-written file. */
struct tbi_writer;

int tbi_writer_open(struct tbi_writer **out, const char *path, const struct tbi_writer_opts *o);
/* frame: yuv420p, width x height; its pts is set to the next frame number. */
int tbi_writer_write(struct tbi_writer *w, AVFrame *frame);
/* Flush, finalise, rename into place. Fills the frame count, keyframes (caller frees
 * *keyframes) and file size. The writer is freed either way. */
int tbi_writer_finish(struct tbi_writer **w, int64_t *n_frames, int64_t **keyframes,
                      int *n_keyframes, int64_t *bytes);
/* Abandon: free everything and delete the partial file. NULL-safe. */
void tbi_writer_abort(struct tbi_writer **w);

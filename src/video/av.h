/* src/video/av.h - the FFmpeg plumbing shared by probe, prep, synth and the reader: mapping
 * AVERROR codes to TB_E* with a message naming the file, opening a file's best video stream
 * with its decoder, and reading the display rotation. Not public. */
#ifndef TUBELET_VIDEO_AV_H
#define TUBELET_VIDEO_AV_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

#include "core/internal.h"

/* Route FFmpeg's own log lines to tubelet's log callback at debug level (once per process),
 * so the library stays silent unless the program asks. Called by every entry point that
 * uses FFmpeg. */
void tbi_av_init(void);

/* Record "<what>: <FFmpeg's text>" and return the matching TB_E* (fallback: fallback). */
int tbi_av_err(int averr, int fallback, const char *fmt, ...) TB_PRINTF(3, 4);

/* What a source path is, before FFmpeg opens it: 0 for a regular file with bytes in it;
 * TB_ENOENT "PATH: no such file or directory"; TB_EINVAL "PATH: not a regular file (a FIFO)"
 * (a directory, a device, a socket: tubelet reads a file twice and seeks in it); TB_EDECODE
 * "PATH: empty file (0 bytes)". The one wording of these for prep, probe and the reader. */
int tbi_source_check(const char *path);

/* An open input: demuxer, chosen video stream and its decoder. */
struct tbi_input {
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVStream *st;
    int stream_index;
    int rotation; /* clockwise degrees needed for display: 0, 90, 180 or 270 */
    int flushed;  /* tbi_input_next_frame has sent the end of the stream to the decoder */
};

/* Open path (after tbi_source_check, unless it is a URL such as http: or file:), find its
 * best video stream (never cover art: a file without another video stream is "PATH: no video
 * stream (only audio and a cover picture)"), open a decoder with n_threads (0 = FFmpeg's
 * choice). Errors name path. On failure in is left closed. */
int tbi_input_open(struct tbi_input *in, const char *path, int n_threads);

/* The same for a file tubelet wrote itself (a prepared chunk: MP4, H.264, codec parameters in
 * its header): no format probing and no stream-information pass, which decodes frames and
 * costs several times more than the rest of opening. */
int tbi_input_open_chunk(struct tbi_input *in, const char *path, int n_threads);
/* Move in (open, or closed: then as tbi_input_open_chunk) to another prepared chunk, keeping
 * its decoder when the chunk's stream has the same codec, size, time base and header (chunks
 * of one video do): flushed, as after a seek, instead of freed and made again with its tables
 * and frames. On failure in is closed. */
int tbi_input_switch_chunk(struct tbi_input *in, const char *path, int n_threads);
void tbi_input_close(struct tbi_input *in);

/* Read packets and decode until a frame comes out (0), the stream ends (TB_EOF), or an error.
 * Packets that fail to decode are counted in *n_bad and skipped, as ffmpeg does; a demuxer
 * error other than end of file is returned. pkt is scratch space owned by the caller. */
int tbi_input_next_frame(struct tbi_input *in, AVPacket *pkt, AVFrame *frame, int64_t *n_bad,
                         const char *path);

/* A decoded frame's duration in the stream's time base: its own, else one period of the
 * stream's nominal rate; 0 when neither is known. */
int64_t tbi_frame_duration(const struct tbi_input *in, const AVFrame *f);

/* Whether a whole decode of in came out much shorter than its container declares (by more
 * than 5% and 1 s): the file is cut short or broken, and prep refuses it. first_ts: the first
 * frame's timestamp, end_ts: the last one's plus its duration (stream time base), n_frames:
 * frames decoded. *declared_s and *decoded_s (each may be NULL) get both lengths. Returns 0,
 * or TB_EDECODE with "<path>: truncated or corrupt: the container says X s (N frames) but only
 * Y s (M frames) decode" and what to do (fetch it again, or the ffmpeg command that re-encodes
 * the part that decodes). */
int tbi_check_truncation(const struct tbi_input *in, int64_t first_ts, int64_t end_ts,
                         int64_t n_frames, const char *path, double *declared_s,
                         double *decoded_s);

/* The YCbCr matrix ffmpeg's scale filter takes for frame (its in_color_matrix "auto"):
 * swscale's table for the frame's colorspace (BT.709, FCC, BT.601, SMPTE 240M, BT.2020),
 * BT.601 where it states none or another. */
const int *tbi_frame_coefficients(const AVFrame *frame);

/* Set sws up for frame's colours as ffmpeg's scale filter does: that matrix on both sides
 * (so a YCbCr -> YCbCr conversion keeps it) and the source range the frame states (full:
 * phones, MJPEG), else swscale's own for the format. */
struct SwsContext;
void tbi_sws_set_colors(struct SwsContext *sws, const AVFrame *frame);

/* The size of the NAL length prefix of H.264 in MP4 (from its avcC header); 0 for anything
 * else (no packet is then known to be disposable). */
int tbi_h264_nal_length(const AVCodecParameters *par);

/* 1 if the H.264 access unit d[0..size) is disposable: its slices all have nal_ref_idc 0, so
 * no other frame refers to it (the reader skips such frames when nobody wants them). */
int tbi_h264_disposable(const uint8_t *d, int size, int nal_len);

#endif /* TUBELET_VIDEO_AV_H */

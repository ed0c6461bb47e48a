/* tests/tb_test.h - the test kit: checks that print both operands and count failures, a
 * scratch directory removed at exit, running commands (the tubelet binary, the ffmpeg tool)
 * with their output captured, and reading decoded frames from the ffmpeg tool.
 * A test program exits 0 (all passed), 1 (a check failed) or 77 (skipped: a needed file or
 * tool is missing). */
#ifndef TUBELET_TB_TEST_H
#define TUBELET_TB_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tubelet/model.h"
#include "tubelet/safetensors.h"

#define TBT_SKIP 77

extern int tbt_failures;
extern const char *tbt_case;

#define TBT_FAIL(...)                                                                          \
    do {                                                                                       \
        fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, tbt_case ? tbt_case : "");    \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
        tbt_failures++;                                                                        \
    } while (0)

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond))                                                                           \
            TBT_FAIL("%s", #cond);                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        if (!(cond))                                                                           \
            TBT_FAIL(__VA_ARGS__);                                                             \
    } while (0)

#define CHECK_EQ(a, b)                                                                         \
    do {                                                                                       \
        int64_t va_ = (int64_t)(a), vb_ = (int64_t)(b);                                        \
        if (va_ != vb_)                                                                        \
            TBT_FAIL("%s == %s: %" PRId64 " != %" PRId64, #a, #b, va_, vb_);                   \
    } while (0)

#define CHECK_STR_HAS(hay, needle)                                                             \
    do {                                                                                       \
        const char *h_ = (hay), *n_ = (needle);                                                \
        if (!h_ || !strstr(h_, n_))                                                            \
            TBT_FAIL("'%s' not found in: %.600s", n_, h_ ? h_ : "(null)");                     \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
    do {                                                                                       \
        double x_ = (a), y_ = (b);                                                             \
        if (!(fabs(x_ - y_) <= (tol)))                                                         \
            TBT_FAIL("%s == %s: %.17g != %.17g (tolerance %g)", #a, #b, x_, y_, (double)(tol)); \
    } while (0)

#define TBT_EXIT() return tbt_failures ? 1 : 0

/* Start a test program: names it for messages and makes the scratch directory. From then on a
 * program with a failed check exits 1 at exit, whatever main returns (0, or 77 for a skip). */
void tbt_begin(const char *name);
/* "skip: <message>" on stderr, and what main returns for it: TBT_SKIP, or 1 when a check has
 * already failed (a skip never hides a failure): return tbt_skip("no %s", tool). */
int tbt_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Scratch directory of this test program (removed at exit unless TBT_KEEP is set). */
const char *tbt_dir(void);
/* The path of name in the scratch directory, in one of 8 buffers used in turn (so a call's
 * result stays valid through the next 7). */
const char *tbt_path(const char *name);

/* Run a shell command, capture stdout+stderr into a malloc'ed string (*out, may be NULL), and
 * return its exit status (or 128+signal). The command runs under `timeout` so nothing hangs. */
int tbt_run(char **out, int timeout_s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The CUDA libraries (libcuda, libcudart, libcublas, libcublasLt, libcudnn, libnccl) the
 * dynamic loader mapped into the processes of a command run with `LD_DEBUG=files
 * LD_DEBUG_OUTPUT=prefix` (at start or by dlopen), comma-separated into out ("" for none);
 * returns the number of loader logs read (0: the command wrote none, so nothing is proven). */
int tbt_cuda_libs_mapped(const char *prefix, char *out, size_t n);

/* Path of the tubelet binary (TUBELET_BIN, set by CMake). */
const char *tbt_tubelet(void);

/* Decode a video with the ffmpeg tool into yuv420p frames of w x h (after the given -vf
 * chain, may be NULL). Returns the number of frames, frames in *buf (malloc'ed). */
int64_t tbt_ffmpeg_yuv(const char *path, const char *vf, int w, int h, uint8_t **buf);

/* Frame size in bytes of a w x h yuv420p frame. */
size_t tbt_yuv_bytes(int w, int h);

/* Peak signal-to-noise ratio of two buffers (dB, 99 for identical). */
double tbt_psnr(const uint8_t *a, const uint8_t *b, size_t n);

/* Every tensor of the safetensors file ref_path against the one of the same name in
 * ours_path (float32, as many of each): relative L2 error within tol; elements for which
 * skip(name, k, n) is nonzero are left out (skip may be NULL; a tensor left out whole is not
 * compared); with require_signal, a reference tensor that is all zero fails too (it would
 * prove nothing). Prints the worst. */
void tbt_compare_st(const char *ours_path, const char *ref_path, const char *what, double tol,
                    int (*skip)(const char *name, int64_t k, int64_t n), int require_signal);

/* Two step files hold the same tensors to the bit (each one that differs fails, named). */
void tbt_same_st(const char *a_path, const char *b_path, const char *what);
/* Relative L2 errors per tensor of ours against ref (the step files of tubelet step and the
 * tests/ref scripts): worst[0] over the outputs (loss, logits, pred, video_emb, text_emb),
 * worst[1] over the first step's gradients (grad.*), worst[2] over the weights after the
 * steps; values where skip(name, k, n) is nonzero left out (skip may be NULL); *median over
 * the gradients; *same the share of the outputs' (but the loss) and gradients' values equal
 * to the bit. */
void tbt_rel_errors(const char *ours, const char *ref,
                    int (*skip)(const char *name, int64_t k, int64_t n), double worst[3],
                    double *median, double *same);

/* The scratch files of bf16 comparison i: weights, batch, and the step files of bf16 mode,
 * fp32 mode, the emulation and another run (guarded, recomputed). */
struct tbt_bf16_files {
    char w[4300], b[4300], bf16[4300], fp32[4300], emu[4300], other[4300];
};
void tbt_bf16_files(struct tbt_bf16_files *f, size_t i);
/* The runs of bf16 comparison f: `tubelet step TASK FLAGS` in bf16 and in fp32, the emulation
 * (the command REF, e.g. "python3 tests/ref/mae_ref.py", with FLAGS --precision bf16), and
 * bf16 on the guarded backend and with --recompute, each of those two the same bits as the
 * first. 1 if every run ran. */
int tbt_bf16_runs(const struct tbt_bf16_files *f, const char *task, const char *ref,
                  const char *flags);
/* bf16 mode's step file (bf16) and fp32 mode's (fp32) against bf16's exact emulation (emu):
 * the relative errors printed; bf16 within tol (outputs, gradients, weights after the steps)
 * and nearer the emulation than fp32 (outputs, median gradient). */
void tbt_bf16_verdict(const char *what, const char *bf16, const char *fp32, const char *emu,
                      int (*skip)(const char *name, int64_t k, int64_t n), const double tol[3]);

/* 1 if this build has the backend called name. */
int tbt_have_backend(const char *name);
/* `tubelet step TASK FLAGS --precision bf16 --backend B --out out_path` against the CPU bf16
 * mode's step file bf16: the relative errors (tbt_rel_errors) printed and within tol (outputs,
 * gradients, weights after the steps). B is cuda-emu, or TBT_STEP_BACKEND's (cuda, on a GPU:
 * bench/gpu-check.sh's phase (b)), which is then held to tol_other, another bf16
 * implementation's tolerance, and prints every tensor's error; there the case's reference
 * (the command REF, e.g. PYTHON " tests/ref/mae_ref.py", run with FLAGS) is also run under
 * PyTorch's autocast on the GPU and compared (tbt_autocast_compare, tol_autocast), or one line
 * says why not (PYTHON's torch has no CUDA). Said and not run where the build has no such
 * backend. */
void tbt_cuda_emu_step(const char *what, const char *task, const char *ref, const char *flags,
                       const char *bf16, const char *out_path,
                       int (*skip)(const char *name, int64_t k, int64_t n), const double tol[3],
                       const double tol_other[3], const double tol_autocast[2]);
/* Whether this PyTorch's CPU bf16 kernels round each product once (as oneDNN does on CPUs with
 * AVX-512), for every layout the models' forward and backward use; elsewhere its fallback rounds
 * partial sums, and CPU autocast is no twin of tubelet's bf16 mode. Asked once. */
int tbt_autocast_rounds_once(void);
/* The bf16 step file ours (who: "bf16", "cuda") against PyTorch's bf16 autocast on device
 * ("cpu" or "cuda"): `REF FLAGS --precision autocast --device DEVICE --out out_path`, every
 * tensor's error printed, then one line "WHAT: WHO against PyTorch's autocast on the CPU|GPU:
 * ..."; outputs within tol[0], gradients within tol[1] (negative: reported only), the weights
 * after the steps reported only (AdamW amplifies tiny gradients' differences). */
void tbt_autocast_compare(const char *what, const char *who, const char *ref, const char *flags,
                          const char *device, const char *ours, const char *out_path,
                          int (*skip)(const char *name, int64_t k, int64_t n), const double tol[2]);

/* A tensor record over data (for tb_st_write). */
struct tb_st_tensor tbt_tensor(const char *name, enum tb_st_dtype dtype, int n_dims,
                               const int64_t *shape, void *data);
/* Every parameter of reg as it is now, perturbed (N(0, 0.02) from seed, so zero-initialised
 * ones carry signal too), into a safetensors file (made_by in its metadata). */
void tbt_write_weights(tb_params *reg, const char *path, uint64_t seed, const char *made_by);

/* 1 if a file exists. */
int tbt_exists(const char *path);
/* Writes n bytes of seeded noise (the same bytes on every run) into path: a new file when
 * offset < 0, else over the existing file's bytes from offset on. 0 or -1. */
int tbt_write_noise(const char *path, long offset, size_t n, uint64_t seed);

/* Read a whole file (malloc'ed, NUL-terminated) or NULL. */
char *tbt_read(const char *path, size_t *len);

/* A --print-config text's settings alone, in place: each line's '#' note and the spaces
 * before it dropped, comment-only lines dropped. Returns text. */
char *tbt_config_values(char *text);

/* Where Debian's opencv-doc keeps its videos; tbt_opencv_video returns a path to name (for
 * box.mp4 / cup.mp4, unpacked from .gz into the scratch dir), or NULL if absent. */
const char *tbt_opencv_video(const char *name);

/* The checkpoints RUN_A/last.safetensors and RUN_B/last.safetensors hold the same tensors
 * to the bit (a failed check names the first that differ), more than 20 of them. */
void tbt_same_ckpt(const char *run_a, const char *run_b, const char *what);

#endif /* TUBELET_TB_TEST_H */

/* tests/test_dist.c - data parallelism on the CPU: `mpirun -np 2 tubelet train --batch 2`
 * against `tubelet train --batch 4` on the same data and seed, for --task cls, mae and clip:
 * - every step's loss (the mean over the global batch) agrees within float tolerance, and the
 *   gradient norms too;
 * - the final weights agree (both processes hold the same ones; rank 0 wrote the checkpoint);
 * - only rank 0 writes metrics (as many lines as the single run) and prints the summary;
 * - --fused-update under mpirun gives the bits of the same two-process run without it;
 * - --accum-steps 2 with batch 1 on two processes is the same as batch 4 on one;
 * - `mpirun -np 2 tubelet eval` equals one process's, also for --label action with the action
 *   list (--train): EK-100's verb, noun and action scores of both averaging modes, each
 *   item's views dealt to both processes (the logits' sums reduced before their softmax).
 * - the same under launchers without MPI (the TCP group): torchrun (itself where one works
 *   here, else its variables), srun's variables with 3 processes, the emulated CUDA device
 *   under torchrun's with 3 (NCCL's stand-in); torchrun's variables without its meeting point
 *   are refused; the emulated device's reductions issued amid the backward's kernels;
 * - --zero (the optimizer state sharded): 3 processes give one process's numbers (cls under
 *   mpirun, mae under srun's variables, clip on the emulated device under torchrun's), the
 *   bits of the run without it under mpirun (alone and with fused updates), and a checkpoint
 *   of 3 processes resumed with 1, 2 and 3 continues the same run;
 * - a failure on one process alone ends every process with an error (mpirun, TCP), no hang.
 * The cases under mpirun are left out, saying so, where it is missing. Under mpirun, ASan's leak
 * check is off for the MPI processes (OpenMPI keeps allocations until exit); the single-process run
 * keeps it. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tb_test.h"
#include "tubelet/rng.h"
#include "tubelet/safetensors.h"

/* As root (CI containers) OpenMPI wants both variables; 2 processes may exceed the cores. */
#define PYTHON TB_TEST_PYTHON
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe"

/* Values of "key": in metrics.jsonl's step lines, in order. */
static int read_field(const char *run, const char *key, double *v, int cap)
{
    char path[4400], pat[64];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    snprintf(pat, sizeof(pat), "\"%s\": ", key);
    char *text = tbt_read(path, NULL);
    int n = 0;
    for (char *p = text; p && (p = strstr(p, "{\"step\": ")) && n < cap; p++) {
        char *f = strstr(p, pat);
        if (f)
            v[n++] = atof(f + strlen(pat));
    }
    free(text);
    return n;
}

/* The key bias's gradient is zero but for rounding (softmax ignores a constant per query),
 * and AdamW turns rounding that differs between the runs into O(lr) steps of either sign: the
 * key part of a whole qkv bias (CLIP's in_proj_bias) is left out of the weights' comparison. */
static int key_bias(const char *name, int64_t k, int64_t n)
{
    static const char tail[] = "attn.in_proj_bias";
    size_t len = strlen(name), k_len = sizeof(tail) - 1;
    return len >= k_len && !strcmp(name + len - k_len, tail) && k >= n / 3 && k < 2 * (n / 3);
}

/* `mpirun -np 2 tubelet train TASK --batch 2` against `tubelet train TASK --batch 4`: the
 * same losses and gradient norms step by step, the same final weights. For mae this is also
 * the masks' determinism: each clip's come from (seed, epoch, sample) whichever process reads
 * it; masks that depended on the process would change the losses far beyond the tolerance. */
static void compare_runs_via(const char *launch, int np, int one_batch, const char *name,
                             const char *task_flags, const char *two_batch, char *ckpt,
                             size_t size)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char *out = NULL, flags[4096], case_one[128], case_two[128], case_w[128];
    char val[4200] = ""; /* --task mae reads no --val */
    if (!strstr(task_flags, "--task mae"))
        snprintf(val, sizeof(val), "--val %s/syn/annotations/EPIC_100_validation.csv", d);
    snprintf(flags, sizeof(flags),
             "--data %s/data --train %s/syn/annotations/EPIC_100_train.csv %s --dim 32 "
             "--depth 2 --heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 --workers 1 "
             "--flip false --log-every 1 --eval-every 0 --epochs 3 --seed 5 %s",
             d, d, val, task_flags);
    snprintf(case_one, sizeof(case_one), "%s: one process, batch %d", name, one_batch);
    snprintf(case_two, sizeof(case_two), "%s: %d processes (%s), %s each", name, np, launch,
             two_batch);
    snprintf(case_w, sizeof(case_w), "%s: final weights", name);
    tbt_case = case_one;
    int rc = tbt_run(&out, 600, "OMP_NUM_THREADS=1 %s train %s --batch %d --out %s/%s-one", t,
                     flags, one_batch, d, name);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    tbt_case = case_two;
    rc = tbt_run(&out, 600, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 %s %s train %s %s "
                 "--out %s/%s-two", launch, t, flags, two_batch, d, name);
    CHECK_MSG(rc == 0, "%s", out);
    char said[64];
    snprintf(said, sizeof(said), "(%d processes, %d clips per step)", np, one_batch);
    CHECK_STR_HAS(out, said);
    const char *first = out ? strstr(out, "train: ") : NULL;
    CHECK_MSG(first && !strstr(first + 1, "train: "), "the summary is printed once: %s", out);
    free(out);

    char one[4300], two[4300];
    snprintf(one, sizeof(one), "%s/%s-one", d, name);
    snprintf(two, sizeof(two), "%s/%s-two", d, name);
    double la[256], lb[256], ga[256], gb[256];
    int na = read_field(one, "loss", la, 256), nb = read_field(two, "loss", lb, 256);
    CHECK_MSG(na > 5 && na == nb, "%d steps on one process, %d on two", na, nb);
    CHECK_EQ(read_field(one, "grad_norm", ga, 256), na);
    CHECK_EQ(read_field(two, "grad_norm", gb, 256), nb);
    for (int i = 0; i < na && i < nb; i++) {
        CHECK_MSG(fabs(la[i] - lb[i]) <= 1e-4 * fabs(la[i]), "step %d: loss %.6f vs %.6f", i + 1,
                  la[i], lb[i]);
        CHECK_MSG(fabs(ga[i] - gb[i]) <= 1e-3 * fabs(ga[i]), "step %d: grad norm %.4f vs %.4f",
                  i + 1, ga[i], gb[i]);
    }

    tbt_case = case_w;
    char pb[4400];
    snprintf(ckpt, size, "%s/last.safetensors", one);
    snprintf(pb, sizeof(pb), "%s/last.safetensors", two);
    struct tb_st_file *fa = NULL, *fb = NULL;
    CHECK_EQ(tb_st_read(&fa, ckpt), 0);
    CHECK_EQ(tb_st_read(&fb, pb), 0);
    int compared = 0;
    for (int i = 0; fa && fb && i < fa->n_tensors; i++) {
        const struct tb_st_tensor *a = &fa->tensors[i], *b = tb_st_find(fb, a->name);
        if (!b || a->dtype != TB_ST_F32)
            continue;
        CHECK_MSG(b->n == a->n, "%s: sizes differ", a->name);
        if (b->n != a->n)
            continue;
        const float *x = a->data, *y = b->data;
        double diff = 0, mag = 0;
        for (int64_t k = 0; k < a->n; k++) {
            if (key_bias(a->name, k, a->n))
                continue;
            diff = fmax(diff, fabs((double)x[k] - y[k]));
            mag = fmax(mag, fabs((double)x[k]));
        }
        CHECK_MSG(diff <= 1e-4 * (mag + 1e-6), "%s: off by %.3g (largest %.3g)", a->name, diff,
                  mag);
        compared++;
    }
    CHECK_MSG(compared > 10, "%d tensors compared", compared);
    tb_st_free(&fa);
    tb_st_free(&fb);
}

static void compare_runs(const char *name, const char *task_flags, const char *two_batch,
                         char *ckpt, size_t size)
{
    compare_runs_via(MPIRUN " -np 2", 2, 4, name, task_flags, two_batch, ckpt, size);
}

/* Under mpirun, --fused-update (each span's mean awaited and applied inside the backward)
 * gives the bits of the same two-process run without it (the whole backward's buckets
 * awaited after it), in every task: the same reductions of the same gradients. With all
 * modes, --zero too, alone and with fused updates: each span updated by one process and its
 * weights sent to the other is the same arithmetic, and the checkpoint's optimizer state,
 * gathered from both, the same bits. */
static void fused_runs(const char *name, const char *task_flags, int all_modes)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char *out = NULL, flags[4096], what[128], pa[4400], pb[4400];
    snprintf(flags, sizeof(flags),
             "--data %s/data --train %s/syn/annotations/EPIC_100_train.csv "
             "--dim 32 --depth 2 --heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 "
             "--workers 1 --flip false --log-every 1 --eval-every 0 --epochs 2 --seed 5 "
             "--batch 2 --clip-grad 0 %s",
             d, d, task_flags);
    const char *mode[4] = {"", "--fused-update", "--zero", "--zero --fused-update"};
    for (int k = 0; k < (all_modes ? 4 : 2); k++) {
        snprintf(what, sizeof(what), "%s: %s on two processes", name, k ? mode[k] : "plain");
        tbt_case = what;
        int rc = tbt_run(&out, 600,
                         "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN
                         " -np 2 %s train %s %s --out %s/%s-fused%d",
                         t, flags, mode[k], d, name, k);
        CHECK_MSG(rc == 0, "%s %s: %s", name, mode[k], out);
        free(out);
        snprintf(pa, sizeof(pa), "%s/%s-fused0", d, name);
        snprintf(pb, sizeof(pb), "%s/%s-fused%d", d, name, k);
        if (k)
            tbt_same_ckpt(pa, pb, what);
    }
}

/* --zero's checkpoint is whole: 3 processes' checkpoint after the first epoch, resumed with 1,
 * 2 and 3 at the same global batch (no --resume-changed: the batch a process may change with
 * their count), continues the uninterrupted run: every later step's loss. */
static void zero_resume(void)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char flags[4096], whole[4400], run[4400], *out = NULL;
    tbt_case = "--zero: a checkpoint of 3 processes resumed with 1, 2 and 3";
    snprintf(flags, sizeof(flags),
             "--data %s/data --train %s/syn/annotations/EPIC_100_train.csv "
             "--dim 32 --depth 2 --heads 2 --patch 16 --tubelet 2 --frames 4 --size 32 "
             "--workers 1 --flip false --log-every 1 --eval-every 0 --seed 5 --zero --epochs 3 "
             "--save-every 1",
             d, d);
    snprintf(whole, sizeof(whole), "%s/zero-3", d);
    int rc = tbt_run(&out, 600, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN
                     " -np 3 %s train %s --batch 2 --out %s", t, flags, whole);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    double want[64], got[64];
    int n_want = read_field(whole, "loss", want, 64);
    /* processes, batch: the same global batch of 6 */
    static const char *const how[3] = {"", MPIRUN " -np 2", MPIRUN " -np 3"};
    static const int batch[3] = {6, 3, 2};
    for (int i = 0; i < 3; i++) {
        snprintf(run, sizeof(run), "%s/zero-3-on-%d", d, i + 1);
        tbt_run(NULL, 30, "rm -rf %s && mkdir -p %s && cp %s/config.txt %s/ && "
                "cp %s/checkpoint_00001.safetensors %s/last.safetensors", run, run, whole, run,
                whole, run);
        rc = tbt_run(&out, 600, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 %s %s train %s "
                     "--batch %d --out %s", how[i], t, flags, batch[i], run);
        CHECK_MSG(rc == 0 && out && strstr(out, "resuming from"), "%d processes: %s", i + 1,
                  out);
        free(out);
        int n = read_field(run, "loss", got, 64);
        CHECK_MSG(n > 2 && n < n_want, "%d steps after the resume, %d in all", n, n_want);
        for (int s = 0; s < n && n < n_want; s++) {
            double w = want[n_want - n + s];
            CHECK_MSG(fabs(w - got[s]) <= 1e-4 * fabs(w), "step %d: loss %.6f uninterrupted, "
                      "%.6f resumed on %d processes", n_want - n + s + 1, w, got[s], i + 1);
        }
    }
}

/* A failure on one process only (its annotation file missing, found after the processes met)
 * ends every process with an error, under MPI and over TCP, never a hang: the failed one
 * leaves MPI unfinalised (mpirun then ends the job) or closes its TCP links (the others' next
 * collective fails, naming it). */
static void lone_failure(int mpi)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char flags[4096], *out = NULL;
    tbt_case = mpi ? "one process fails (mpirun)" : "one process fails (torchrun's variables)";
    snprintf(flags, sizeof(flags),
             "--data %s/data --dim 32 --depth 1 --heads 2 --patch 16 --frames 4 --size 32 "
             "--workers 1 --epochs 2 --batch 2 --out %s/lone-failure", d, d);
    int rc;
    if (mpi)
        rc = tbt_run(&out, 300, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN
                     " -np 1 %s train %s --train %s/syn/annotations/EPIC_100_train.csv : -np 1 "
                     "%s train %s --train %s/nonexistent.csv", t, flags, d, t, flags, d);
    else
        rc = tbt_run(&out, 300, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 sh "
                     TB_SOURCE_DIR "/tests/launch_env.sh 2 torchrun sh -c 'if [ $RANK = 1 ]; "
                     "then a=%s/nonexistent.csv; else a=%s/syn/annotations/EPIC_100_train.csv; "
                     "fi; exec %s train %s --train $a'", d, d, t, flags);
    CHECK_MSG(rc != 0 && rc != 124 && rc != 137 && out && strstr(out, "nonexistent.csv"),
              "exit %d (124, 137: a hang ended by the test's timeout): %s", rc, out);
    free(out);
}

/* The gradients' reductions overlap the backward on the emulated device: an all-reduce issued
 * after kernels launched since the previous one, with no stream waiting in between (emulate_
 * nccl.h counts them), so a GPU reduces a finished span while the backward goes on. */
static void overlap_check(const char *launch)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char *out = NULL;
    tbt_case = "the reductions overlap the backward (cuda-emu)";
    int rc = tbt_run(&out, 600,
                     "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 TBC_EMU_REPORT=1 %s %s train "
                     "--backend cuda-emu --precision fp32 --data %s/data --train "
                     "%s/syn/annotations/EPIC_100_train.csv --dim 32 --depth 2 --heads 2 "
                     "--patch 16 --tubelet 2 --frames 4 --size 32 --workers 1 --epochs 1 "
                     "--batch 2 --out %s/overlap",
                     launch, t, d, d, d);
    CHECK_MSG(rc == 0, "%s", out);
    int ranks = 0;
    for (const char *p = out; p && (p = strstr(p, "emulate: NCCL: rank ")); p++) {
        int r = -1;
        long n = 0, k = 0;
        if (sscanf(p, "emulate: NCCL: rank %d: %ld all-reduces, %ld issued amid", &r, &n, &k) ==
            3) {
            ranks++;
            CHECK_MSG(n >= 8 && k * 2 >= n,
                      "rank %d: %ld all-reduces, only %ld issued amid "
                      "kernels",
                      r, n, k);
        }
    }
    CHECK_MSG(ranks == 2, "%d ranks reported their reductions: %s", ranks, out);
    free(out);
}

/* A torchrun that works here: bench/venv's, else the test Python's PyTorch (Debian's 1.13 on
 * Python 3.11 needs its output redirected and teed: -r 1 -t 1), else none (""). */
static const char *find_torchrun(void)
{
    static char cmd[4400];
    const char *d = tbt_dir();
    const char *cands[2][2] = {
        {TB_SOURCE_DIR "/bench/venv/bin/torchrun --standalone", ""},
        {PYTHON " -m torch.distributed.run --standalone", " -r 1 -t 1"},
    };
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd), "%s%s --log_dir %s/torchrun-logs --nproc_per_node", cands[i][0],
                 cands[i][1], d);
        char *out = NULL;
        int rc = tbt_run(&out, 120, "%s 2 --no_python sh -c 'echo rank=$RANK'", cmd);
        int ok = rc == 0 && out && strstr(out, "rank=0") && strstr(out, "rank=1");
        free(out);
        if (ok)
            return cmd;
    }
    return "";
}

/* Processes that torchrun or srun started without MPI give one process's numbers at the
 * global batch (the TCP group); CPU training under torchrun without its meeting point is a
 * refusal, never two lone runs. */
static void tcp_launches(void)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char launch[4600], ckpt[4400];
    const char *torchrun = find_torchrun();
    if (torchrun[0]) {
        fprintf(stderr, "torchrun: %s\n", torchrun);
        snprintf(launch, sizeof(launch), "%s 2 --no_python", torchrun);
    } else {
        fprintf(stderr, "no working torchrun here: its variables set by tests/launch_env.sh\n");
        snprintf(launch, sizeof(launch), "sh " TB_SOURCE_DIR "/tests/launch_env.sh 2 torchrun");
    }
    compare_runs_via(launch, 2, 4, "cls-torchrun", "", "--batch 2", ckpt, sizeof(ckpt));
    if (tbt_have_backend("cuda-emu"))
        compare_runs_via(launch, 2, 4, "cls-cuda-emu-torchrun-zero",
                         "--backend cuda-emu --precision fp32", "--batch 2 --zero", ckpt,
                         sizeof(ckpt));
    compare_runs_via("sh " TB_SOURCE_DIR "/tests/launch_env.sh 3 srun", 3, 6, "mae-srun3-zero",
                     "--task mae --mask-ratio 0.75 --dec-dim 32 --dec-depth 1 --dec-heads 2 "
                     "--beta2 0.95",
                     "--batch 2 --zero", ckpt, sizeof(ckpt));
    if (tbt_have_backend("cuda-emu"))
        overlap_check("sh " TB_SOURCE_DIR "/tests/launch_env.sh 2 torchrun");
    if (tbt_have_backend("cuda-emu"))
        compare_runs_via("sh " TB_SOURCE_DIR "/tests/launch_env.sh 3 torchrun", 3, 6,
                         "clip-cuda-emu-torchrun3-zero",
                         "--backend cuda-emu --precision fp32 "
                         "--task clip --embed 16 --text-width 32 --text-heads 2 --text-depth 1 "
                         "--context 12",
                         "--batch 2 --zero", ckpt, sizeof(ckpt));

    lone_failure(0);

    tbt_case = "torchrun's variables without its meeting point";
    char *out = NULL;
    int rc = tbt_run(&out, 120,
                     "RANK=1 WORLD_SIZE=2 %s train --data %s/data --train "
                     "%s/syn/annotations/EPIC_100_train.csv --dim 32 --depth 1 --heads 2 "
                     "--patch 16 --frames 4 --size 32 --epochs 1 --out %s/lone",
                     t, d, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "MASTER_ADDR") && !tbt_exists(tbt_path("lone")),
              "exit %d: %s", rc, out);
    free(out);
}

int main(void)
{
    tbt_begin("dist");
    char *out = NULL;
    const char *t = tbt_tubelet(), *d = tbt_dir();
    int rc = tbt_run(&out, 300,
                     "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s/data --short-side 48 --preset "
                     "veryfast",
                     t, d, t, d, d);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);

    /* Launchers without MPI: the processes meet over TCP at MASTER_ADDR:MASTER_PORT. */
    tcp_launches();

    if (tbt_run(&out, 30, "mpirun --version") != 0) {
        fprintf(stderr, "no mpirun (OpenMPI): the cases under mpirun were not run\n");
        free(out);
        TBT_EXIT();
    }
    free(out);
    /* An MPI that cannot start two processes here (no shared memory, no loopback) is the
     * machine's problem, not tubelet's: said, and its cases left out. */
    if (tbt_run(&out, 60, MPIRUN " -np 2 true") != 0) {
        fprintf(stderr, "mpirun cannot start 2 processes here: %s\nthe cases under mpirun were "
                "not run\n", out ? out : "");
        free(out);
        TBT_EXIT();
    }
    free(out);

    char pa[4400], pm[4400];
    compare_runs("cls", "", "--batch 2", pa, sizeof(pa));
    /* gradient accumulation: 2 micro-batches of 1 clip on each process, reduced once */
    char pq[4400];
    compare_runs("cls-accum", "", "--batch 1 --accum-steps 2", pq, sizeof(pq));
    compare_runs("mae",
                 "--task mae --mask-ratio 0.75 --dec-dim 32 --dec-depth 1 --dec-heads 2 "
                 "--beta2 0.95",
                 "--batch 2", pm, sizeof(pm));
    /* clip: the loss over both processes' pairs (gathered), each backpropagating its own */
    char pc[4400];
    compare_runs("clip",
                 "--task clip --embed 16 --text-width 32 --text-heads 2 --text-depth 1 "
                 "--context 12",
                 "--batch 2", pc, sizeof(pc));

    /* The emulated CUDA device (fp32: auto would be bf16 there): its reductions on the communication stream (MPI's, on the
     * device memory, after an event on the compute stream; emulate_rt.h runs the newer stream
     * first, so a missing wait reads unfinished gradients), the clip features' all-gather. */
    if (tbt_have_backend("cuda-emu")) {
        char pe[4400];
        compare_runs("cls-cuda-emu", "--backend cuda-emu --precision fp32", "--batch 2", pe,
                     sizeof(pe));
        compare_runs("clip-cuda-emu", "--backend cuda-emu --precision fp32 --task clip --embed 16 "
                     "--text-width 32 --text-heads 2 --text-depth 1 --context 12", "--batch 2", pe,
                     sizeof(pe));
    } else {
        fprintf(stderr, "no cuda-emu backend in this build: its data parallelism not run\n");
    }
    lone_failure(1);
    char pz[4400];
    compare_runs_via(MPIRUN " -np 3", 3, 6, "cls-mpi3", "", "--batch 2", pz, sizeof(pz));
    compare_runs_via(MPIRUN " -np 3", 3, 6, "cls-mpi3-zero", "", "--batch 2 --zero", pz,
                     sizeof(pz));
    zero_resume();
    fused_runs("cls", "", 1);
    fused_runs("mae", "--task mae --mask-ratio 0.75 --dec-dim 32 --dec-depth 1 --dec-heads 2", 0);
    fused_runs("clip",
               "--task clip --embed 16 --text-width 32 --text-heads 2 --text-depth 1 "
               "--context 12",
               0);

    /* Evaluation under mpirun: each process takes its share of the clips (the shards padded
     * to equal length, the padding not counted), and the result is one process's. */
    tbt_case = "sharded evaluation";
    char *e1 = NULL, *e2 = NULL;
    char evflags[4096];
    /* The validation items but the last: an odd number, so one shard is padded. */
    tbt_run(NULL, 30,
            "head -n $(($(wc -l < %s/syn/annotations/EPIC_100_validation.csv) - 1)) "
            "%s/syn/annotations/EPIC_100_validation.csv > %s/val_odd.csv",
            d, d, d);
    snprintf(evflags, sizeof(evflags),
             "eval --ckpt %s --data %s/data --val %s/val_odd.csv "
             "--batch 3 --views 3 --workers 1",
             pa, d, d);
    rc = tbt_run(&e1, 300, "OMP_NUM_THREADS=1 %s %s", t, evflags);
    CHECK_MSG(rc == 0, "%s", e1);
    rc = tbt_run(&e2, 300, "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN " -np 2 %s %s",
                 t, evflags);
    CHECK_MSG(rc == 0, "%s", e2);
    double v1[4] = {-1, -1, -1, -1}, v2[4] = {-2, -2, -2, -2};
    const char *keys[4] = {"\"items\": ", "\"top1\": ", "\"top5\": ", "\"loss\": "};
    for (int k = 0; k < 4; k++) {
        const char *p1 = e1 ? strstr(e1, keys[k]) : NULL, *p2 = e2 ? strstr(e2, keys[k]) : NULL;
        if (p1)
            v1[k] = atof(p1 + strlen(keys[k]));
        if (p2)
            v2[k] = atof(p2 + strlen(keys[k]));
        CHECK_MSG(fabs(v1[k] - v2[k]) <= 1e-6 * (fabs(v1[k]) + 1), "%s one process %g, two %g",
                  keys[k], v1[k], v2[k]);
    }
    CHECK_MSG(v1[0] >= 3 && (int64_t)v1[0] % 2 == 1,
              "%g items: the test wants an odd number "
              "(a padded shard)",
              v1[0]);
    const char *once = e2 ? strstr(e2, "\"ckpt\"") : NULL;
    CHECK_MSG(once && !strstr(once + 1, "\"ckpt\""), "the result is printed once: %s", e2);
    free(e1);
    free(e2);

    /* --label action, 3 views x 3 crops: the loader deals an item's 9 clips out to both
     * processes, so each holds part of every item's sums of logits and probabilities; the
     * softmax of the logits' mean must wait for the reduction. The items: the training ones
     * but the last (learnt, and an odd number: a padded shard), numbered with the training
     * set as the run numbered them. Then the same with a random head 10 times the usual
     * scale, whose views disagree more. (A softmax taken before the reduction moves the
     * logits' loss and scores of both.) */
    tbt_case = "sharded evaluation: label action, both modes";
    char train[4400], ckpt[2][4400];
    snprintf(train, sizeof(train), "%s/syn/annotations/EPIC_100_train.csv", d);
    tbt_run(NULL, 30, "head -n $(($(wc -l < %s) - 1)) %s > %s/train_odd.csv", train, train, d);
    rc = tbt_run(&e1, 600,
                 "OMP_NUM_THREADS=1 %s train --data %s/data --train %s --val "
                 "%s/train_odd.csv --dim 32 --depth 2 --heads 2 --patch 16 --tubelet 2 --frames 4 "
                 "--size 32 --workers 1 --flip false --eval-every 0 --epochs 20 --lr 0.005 "
                 "--label action --batch 4 --out %s/act-one",
                 t, d, train, d, d);
    CHECK_MSG(rc == 0, "%s", e1);
    free(e1);
    snprintf(ckpt[0], sizeof(ckpt[0]), "%s/act-one/last.safetensors", d);
    snprintf(ckpt[1], sizeof(ckpt[1]), "%s/act-random-head.safetensors", d);
    struct tb_st_file *f = NULL;
    CHECK_EQ(tb_st_read(&f, ckpt[0]), 0);
    struct tb_st_tensor *head = NULL;
    for (int i = 0; f && i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, "head.weight"))
            head = &f->tensors[i];
    CHECK(head && head->dtype == TB_ST_F32);
    if (head && head->dtype == TB_ST_F32) {
        tb_rng g;
        tb_rng_init(&g, 7, 3);
        for (int64_t k = 0; k < head->n; k++)
            ((float *)head->data)[k] = (float)(10 * (tb_rng_uniform(&g) - 0.5));
        CHECK_EQ(tb_st_write(ckpt[1], f->tensors, f->n_tensors, f->metadata), 0);
    }
    tb_st_free(&f);
    static const char *const level[3] = {"verb", "noun", "action"};
    static const char *const what[3] = {
        "\"%s_top1%s\": ", "\"%s_top5%s\": ", "\"mean_class_%s%s\": "};
    for (int h = 0; h < 2; h++) {
        tbt_case = h ? "sharded evaluation: label action, a random head"
                     : "sharded evaluation: label action, both modes";
        snprintf(evflags, sizeof(evflags),
                 "eval --ckpt %s --data %s/data --val %s/train_odd.csv "
                 "--train %s --batch 3 --views 3 --crops 3 --workers 1",
                 ckpt[h], d, d, train);
        rc = tbt_run(&e1, 300, "OMP_NUM_THREADS=1 %s %s", t, evflags);
        CHECK_MSG(rc == 0, "%s", e1);
        rc = tbt_run(&e2, 300,
                     "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 " MPIRUN " -np 2 "
                     "%s %s",
                     t, evflags);
        CHECK_MSG(rc == 0, "%s", e2);
        for (int k = 0; k < 23; k++) {
            char key[64];
            if (k < 18)
                snprintf(key, sizeof(key), what[k % 3], level[k / 3 % 3], k < 9 ? "" : "_logits");
            else
                snprintf(key, sizeof(key), "%s", k < 22 ? keys[k - 18] : "\"loss_logits\": ");
            const char *p1 = e1 ? strstr(e1, key) : NULL, *p2 = e2 ? strstr(e2, key) : NULL;
            double a = p1 ? atof(p1 + strlen(key)) : NAN, b = p2 ? atof(p2 + strlen(key)) : NAN;
            CHECK_MSG(fabs(a - b) <= 1e-6, "%s one process %g, two %g", key, a, b);
        }
        free(e1);
        free(e2);
    }
    TBT_EXIT();
}

"""bench/python_loader.py - clips/s and peak RSS of tubelet.Loader (NumPy views) and of
tubelet.torch.Loader (tensors) against `tubelet bench-load` at equal workers, on the same
chunks and workload (W1: 4 frames, W2: 16 frames; random-resized-crop to 224, random flips,
segment sampling, shuffled), interleaved rounds, one process per measurement. Not a test.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_loader.py --tubelet build/tubelet \
        --data data/chunks --ann data/synth/annotations/EPIC_100_train.csv --workers 2 \
        --clips 2000 --rounds 3
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def child(kind, root, ann, workload, workers, batch, clips):
    """One measurement, in this (fresh) process; prints one JSON line."""
    import tubelet
    frames = 16 if workload == "w2" else 4
    opts = dict(frames=frames, size=224, sampler="segments", crop="rrc", flip="random",
                batch=batch, workers=workers, prefetch=2, seed=0, shuffle=True,
                max_failure_rate=0.05, map_actions=False)
    if kind == "torch":
        import tubelet.torch
        loader = tubelet.torch.Loader(root, ann, **opts)
    else:
        loader = tubelet.Loader(root, ann, **opts)
    n, epoch, t0 = 0, 0, time.monotonic()
    with loader:
        while n < clips:
            loader.set_epoch(epoch)
            for b in loader:
                n += len(b["index"])
                if n >= clips:
                    break
            epoch += 1
        secs = time.monotonic() - t0
    print(json.dumps({"loader": f"python-{kind}", "clips": n, "seconds": secs,
                      "clips_per_s": n / secs,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tubelet", required=True)
    ap.add_argument("--data", "--root", dest="root", required=True)
    ap.add_argument("--ann", required=True)
    ap.add_argument("--workload", default="w1", choices=["w1", "w2"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clips", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", default="")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.root, a.ann, a.workload, a.workers, a.batch, a.clips)
    runs = {"c": [a.tubelet, "bench-load", "--data", a.root, "--ann", a.ann, "--workload",
                  a.workload, "--workers", str(a.workers), "--batch", str(a.batch), "--clips",
                  str(a.clips)]}
    for kind in ("numpy", "torch"):
        runs[kind] = [sys.executable, __file__, "--child", kind, "--tubelet", a.tubelet,
                      "--data", a.root, "--ann", a.ann, "--workload", a.workload, "--workers",
                      str(a.workers), "--batch", str(a.batch), "--clips", str(a.clips)]
    res = {k: [] for k in runs}
    for _ in range(a.rounds):
        for k, cmd in runs.items():
            out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True,
                                 env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
            res[k].append(json.loads(out.decode().strip().splitlines()[-1]))
    print(f"{a.workload}, {a.workers} workers, batch {a.batch}, {a.clips} clips, "
          f"{a.rounds} interleaved rounds (medians):")
    for k in runs:
        v = statistics.median(r["clips_per_s"] for r in res[k])
        rss = statistics.median(r["peak_rss_mb"] for r in res[k])
        ratios = [r["clips_per_s"] / q["clips_per_s"] for r, q in zip(res[k], res["c"])]
        print(f"  {k:6s} {v:8.1f} clips/s  x{statistics.median(ratios):.3f} of bench-load "
              f"(per-round ratio median)  peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main()

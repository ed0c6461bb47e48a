"""Two builds' loader, side by side (docs/PERFORMANCE.md, "Encodings at 568x320"): PAIRS
interleaved pairs of `tubelet bench-load` from the old and the new build (the order alternates
each pair, the seed is the pair's number), clips per CPU-second of each run from the child's own
rusage (user + system: other jobs on a shared machine count little, and it is finer than
bench-load's whole-percent CPU), each pair's ratio new / old and the medians. For a change to
the reader or loader on one encoding and workload; run it on two, one with long and one with
short keyframe intervals, since per-clip and per-frame costs weigh differently on each.
Usage: python3 bench/load_pairs.py NEW_TUBELET OLD_TUBELET DATA ANN w1|w2 [PAIRS=5] [WORKERS=2]
"""
import json
import resource
import statistics
import subprocess
import sys


def run(binary, data, ann, workload, workers, seed):
    clips = "1600" if workload == "w1" else "480"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([binary, "bench-load", "--data", data, "--ann", ann, "--workload",
                          workload, "--workers", workers, "--batch", "16", "--clips", clips,
                          "--seed", str(seed)], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(out.stdout)["clips"] / cpu


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    new, old, data, ann, workload = sys.argv[1:6]
    pairs = int(sys.argv[6]) if len(sys.argv) > 6 else 5
    workers = sys.argv[7] if len(sys.argv) > 7 else "2"
    got = {new: [], old: []}
    for i in range(pairs):
        for binary in (old, new) if i % 2 == 0 else (new, old):
            got[binary].append(run(binary, data, ann, workload, workers, i + 1))
        print(f"pair {i + 1}: old {got[old][-1]:.1f}, new {got[new][-1]:.1f} clips per CPU-s",
              file=sys.stderr)
    ratios = [n / o for n, o in zip(got[new], got[old])]
    print(json.dumps({"workload": workload, "data": data, "pairs": pairs,
                      "old_clips_per_cpu_s": round(statistics.median(got[old]), 1),
                      "new_clips_per_cpu_s": round(statistics.median(got[new]), 1),
                      "ratio_median": round(statistics.median(ratios), 3),
                      "ratios": [round(r, 3) for r in ratios]}))


if __name__ == "__main__":
    main()

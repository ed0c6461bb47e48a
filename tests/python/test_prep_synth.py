"""tubelet.synth and tubelet.prep against the tubelet program: the same files byte for byte
for the same settings (fps="source" too, each video at the rate ffprobe reports); a rerun skips
finished chunks; a missing source raises or is reported per source; Ctrl-C cancels a prep
promptly, keeping finished chunks and leaving no thread."""
import filecmp
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

import tubelet


def tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, fs in os.walk(root) for f in fs)


def test_synth_equals_tubelet_synth(dataset, tmp_path):
    # The session's dataset was made by `tubelet synth --videos 2 --seconds 10 --size 160x120
    # --preset veryfast --threads 1` (seed 0).
    res = tubelet.synth(tmp_path / "s", videos=2, seconds=10, size=(120, 160),
                        preset="veryfast", threads=1)
    ref = dataset["dir"] / "s"
    assert tree(tmp_path / "s") == tree(ref)
    for f in tree(ref):
        assert filecmp.cmp(tmp_path / "s" / f, ref / f, shallow=False), f
    assert res["videos"] == 2 and res["train_videos"] + res["val_videos"] == 2
    n_train = len(open(dataset["train_csv"]).read().splitlines()) - 1
    assert res["train_actions"] == n_train


def test_prep_equals_tubelet_prep(dataset, tmp_path):
    out = tmp_path / "chunks"
    res = tubelet.prep(dataset["videos"], out, chunk_seconds=4, short_side=96,
                       preset="veryfast", threads=1)
    ref = dataset["root"]
    assert tree(out) == tree(ref)
    for f in tree(ref):
        assert filecmp.cmp(out / f, os.path.join(ref, f), shallow=False), f
    assert [r["name"] for r in res] == sorted(os.listdir(ref))
    for r in res:
        assert r["error"] is None and r["chunks"] == 3 and r["chunks_skipped"] == 0
        assert r["frames"] == tubelet.probe(out / r["name"])["frames"]
        assert (r["height"], r["width"]) == tubelet.VideoReader(out / r["name"]).size
    again = tubelet.prep(dataset["videos"], out, chunk_seconds=4, short_side=96,
                         preset="veryfast", threads=1)
    assert [r["chunks_skipped"] for r in again] == [3, 3]


def test_prep_without_bframes(dataset, tubelet_bin, tmp_path):
    # bframes=False is `tubelet prep --no-bframes`: the same files byte for byte
    src = dataset["videos"][:1]
    tubelet.prep(src, tmp_path / "py", chunk_seconds=4, short_side=96, preset="veryfast",
                 threads=1, bframes=False)
    subprocess.run([tubelet_bin, "prep", *src, "--out", str(tmp_path / "cli"), "--chunk-seconds",
                    "4", "--short-side", "96", "--preset", "veryfast", "--threads", "1",
                    "--no-bframes"], check=True, capture_output=True)
    assert tree(tmp_path / "py") == tree(tmp_path / "cli")
    for f in tree(tmp_path / "cli"):
        assert filecmp.cmp(tmp_path / "py" / f, tmp_path / "cli" / f, shallow=False), f
    # and not the files made with B-frames: the index names the setting
    idx = os.path.join(os.path.basename(src[0]), "video.idx")
    assert not filecmp.cmp(tmp_path / "py" / idx, os.path.join(dataset["root"], idx),
                           shallow=False)


def test_prep_missing_source(dataset, tmp_path):
    missing = str(tmp_path / "gone.mp4")
    with pytest.raises(tubelet.NotFoundError) as e:
        tubelet.prep([dataset["videos"][0], missing], tmp_path / "out", chunk_seconds=4,
                     short_side=96, preset="veryfast", threads=1)
    assert missing in str(e.value)
    assert os.path.exists(tmp_path / "out" / "P01_01.mp4" / "video.idx")  # the other is done
    res = tubelet.prep(missing, tmp_path / "out", check=False)
    assert len(res) == 1 and missing in res[0]["error"]


def test_ctrl_c_cancels_prep(dataset, tmp_path):
    tasks = len(os.listdir("/proc/self/task"))
    sent = {}

    def interrupt():
        time.sleep(0.2)
        sent["t"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    out = tmp_path / "out"
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        # Slow settings, so that it is still running when the signal comes.
        for i in range(40):
            tubelet.prep(dataset["videos"], out / str(i), chunk_seconds=1, short_side=0, crf=0,
                         preset="slow", threads=1)
    caught = time.monotonic()
    assert "t" in sent and caught - sent["t"] < 2.0, caught - t0
    for _ in range(100):
        if len(os.listdir("/proc/self/task")) == tasks:
            break
        time.sleep(0.01)
    assert len(os.listdir("/proc/self/task")) == tasks
    # It stopped inside a prep: a video is left without its whole index. What was finished is
    # complete: every chunk index has its chunk.
    last = max(os.listdir(out), key=int)
    assert not all(os.path.exists(out / last / v / "video.idx") for v in ("P01_01.mp4",
                                                                          "P01_02.mp4"))
    for f in tree(out):
        if f.endswith(".idx") and not f.endswith("video.idx"):
            assert os.path.exists(out / (f[:-4] + ".mp4")), f


def test_prep_with_other_settings_is_refused(dataset, tmp_path):
    # As `tubelet prep`: a finished video keeps its settings unless overwrite=True.
    src = dataset["videos"][:1]
    out = tmp_path / "out"
    tubelet.prep(src, out, chunk_seconds=4, short_side=96, preset="veryfast", threads=1)
    with pytest.raises(tubelet.InvalidError) as e:
        tubelet.prep(src, out, chunk_seconds=4, short_side=64, preset="veryfast", threads=1)
    assert "was prepared with --short-side 96, this run asks --short-side 64" in str(e.value)
    assert "--overwrite" in str(e.value)
    res = tubelet.prep(src, out, chunk_seconds=4, short_side=64, preset="veryfast", threads=1,
                       overwrite=True)
    assert res[0]["error"] is None and res[0]["height"] == 64


def test_prep_source_fps(tubelet_bin, tmp_path):
    # fps="source" is `tubelet prep --fps source`: the same files byte for byte, each video at
    # the rate ffprobe reports (r_frame_rate, constant-rate sources) with as many frames.
    if not shutil.which("ffmpeg") or not shutil.which("ffprobe"):
        pytest.skip("the ffmpeg and ffprobe tools are missing")
    srcs = []
    for name, rate in (("r25.mp4", "25"), ("ntsc.mp4", "30000/1001")):
        srcs.append(str(tmp_path / name))
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                        f"testsrc2=size=160x120:rate={rate}", "-t", "2", "-c:v", "libx264",
                        "-pix_fmt", "yuv420p", srcs[-1]], check=True)
    flags = dict(chunk_seconds=15, short_side=96, preset="veryfast", threads=1)
    res = tubelet.prep(srcs, tmp_path / "py", fps="source", **flags)
    subprocess.run([tubelet_bin, "prep", *srcs, "--out", str(tmp_path / "cli"), "--fps",
                    "source", "--chunk-seconds", "15", "--short-side", "96", "--preset",
                    "veryfast", "--threads", "1"], check=True, capture_output=True)
    assert tree(tmp_path / "py") == tree(tmp_path / "cli")
    for f in tree(tmp_path / "cli"):
        assert filecmp.cmp(tmp_path / "py" / f, tmp_path / "cli" / f, shallow=False), f
    rates = []
    for src, r in zip(srcs, res):
        probed = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0",
                                 "-count_frames", "-show_entries",
                                 "stream=r_frame_rate,nb_read_frames", "-of", "csv=p=0", src],
                                check=True, capture_output=True, text=True).stdout.split(",")
        rates.append(tuple(int(x) for x in probed[0].split("/")))
        assert tubelet.probe(tmp_path / "py" / r["name"])["fps"] == rates[-1]
        assert r["frames"] == int(probed[1])
    # 1 s is no whole number of frames at NTSC's rate: a video longer than one chunk is
    # refused, named, with a length that is (the rate's denominator in seconds)
    with pytest.raises(tubelet.InvalidError) as e:
        tubelet.prep(srcs[1], tmp_path / "py1", fps="source", **dict(flags, chunk_seconds=1))
    assert f"{srcs[1]}: longer than one 1 s chunk" in str(e.value)
    assert f"give --chunk-seconds {rates[1][1]} " in str(e.value)
    with pytest.raises(ValueError, match="'source'"):
        tubelet.prep(srcs[0], tmp_path / "bad", fps="src")

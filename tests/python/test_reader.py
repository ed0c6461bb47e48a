"""tubelet.VideoReader and tubelet.probe against the tubelet program: get_batch equals `tubelet
frames` byte for byte in every crop mode, on prepared videos and plain files; odd-sized frames
and crops equal the ffmpeg tool's bytes; probe equals `tubelet probe`; errors carry the
library's messages; the GIL is released while decoding."""
import json
import os
import shutil
import threading
import time

import numpy as np
import pytest

import tubelet
from conftest import run

# Out of order, repeated, across both chunk boundaries (120, 240) of a prepared video.
FRAMES = [3, 119, 120, 121, 119, 250, 0, 299]


def cli_frames(tubelet_bin, tmp_path, path, frames, args):
    out = tmp_path / "ref.raw"
    run([tubelet_bin, "frames", path, "--frames", ",".join(map(str, frames)), "--out",
         str(out), *args])
    return out.read_bytes()


# (get_batch keyword arguments, the `tubelet frames` flags that mean the same)
CASES = [
    ({}, []),
    ({"size": (48, 64)}, ["--size", "64x48"]),
    ({"crop": "center"}, ["--crop-mode", "center"]),
    ({"crop": "center", "size": 56, "flip": True}, ["--crop-mode", "center", "--size", "56x56",
                                                    "--flip"]),
    ({"crop": "rrc", "seed": 0}, ["--crop-mode", "rrc", "--seed", "0"]),
    ({"crop": "rrc", "seed": 11, "size": (40, 72)}, ["--crop-mode", "rrc", "--seed", "11",
                                                      "--size", "72x40"]),
    ({"crop": "random_resized", "seed": 7, "flip": True}, ["--crop-mode", "rrc", "--seed", "7",
                                                            "--flip"]),
    ({"crop": "multiscale", "seed": 3}, ["--crop-mode", "multiscale", "--seed", "3"]),
    ({"crop": "multiscale", "seed": 4, "size": 32}, ["--crop-mode", "multiscale", "--seed", "4",
                                                      "--size", "32x32"]),
    ({"crop": (10, 6, 50, 40)}, ["--crop", "10,6,50,40"]),
    ({"crop": (10, 6, 50, 40), "size": (20, 30), "flip": True},
     ["--crop", "10,6,50,40", "--size", "30x20", "--flip"]),
]


@pytest.mark.parametrize("kind", ["prepared", "plain"])
@pytest.mark.parametrize("kwargs,flags", CASES, ids=[" ".join(c[1]) or "none" for c in CASES])
def test_get_batch_equals_tubelet_frames(dataset, tubelet_bin, tmp_path, kind, kwargs, flags):
    path = dataset["prepared"][0] if kind == "prepared" else dataset["videos"][1]
    vr = tubelet.VideoReader(path)
    got = vr.get_batch(FRAMES, **kwargs)
    ref = cli_frames(tubelet_bin, tmp_path, path, FRAMES, flags)
    assert got.dtype == np.uint8 and got.ndim == 4 and got.shape[0] == len(FRAMES)
    assert got.shape[3] == 3 and got.flags["C_CONTIGUOUS"]
    assert got.nbytes == len(ref)
    assert got.tobytes() == ref


# (size, pixel format, codec, log2 of the chroma subsampling across and down)
ODD = [("321x177", "yuv420p", ["-c:v", "ffv1"], 1, 1),
       ("177x321", "yuv422p10le", ["-c:v", "ffv1"], 1, 0),
       ("323x181", "yuvj420p", ["-c:v", "mjpeg", "-q:v", "3"], 1, 1)]


def ffmpeg_rgb(path, frames, filters=""):
    sel = "select=" + "+".join(f"eq(n\\,{f})" for f in sorted(set(frames)))
    cmd = ["ffmpeg", "-nostdin", "-v", "error", "-i", path, "-vf",
           sel + ("," + filters if filters else ""), "-fps_mode", "passthrough", "-f",
           "rawvideo", "-pix_fmt", "rgb24", "-"]
    return run(cmd)[1]


@pytest.mark.skipif(not shutil.which("ffmpeg"), reason="the ffmpeg tool is missing")
@pytest.mark.parametrize("size,pix_fmt,codec,lw,lh", ODD, ids=[o[1] for o in ODD])
def test_odd_sizes_equal_ffmpeg(tmp_path, size, pix_fmt, codec, lw, lh):
    path = str(tmp_path / ("odd.avi" if "mjpeg" in codec else "odd.mkv"))
    run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
         f"testsrc=size={size}:rate=25", "-t", "1", "-pix_fmt", pix_fmt, *codec, path])
    w, h = (int(v) for v in size.split("x"))
    vr = tubelet.VideoReader(path)
    assert vr.size == (h, w)
    frames = [3, 10, 24]
    assert vr.get_batch(frames).tobytes() == ffmpeg_rgb(path, frames)
    assert vr[-1].tobytes() == ffmpeg_rgb(path, [len(vr) - 1])
    # A crop inside the frame: its corner moves onto the chroma grid, its size stays.
    x, y, cw, ch = 13, 7, (w - 40) | 1, (h - 30) | 1
    gx, gy = x >> lw << lw, y >> lh << lh
    got = vr.get_batch(frames, crop=(x, y, cw, ch))
    assert got.shape == (3, ch, cw, 3)
    assert got.tobytes() == ffmpeg_rgb(path, frames, f"crop={cw}:{ch}:{gx}:{gy}:exact=1")


def test_numpy_frames_and_reader_properties(dataset, tubelet_bin):
    path = dataset["prepared"][1]
    vr = tubelet.VideoReader(path)
    info = json.loads(run([tubelet_bin, "probe", path])[1])
    assert len(vr) == vr.frame_count == info["frames"]
    assert vr.size == (info["height"], info["width"])
    num, den = (int(x) for x in info["fps"].split("/"))
    assert vr.rate == (num, den) and vr.fps == pytest.approx(num / den)
    a = vr.get_batch(np.array(FRAMES, dtype=np.int32), crop="center")
    b = vr.get_batch(FRAMES, crop="center")
    assert np.array_equal(a, b)
    # Each frame of a batch is that frame read alone.
    for i, f in enumerate(FRAMES[:4]):
        assert np.array_equal(vr.get_batch([f], crop="center")[0], b[i])


def test_indexing_a_frame(dataset, tubelet_bin, tmp_path):
    vr = tubelet.VideoReader(dataset["prepared"][0])
    n = len(vr)
    ref = cli_frames(tubelet_bin, tmp_path, dataset["prepared"][0], [n - 1], [])
    assert vr[-1].shape == vr.size + (3,) and vr[-1].tobytes() == ref
    assert np.array_equal(vr[n - 1], vr[-1])
    assert np.array_equal(vr[130], vr.get_batch([130])[0])
    with pytest.raises(IndexError):
        vr[n]
    with pytest.raises(IndexError):
        vr[-n - 1]
    assert sum(1 for _ in vr) == n  # iteration stops at the end


def test_negative_frames_count_from_the_end(dataset):
    vr = tubelet.VideoReader(dataset["prepared"][0])
    n = len(vr)
    want = vr.get_batch([n - 1, 0, n - 130, 3], crop="center", size=32)
    asked = np.array([-1, -n, -130, 3])
    got = vr.get_batch(asked, crop="center", size=32)
    assert np.array_equal(got, want)
    assert asked.tolist() == [-1, -n, -130, 3]  # the caller's array is left alone
    assert np.array_equal(vr.get_batch([-1])[0], vr[-1])
    # Out of range, either end: the same error from get_batch and from vr[i].
    for i, words in ((n, "past the end"), (-n - 1, "before the start")):
        with pytest.raises(tubelet.RangeError) as batch:
            vr.get_batch([0, i])
        with pytest.raises(tubelet.RangeError) as item:
            vr[i]
        for e in (batch.value, item.value):
            assert isinstance(e, IndexError) and isinstance(e, tubelet.InvalidError)
            assert e.code == tubelet.ERANGE
            assert str(e) == f"{vr.path}: frame {i} is {words} (the video has {n} frames)"


def test_rrc_ranges_reach_the_crop(dataset):
    vr = tubelet.VideoReader(dataset["prepared"][0])
    h, w = vr.size
    whole = vr.get_batch(FRAMES, size=(h, w))
    # Scale 1 at the frame's own aspect leaves the whole frame as the only choice.
    full = vr.get_batch(FRAMES, size=(h, w), crop="rrc", scale=(1, 1), ratio=(w / h, w / h),
                        seed=5)
    assert np.array_equal(full, whole)
    small = vr.get_batch(FRAMES, size=(h, w), crop="rrc", scale=(0.1, 0.12), seed=5)
    assert not np.array_equal(small, whole)
    with pytest.raises(ValueError, match="scale"):
        vr.get_batch(FRAMES, crop="rrc", scale=(0.5, 0.2))


def test_random_flip_is_one_of_the_two(dataset):
    vr = tubelet.VideoReader(dataset["prepared"][0])
    plain = vr.get_batch(FRAMES, crop="center")
    mirrored = vr.get_batch(FRAMES, crop="center", flip=True)
    assert not np.array_equal(mirrored, plain)
    seen = set()
    for seed in range(16):
        r = vr.get_batch(FRAMES, crop="center", flip="random", seed=seed)
        if np.array_equal(r, plain):
            seen.add("plain")
        elif np.array_equal(r, mirrored):
            seen.add("mirrored")
        else:
            pytest.fail(f"seed {seed}: neither the frame nor its mirror image")
    assert seen == {"plain", "mirrored"}


def cli_error(tubelet_bin, tmp_path, path, frames):
    rc, _, err = run([tubelet_bin, "frames", path, "--frames", frames, "--out",
                      str(tmp_path / "x.raw")], check=False)
    assert rc != 0
    return err.strip()


def test_frame_past_the_end(dataset, tubelet_bin, tmp_path):
    path = dataset["prepared"][0]
    vr = tubelet.VideoReader(path)
    with pytest.raises(tubelet.RangeError) as e:
        vr.get_batch([1, len(vr)])
    assert isinstance(e.value, ValueError) and isinstance(e.value, tubelet.Error)
    assert isinstance(e.value, tubelet.InvalidError) and isinstance(e.value, IndexError)
    assert path in str(e.value) and f"frame {len(vr)}" in str(e.value)
    assert e.value.code == tubelet.ERANGE
    assert cli_error(tubelet_bin, tmp_path, path, f"1,{len(vr)}") == \
        f"tubelet frames: {e.value}"


def test_missing_video(tmp_path, tubelet_bin):
    path = str(tmp_path / "nothing.mp4")
    with pytest.raises(tubelet.NotFoundError) as e:
        tubelet.VideoReader(path)
    assert isinstance(e.value, FileNotFoundError) and path in str(e.value)
    assert e.value.code == tubelet.ENOENT
    with pytest.raises(FileNotFoundError):
        tubelet.probe(path)


def make_unreadable(tmp_path):
    """Sources no command can read, by name: (path, the words every command says)."""
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    fifo = tmp_path / "fifo.mp4"
    os.mkfifo(fifo)
    out = [(str(empty), "empty file (0 bytes)"),
           (str(fifo), "not a regular file (a FIFO)"),
           ("/dev/null", "not a regular file (a character device)")]
    if shutil.which("ffmpeg"):
        art = str(tmp_path / "art.mp3")
        run(["ffmpeg", "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=d=3", "-f", "lavfi",
             "-i", "testsrc=s=64x64:d=1", "-map", "0:a", "-map", "1:v", "-frames:v", "1", "-c:v",
             "png", "-disposition:v", "attached_pic", art])
        out.append((art, "no video stream (only audio and a cover picture)"))
    return out


def test_unreadable_sources_say_what_they_are(tmp_path, tubelet_bin):
    for path, words in make_unreadable(tmp_path):
        with pytest.raises(tubelet.Error) as e:
            tubelet.VideoReader(path)
        assert str(e.value) == f"{path}: {words}"
        assert cli_error(tubelet_bin, tmp_path, path, "0") == f"tubelet frames: {e.value}"
        with pytest.raises(tubelet.Error) as p:
            tubelet.probe(path)
        assert str(p.value) == str(e.value)


def test_deleted_chunk(copy_of_root, tubelet_bin, tmp_path):
    video = os.path.join(copy_of_root, sorted(os.listdir(copy_of_root))[0])
    os.remove(os.path.join(video, "4.mp4"))
    vr = tubelet.VideoReader(video)  # the index still lists it
    assert vr.get_batch([0, 119]).shape[0] == 2  # the other chunks read
    with pytest.raises(tubelet.Error) as e:
        vr.get_batch([0, 130])
    assert "4.mp4" in str(e.value)
    assert cli_error(tubelet_bin, tmp_path, video, "0,130") == f"tubelet frames: {e.value}"


def test_corrupt_chunk(copy_of_root, tubelet_bin, tmp_path):
    video = os.path.join(copy_of_root, sorted(os.listdir(copy_of_root))[0])
    chunk = os.path.join(video, "8.mp4")
    size = os.path.getsize(chunk)
    with open(chunk, "r+b") as f:  # keep the header, truncate the frames
        f.truncate(size // 3)
    vr = tubelet.VideoReader(video)
    with pytest.raises(tubelet.Error) as e:
        vr.get_batch([250, 299])
    assert "8.mp4" in str(e.value)
    assert cli_error(tubelet_bin, tmp_path, video, "250,299") == f"tubelet frames: {e.value}"


def test_bad_arguments(dataset):
    vr = tubelet.VideoReader(dataset["prepared"][0])
    with pytest.raises(ValueError, match="crop"):
        vr.get_batch([0], crop="squash")
    with pytest.raises(ValueError, match="frames"):
        vr.get_batch([])
    # Not frame numbers: refused, as NumPy's indexing refuses them, never cast to one.
    for bad in ([1.7], [0, 2.0], [True], ["3"], np.array([1.0, 2.0])):
        with pytest.raises(TypeError, match="integer frame numbers"):
            vr.get_batch(bad)
    with pytest.raises(ValueError, match="frames"):
        vr.get_batch([[0, 1]])
    with pytest.raises(ValueError, match="size"):
        vr.get_batch([0], size=(0, 10))
    with pytest.raises(ValueError, match="flip"):
        vr.get_batch([0], flip="sometimes")
    with pytest.raises(ValueError, match="scaler"):
        tubelet.VideoReader(dataset["prepared"][0], scaler="lanczos")


def test_probe_equals_tubelet_probe(dataset, tubelet_bin):
    for path in (dataset["prepared"][0], dataset["videos"][0]):
        ref = json.loads(run([tubelet_bin, "probe", path])[1])
        got = tubelet.probe(path)
        num, den = got["fps"]
        assert ref.pop("fps") == f"{num}/{den}"
        got.pop("fps")
        for key in ("fps_value", "start_time", "duration"):
            assert got.pop(key) == pytest.approx(ref.pop(key), abs=1e-6)
        assert got == ref
    assert tubelet.probe(dataset["videos"][0], decode=False)["frames"] is None


def test_gil_released_while_decoding(dataset):
    # Every frame of a plain file, upscaled with the slowest filter: long calls to look into.
    vr = tubelet.VideoReader(dataset["videos"][0], scaler="bicubic")
    frames = list(range(len(vr) - 1, -1, -1))
    vr.get_batch(frames[:2])  # the first read indexes the file
    spans = []

    def decode():
        t_end = time.monotonic() + 0.6
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            vr.get_batch(frames, crop="center", size=320)
            spans.append((t0, time.monotonic()))

    t = threading.Thread(target=decode)
    ticks = []
    t.start()
    while t.is_alive():
        ticks.append(time.monotonic())
        time.sleep(0.001)
    t.join()
    long_calls = [(a, b) for a, b in spans if b - a > 0.03]
    assert long_calls, "the decodes were too short to tell"
    inside = [x for x in ticks if any(a + 0.01 < x < b - 0.01 for a, b in long_calls)]
    # Holding the GIL during a call would leave the main thread no turn inside one.
    assert len(inside) >= 10

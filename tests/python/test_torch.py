"""tubelet.torch: the loader's batches as torch tensors sharing the pool (no copy), equal to
tubelet.Loader's; the IterableDataset under a DataLoader, in the main process and in worker
processes (shards that cover the epoch); a CUDA copy where this torch has a device."""
import os

import numpy as np
import pytest

import tubelet
from conftest import epic_csv

torch = pytest.importorskip("torch")
import tubelet.torch as tt  # noqa: E402

T, H, W = 4, 40, 56


@pytest.fixture(scope="module")
def ann(dataset, tmp_path_factory):
    ids = [os.path.basename(p).rsplit(".", 1)[0] for p in dataset["prepared"]]
    return epic_csv(tmp_path_factory.mktemp("ann") / "train.csv", ids, 23, seed=1)


def numpy_batches(dataset, ann, **kw):
    with tubelet.Loader(dataset["root"], ann, frames=T, size=(H, W), **kw) as loader:
        return [{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in b.items()}
                for b in loader]


def test_tensors_share_the_pool_and_equal_the_numpy_loader(dataset, ann):
    ref = numpy_batches(dataset, ann, batch=5, workers=2, seed=6)
    with tt.Loader(dataset["root"], ann, frames=T, size=(H, W), batch=5, workers=3,
                   seed=6) as loader:
        assert len(loader) == len(ref) == 5
        n, addresses = 0, set()
        for b, r in zip(loader, ref):
            v = b["video"]
            assert isinstance(v, torch.Tensor) and v.dtype == torch.uint8
            assert v.shape == (len(r["index"]), T, H, W, 3) and v.device.type == "cpu"
            # No copy: the tensor's storage is a pool buffer (one of prefetch + 1).
            addresses.add(v.data_ptr())
            assert np.array_equal(v.numpy(), r["video"])
            assert torch.equal(b["label"], torch.from_numpy(r["label"]))
            assert b["label"].dtype == torch.int32 and b["index"].dtype == torch.int64
            for key in ("index", "item", "view", "crop"):
                assert torch.equal(b[key], torch.from_numpy(r[key])), key
            assert b["text"] == r["text"]
            n += 1
        assert n == 5 and len(addresses) == 3  # prefetch 2: three buffers, reused


def test_video_tensor_is_the_pool_buffer(dataset, ann):
    with tubelet.Loader(dataset["root"], ann, frames=T, size=(H, W), batch=4) as loader:
        b = next(iter(loader))
        t = tt.to_tensors(b)["video"]
        assert t.data_ptr() == b["video"].base.address
        t[0, 0, 0, 0, 0] = 255 - int(t[0, 0, 0, 0, 0])  # a write lands in the pool
        assert int(b["video"][0, 0, 0, 0, 0]) == int(t[0, 0, 0, 0, 0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without CUDA")
def test_pin_memory_needs_cuda(dataset, ann):
    with pytest.raises(ValueError, match="CUDA"):
        tt.Loader(dataset["root"], ann, pin_memory=True)
    with pytest.raises(ValueError, match="CUDA"):
        tt.Loader(dataset["root"], ann, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch has no CUDA device")
def test_cuda_copy(dataset, ann):
    ref = numpy_batches(dataset, ann, batch=5, workers=2, seed=6)
    with tt.Loader(dataset["root"], ann, frames=T, size=(H, W), batch=5, workers=2, seed=6,
                   device="cuda") as loader:
        for b, r in zip(loader, ref):
            assert b["video"].is_cuda and np.array_equal(b["video"].cpu().numpy(), r["video"])


def test_iterable_dataset_in_a_dataloader(dataset, ann):
    ref = numpy_batches(dataset, ann, batch=4, workers=2, seed=8, epoch=1)
    ds = tt.IterableDataset(dataset["root"], ann, frames=T, size=(H, W), batch=4, workers=2,
                            seed=8)
    ds.set_epoch(1)
    assert len(ds) == len(ref)
    got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
    assert len(got) == len(ref)
    for b, r in zip(got, ref):
        assert np.array_equal(b["index"].numpy(), r["index"])
    # Only the last batch's video is still valid (the others' buffers were reused).
    assert np.array_equal(got[-1]["video"].numpy(), ref[-1]["video"])


def test_iterable_dataset_worker_processes_cover_the_epoch(dataset, ann):
    ds = tt.IterableDataset(dataset["root"], ann, frames=T, size=(H, W), batch=4, workers=1,
                            seed=8, shuffle=False)
    got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    seen = sorted(int(i) for b in got for i in b["index"])
    assert set(seen) == set(range(23)) and len(seen) == 24  # two shards, one padded
    with tubelet.Loader(dataset["root"], ann, frames=T, size=(H, W), batch=4, workers=1,
                        seed=8, shuffle=False, rank=0, world=2) as ref:
        first = next(iter(ref))
        match = [b for b in got if b["index"].tolist() == first["index"].tolist()]
        assert match and np.array_equal(match[0]["video"].numpy(), first["video"])

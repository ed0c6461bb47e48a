"""tubelet's loader for PyTorch: batches as torch tensors without copying pixels.

    import tubelet.torch
    loader = tubelet.torch.Loader("data/chunks", "ann/train.csv", frames=16, size=224,
                                  batch=32, workers=8, device="cuda")
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for b in loader:
            video = b["video"]          # uint8 (B, T, H, W, 3), on the device
            ...

On the host, b["video"] is torch.from_numpy of the pool's view: it shares the pool buffer and
is valid until the next batch (clone() it to keep it). With a CUDA device the pool's buffers
are page-locked once (cudaHostRegister: they are page-aligned) and each batch is copied to the
device asynchronously on a side stream; the loader waits for that copy before it hands the
buffer back to its workers, and the training stream waits for it before using the tensor.

IterableDataset is the same loader for code that wants a torch.utils.data.DataLoader. Use it
with num_workers=0 and batch_size=None: tubelet's threads already decode in parallel with the
GIL released, straight into the pool; DataLoader worker processes would each decode a shard
and pickle every batch through shared memory, a copy of every pixel and a process per worker.
"""
from typing import Any, Dict, Iterator, Optional, Union

import torch

from . import _tubelet

__all__ = ["Loader", "IterableDataset", "to_tensors"]


# A batch's arrays: what becomes a tensor, and what goes to the device.
ARRAYS = ("video", "label", "index", "item", "view", "crop", "flip")


def to_tensors(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A tubelet.Loader batch with its arrays as CPU tensors sharing their memory (video is
    still a view of the pool: valid until the next batch)."""
    out = dict(batch)
    for key in ARRAYS:
        out[key] = torch.from_numpy(batch[key])
    return out


class Loader:
    """tubelet.Loader (same arguments) yielding dicts of torch tensors.

    device: None or "cpu" keeps the tensors on the host (video shares the pool buffer);
    a CUDA device copies every batch's arrays there asynchronously.
    pin_memory: page-lock the pool so host-to-device copies are asynchronous DMA; "auto"
    (the default) does it where the device is CUDA. True without CUDA is an error."""

    def __init__(self, *args: Any, device: Optional[Union[str, torch.device]] = None,
                 pin_memory: Union[bool, str] = "auto", **kwargs: Any) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        cuda = self.device.type == "cuda"
        if cuda and not torch.cuda.is_available():
            raise ValueError(f"device {self.device}: this torch has no CUDA device")
        if pin_memory == "auto":
            pin_memory = cuda
        if pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory: page-locking needs CUDA, which this torch lacks")
        self.pin_memory = bool(pin_memory)
        self.loader = _tubelet.Loader(*args, **kwargs)
        self._pinned: Dict[int, int] = {}       # pool buffer address -> bytes
        self._stream = torch.cuda.Stream(self.device) if cuda else None
        self._copied: Optional[Any] = None      # event: the last batch's copy finished

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self._wait_copy()
        self.loader.set_epoch(epoch)

    def stats(self) -> Dict[str, Union[int, float]]:
        return self.loader.stats()

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    @property
    def dataset_size(self) -> int:
        return self.loader.dataset_size

    def _pin(self, buf: _tubelet.PoolBuffer) -> None:
        if buf.address in self._pinned:
            return
        rc = torch.cuda.cudart().cudaHostRegister(buf.address, buf.nbytes, 0)
        if int(rc) != 0:
            raise RuntimeError(f"cudaHostRegister of the loader's pool failed ({rc})")
        self._pinned[buf.address] = buf.nbytes

    def _wait_copy(self) -> None:
        # The buffer goes back to the workers at the next batch: its copy must be done.
        if self._copied is not None:
            self._copied.synchronize()
            self._copied = None

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        self._wait_copy()
        for batch in self.loader:
            if self.pin_memory:
                self._pin(batch["video"].base)
            out = to_tensors(batch)
            if self._stream is not None:
                with torch.cuda.stream(self._stream):
                    for key in ARRAYS:
                        out[key] = out[key].to(self.device, non_blocking=self.pin_memory)
                    self._copied = torch.cuda.Event()
                    self._copied.record(self._stream)
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
                for key in ARRAYS:
                    out[key].record_stream(torch.cuda.current_stream(self.device))
            yield out
            self._wait_copy()

    def close(self) -> None:
        """Join the worker threads, unpin and free the pool (live host tensors keep theirs)."""
        self._wait_copy()
        if self._pinned:
            torch.cuda.synchronize(self.device)
            for address in self._pinned:
                torch.cuda.cudart().cudaHostUnregister(address)
            self._pinned.clear()
        self.loader.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_pinned", None):
            self.close()


class IterableDataset(torch.utils.data.IterableDataset):
    """tubelet's loader as a torch IterableDataset yielding whole batches (dicts of tensors):
    DataLoader(ds, batch_size=None, num_workers=0). Each iteration is one epoch; set_epoch
    chooses it. Under DataLoader worker processes every worker loads its own shard (rank and
    world are multiplied out) and yields copies, since a batch leaves its process."""

    def __init__(self, root: str, annotations: str, **kwargs: Any) -> None:
        super().__init__()
        self.root, self.annotations, self.kwargs = root, annotations, dict(kwargs)
        self.epoch = int(self.kwargs.pop("epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        with _tubelet.Loader(self.root, self.annotations, workers=1, prefetch=0,
                             **{k: v for k, v in self.kwargs.items()
                                if k not in ("workers", "prefetch")}) as probe:
            return len(probe)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        kw = dict(self.kwargs, epoch=self.epoch)
        if info is not None:
            world, rank = kw.get("world", 1), kw.get("rank", 0)
            kw["world"] = world * info.num_workers
            kw["rank"] = rank * info.num_workers + info.id
        with _tubelet.Loader(self.root, self.annotations, **kw) as loader:
            for batch in loader:
                out = to_tensors(batch)
                if info is not None:
                    out["video"] = out["video"].clone()
                yield out

"""stoker.Loader: shards to batches in native threads, handed over without copies."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

from stoker import _native

PathLike = Union[str, "os.PathLike[str]"]

#: ImageNet statistics of [0, 1] pixel values, torchvision's usual choice.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_OUTPUTS = ("torch", "numpy", "dlpack")


def distributed_rank() -> Tuple[int, int]:
    """(rank, world_size) from the launcher's environment, else (0, 1).

    Reads, in this order: torchrun (``RANK``, ``WORLD_SIZE``), SLURM
    (``SLURM_PROCID``, ``SLURM_NTASKS``), SageMaker (``SM_HOSTS``, a JSON list
    of hosts, and ``SM_CURRENT_HOST``).
    """
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    if "SM_HOSTS" in env and "SM_CURRENT_HOST" in env:
        hosts = json.loads(env["SM_HOSTS"])
        host = env["SM_CURRENT_HOST"]
        if host not in hosts:
            raise ValueError(f"SM_CURRENT_HOST {host!r} is not in SM_HOSTS {hosts}")
        return sorted(hosts).index(host), len(hosts)
    return 0, 1


class Loader:
    """Batches of decoded, augmented images from a packed dataset.

    Reads the records in the order of a seeded epoch plan, decodes each JPEG
    (only the crop region, scaled in the DCT domain) and transforms it on
    native threads, writes it straight into a pooled batch buffer, and hands
    whole batches over without a copy::

        loader = stoker.Loader("photos.stoker", batch_size=256, image_size=224)
        for epoch in range(10):
            for images, labels in loader:      # one epoch per loop
                ...

    Args:
      uri: a dataset folder written by ``stoker pack``.
      batch_size: samples per batch. The last batch of an epoch may be short
        unless ``drop_last``.
      image_size: output height and width, pixels.
      train: ``True``: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) and a
        random horizontal flip. ``False``: resize the shorter side to
        ``image_size / 0.875`` (256 for 224) and take the centre crop.
      shuffle: a new global permutation each epoch, from ``seed`` and the
        epoch number; ``False`` keeps dataset order.
      seed: drives shuffling and augmentation. The same seed gives the same
        batches, bit for bit, whatever ``threads`` is.
      output: ``"torch"`` (tensors), ``"numpy"`` (arrays) or ``"dlpack"``
        (DLPack capsules, for any framework's ``from_dlpack``). Images are
        never copied on the way out; their buffer returns to the pool when
        the framework frees the tensor.
      layout: ``"NCHW"`` or ``"NHWC"``.
      dtype: ``"uint8"``, ``"float32"`` or ``"float16"``.
      normalize: scale to [0, 1] then ``(x - mean) / std`` (float dtypes).
      mean, std: per-channel, of [0, 1] values; default ImageNet's.
      drop_last: drop a short last batch, and give every rank
        ``len(dataset) // world_size`` samples. Otherwise ranks are padded
        with repeated samples to the same count (``stats()["padding"]``).
      rank, world_size: this process's share of every epoch. Default: from
        torchrun, SLURM or SageMaker (see :func:`distributed_rank`), else 0, 1.
      threads: decode threads. Default: all cores.
      prefetch: finished batches kept ready. Default 2.
      on_error: ``"raise"``: a damaged sample raises :class:`DataLossError`
        naming shard and key, when its batch is reached; iterating again
        continues after that batch. ``"skip"``: the sample is left out of its
        batch, counted and named in ``stats()``.
      decode: ``"image"``, or ``"raw"`` to get each record's bytes (a list
        of ``bytes`` in place of the image tensor).
      distribution: ``"replicated"`` (ranks split the samples of every
        shard) or ``"sharded"`` (rank r reads only shards ``s % world_size ==
        r``, as SageMaker's ShardedByS3Key; ranks are evened out to the same
        sample count, padding or, with ``drop_last``, truncating).
      shuffle_window: 0 for a global shuffle each epoch; N > 0 streams the
        shards in a seeded order, each front to back, through a shuffle
        buffer of N samples. Default: 1024 with ``mode="pipe"``, else 0.
      mode: how an ``s3://`` dataset is read (local folders are read in
        place): ``"file"`` downloads this node's shards to ``local_dir``
        first (resuming an interrupted download), ``"pipe"`` streams them
        through bounded memory with nothing on disk, ``"fastfile"`` (what
        ``"auto"`` picks) fetches each shard on first use into the node cache
        ``cache_dir``, capped at ``cache_limit`` bytes (e.g. ``"20GiB"``,
        default 10 GiB) and shared by processes and later jobs.
      endpoint_url: an S3-compatible store (MinIO, Ceph, ...); default
        ``AWS_ENDPOINT_URL``. Credentials come from the environment or the
        AWS shared files.

    Thread-safety: iterate from one thread at a time. Waiting for a batch
    releases the GIL.
    """

    def __init__(
        self,
        uri: PathLike,
        batch_size: int = 256,
        image_size: int = 224,
        train: bool = True,
        shuffle: bool = True,
        seed: int = 0,
        output: str = "torch",
        layout: str = "NCHW",
        dtype: str = "uint8",
        normalize: bool = False,
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        threads: Optional[int] = None,
        prefetch: Optional[int] = None,
        on_error: str = "raise",
        decode: str = "image",
        distribution: str = "replicated",
        shuffle_window: Optional[int] = None,
        mode: str = "auto",
        local_dir: Optional[PathLike] = None,
        cache_dir: Optional[PathLike] = None,
        cache_limit: Union[int, str, None] = None,
        endpoint_url: Optional[str] = None,
        max_pixels: int = 1 << 28,
        max_scans: int = 256,
    ):
        if output not in _OUTPUTS:
            raise ValueError(f"output {output!r} is not one of {', '.join(_OUTPUTS)}")
        if output == "torch":
            import torch  # noqa: F401  (fail here, not at the first batch)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if rank is None:
            rank, world_size = distributed_rank()
        for name, value in (("batch_size", batch_size), ("image_size", image_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        if seed < 0:
            raise ValueError(f"seed {seed} is negative")
        if mode not in ("auto", "file", "pipe", "fastfile"):
            raise ValueError(f"mode {mode!r} is not one of auto, file, pipe, fastfile")
        if shuffle_window is None:
            # pipe streams shards front to back: shuffle through a window.
            shuffle_window = 1024 if mode == "pipe" and shuffle else 0
        if isinstance(cache_limit, str):
            from stoker._pack import parse_byte_size

            cache_limit = parse_byte_size(cache_limit)
        uri = os.fspath(uri)
        self._uri = uri
        self._output = output
        self._native = _native.Loader(
            uri=self._uri,
            batch_size=batch_size,
            image_size=image_size,
            train=bool(train),
            shuffle=bool(shuffle),
            seed=seed,
            layout=layout,
            dtype=dtype,
            normalize=bool(normalize),
            mean=_triple("mean", IMAGENET_MEAN if mean is None else mean),
            std=_triple("std", IMAGENET_STD if std is None else std),
            drop_last=bool(drop_last),
            rank=rank,
            world_size=world_size,
            threads=threads,
            prefetch=prefetch,
            on_error=on_error,
            decode=decode,
            max_pixels=max_pixels,
            max_scans=max_scans,
            distribution=distribution,
            shuffle_window=shuffle_window,
            mode=mode,
            local_dir=os.fspath(local_dir) if local_dir is not None else "",
            cache_dir=os.fspath(cache_dir) if cache_dir is not None else "",
            cache_limit=cache_limit or 0,
            endpoint_url=endpoint_url,
        )
        self._abandoned = False  # an iteration was left mid-epoch

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return self._native.num_batches

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) iteration runs."""
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run ``epoch`` from its start."""
        if epoch < 0:
            raise ValueError(f"epoch {epoch} is negative")
        self._native.set_epoch(epoch)
        self._abandoned = False

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        """Yields ``(images, labels)`` for the rest of the current epoch.

        A new iteration after a complete one runs the next epoch. Leaving a
        loop early (``break``, an exception in its body) stops the threads
        at once; the next iteration then starts the next epoch, unless
        :meth:`load_state_dict` was called in between. An error raised by
        the loader itself (``on_error="raise"``) leaves the epoch where it
        was: iterating again continues after the damaged batch.
        """
        native = self._native
        if self._abandoned:
            native.set_epoch(native.epoch + 1)
            self._abandoned = False
        convert = self._convert
        completed = False
        try:
            while True:
                got = native.next()
                if got is None:
                    completed = True
                    return
                yield convert(got[0]), convert(got[1])
        except GeneratorExit:
            self._abandoned = True
            native.stop()
            raise
        finally:
            if not completed:
                native.stop()

    def _convert(self, array: Any) -> Any:
        if isinstance(array, list):  # raw payloads
            return array
        if self._output == "numpy":
            return array
        if self._output == "torch":
            import torch

            return torch.from_dlpack(array)
        return array.__dlpack__()

    def stats(self) -> Dict[str, Any]:
        """Counters since the loader was created.

        ``samples``, ``batches``, ``bytes_read``; ``seconds``: thread time
        per stage (``read``, ``decode``, ``collate``) and the time the
        consumer waited (``wait``); ``first_batch_seconds``; ``skipped`` and
        ``skipped_samples`` (``"shard:key: reason"`` each); ``pool_buffers``
        (batch buffers ever allocated); ``padding`` (samples repeated this
        epoch to even out ranks); ``cache_hits``, ``cache_misses`` (node
        cache, fastfile) and ``bytes_downloaded`` (file, fastfile).
        """
        return self._native.stats()

    def state_dict(self) -> Dict[str, Any]:
        """The position after the batches delivered so far: a few integers.

        Load it into a Loader made with the same dataset, seed, batch size,
        shuffle, drop_last, rank and world size, in this process or another,
        to get exactly the remaining batches of the epoch.
        """
        return dict(self._native.state())

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from ``state`` (see :meth:`state_dict`).

        Raises ``StokerError`` naming the setting that differs.
        """
        self._native.restore(dict(state))
        self._abandoned = False

    def close(self) -> None:
        """Stops the threads and frees the loader; batches already handed out stay valid."""
        self._native.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"stoker.Loader({self._uri!r}, epoch={self.epoch}, batches={len(self)})"


def _triple(name: str, values: Sequence[float]) -> Tuple[float, float, float]:
    values = tuple(float(v) for v in values)
    if len(values) != 3:
        raise ValueError(f"{name} needs 3 values (one per channel), not {len(values)}")
    return values

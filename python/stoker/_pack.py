"""stoker.pack: many small files into shards (the `stoker pack` verb)."""

from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple, Optional, Union

from stoker import _native

PathLike = Union[str, "os.PathLike[str]"]


class PackProgress(NamedTuple):
    """Progress of a running :func:`pack`, passed to its ``progress`` callback."""

    files_done: int  #: files accepted or rejected so far
    files_total: int  #: files to consider
    bytes_in: int  #: source bytes read so far
    bytes_out: int  #: shard bytes written so far
    seconds: float  #: since the pack started


def parse_byte_size(text: str) -> int:
    """Parses a byte size such as ``"64MiB"``, ``"64M"``, ``"1.5GB"`` or ``"1048576"``.

    ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000; ``KiB``, ``MiB``, ``GiB``,
    ``TiB`` and the bare ``K``, ``M``, ``G``, ``T`` are powers of 1024.
    Raises ``ValueError`` for anything else.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_byte_size() takes a str, not {type(text).__name__}")
    return _native.parse_byte_size(text)


def _byte_size(value: Union[int, str]) -> int:
    if isinstance(value, str):
        return parse_byte_size(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"shard_size must be an int or a str like '64MiB', not {value!r}")
    if value < 0:
        raise ValueError(f"shard_size {value} is negative")
    return value


def _optional_path(value: Optional[PathLike]) -> Optional[str]:
    return None if value is None else os.fspath(value)


def pack(
    *,
    src: Optional[PathLike] = None,
    dst: PathLike,
    manifest: Optional[PathLike] = None,
    split: Optional[str] = None,
    path_column: str = "path",
    label_column: str = "label",
    path_template: str = "{}",
    shard_size: Union[int, str] = "64MiB",
    workers: Optional[int] = None,
    resize: Optional[int] = None,
    quality: int = 90,
    shuffle_seed: Optional[int] = None,
    strict: bool = False,
    progress: Optional[Callable[[PackProgress], Any]] = None,
) -> dict:
    """Packs files into shards of ``shard_size`` bytes with an index and per-record CRC-32C.

    Writes the shards, then ``dst/rejected.txt`` (one ``path<TAB>reason`` per
    line), then ``dst/manifest.json`` last, so an interrupted pack never leaves
    something that looks like a dataset. Whatever an earlier pack left in
    ``dst`` is replaced. The keywords are the flags of ``stoker pack``.

    Args:
      src: an ImageFolder tree (one folder per class, optionally below
        train/validation/test split folders) or a flat folder of files.
        Give either ``src`` or ``manifest``.
      dst: the dataset folder to write; created if missing.
      manifest: a CSV (with a header row) or JSONL file naming the files
        (relative to its folder) and labels; other columns become each
        record's metadata.
      split: pack only this split folder of ``src`` (e.g. ``"train"``).
        Default: every split, kept in each record's key and metadata.
      path_column: the manifest column holding the file path.
      label_column: the manifest column holding the label.
      path_template: turns a path value into a path, ``{}`` standing for the
        value (e.g. ``"images/{}.jpg"``).
      shard_size: target shard size, in bytes or as a string like ``"64MiB"``
        or ``"100MB"``. Sizes outside 1-128 MB draw a ``UserWarning``.
      workers: threads reading (and resizing) files. Default: all cores.
      resize: resize JPEGs so that the shorter side is this many pixels
        (never upscaled); other files are then rejected.
      quality: JPEG quality (1-100) of resized images.
      shuffle_seed: mix records across shards in an order drawn from this
        seed. Default: records sorted by key.
      strict: any rejected input fails the pack (``StokerError``) and no
        manifest is written.
      progress: called with a :class:`PackProgress` at most every ~100 ms and
        once at the end, from a packer thread. The pack cannot be
        cancelled: an exception from the callback stops further calls and is
        raised when the pack has finished.

    Returns:
      The summary printed by ``stoker pack --json``: ``records``, ``shards``,
      ``bytes``, ``payload_bytes``, ``source_bytes``, ``classes``,
      ``label_names``, ``resized``, ``skipped_hidden``, ``seconds``,
      ``fingerprint`` and ``rejected`` (a list of ``{"path", "reason"}``).

    Raises:
      ValueError: bad options or an unusable source.
      FileNotFoundError: the source folder or manifest does not exist.
      StokerError: ``strict`` and some input was rejected.
    """
    if shuffle_seed is not None and shuffle_seed < 0:
        raise ValueError(f"shuffle_seed {shuffle_seed} is negative")
    callback = None
    if progress is not None:
        if not callable(progress):
            raise TypeError("progress must be callable")

        def callback(*fields: Any) -> None:
            progress(PackProgress(*fields))

    return _native.pack(
        src=_optional_path(src) or "",
        dst=os.fspath(dst),
        manifest=_optional_path(manifest),
        split=split,
        path_column=path_column,
        label_column=label_column,
        path_template=path_template,
        shard_size=_byte_size(shard_size),
        workers=workers,
        resize=resize,
        quality=quality,
        shuffle_seed=shuffle_seed,
        strict=bool(strict),
        progress=callback,
    )

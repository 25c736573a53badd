"""Reading and checking packed datasets (the `stoker inspect` and `stoker verify` verbs)."""

from __future__ import annotations

import json
import operator
import os
from typing import Iterator, List, NamedTuple, Optional, Union, overload

from stoker import _native

PathLike = Union[str, "os.PathLike[str]"]

#: The label of a record that has none (e.g. packed from a flat folder).
NO_LABEL = -1


class Record(NamedTuple):
    """One record of a :class:`Dataset`."""

    key: str  #: unique key, e.g. the file's path relative to the packed folder
    label: int  #: index into ``Dataset.label_names`` (or the integer label); NO_LABEL if none
    meta: Optional[dict]  #: the record's metadata (e.g. ``{"split": "train"}``), or None
    payload: bytes  #: the file's bytes, as packed


def inspect(uri: PathLike) -> dict:
    """Reads and checks the manifest of the dataset at ``uri``.

    Returns what ``stoker inspect --json --shards`` prints: ``uri``,
    ``records``, ``shards`` (a count), ``bytes``, ``payload_bytes``,
    ``classes``, ``label_names``, ``unlabeled``, ``fingerprint``,
    ``created_by``, ``pack_options`` and ``shard_list`` (a list of
    ``{"path", "bytes", "records"}``).

    Raises:
      FileNotFoundError: no manifest (e.g. an interrupted pack).
      DataLossError: a damaged manifest.
    """
    return _native.inspect(os.fspath(uri))


def verify(uri: PathLike, *, workers: Optional[int] = None) -> dict:
    """Reads every byte of every shard and checks every checksum.

    Damage is reported in the result, not raised. Returns what
    ``stoker verify --json`` prints: ``uri``, ``ok``, ``shards``,
    ``records_ok``, ``records_bad``, ``bytes``, ``seconds`` and
    ``corruptions`` (a list of ``{"shard", "offset", "key", "reason"}``,
    sorted by shard and offset; ``key`` is ``""`` when unreadable).

    Args:
      uri: the dataset folder.
      workers: shards checked in parallel. Default: all cores.

    Raises:
      FileNotFoundError: no manifest.
      DataLossError: a damaged manifest.
    """
    if workers is not None and workers < 1:
        raise ValueError(f"workers {workers} is not positive")
    return _native.verify(os.fspath(uri), workers=workers)


class Dataset:
    """Random access to the records of a packed dataset, by global index.

    Records are numbered shard by shard, in file order. Indexing accepts
    negative indices and slices; iterating yields every record in order.
    Each read checks the record's CRC and raises :class:`DataLossError`
    (naming shard, offset and key) for a damaged one.

    Opening loads the manifest and checks every shard's structure, so a
    missing or truncated shard fails here (``FileNotFoundError`` /
    ``DataLossError``) rather than mid-epoch.

    Reads release the GIL; one Dataset may be shared by several threads.
    """

    def __init__(self, uri: PathLike):
        self._uri = os.fspath(uri)
        self._native = _native.Dataset.open(self._uri)
        self._manifest: Optional[dict] = None

    @property
    def uri(self) -> str:
        """The dataset folder."""
        return self._uri

    @property
    def manifest(self) -> dict:
        """The content of ``manifest.json``: shards, totals, labels, packing options."""
        if self._manifest is None:
            self._manifest = self._open().manifest
        return self._manifest

    @property
    def label_names(self) -> List[str]:
        """Class names, indexed by label; empty when labels are plain integers."""
        return self._open().label_names

    @property
    def fingerprint(self) -> str:
        """Identifies the dataset's content (shards and label names)."""
        return self.manifest["fingerprint"]

    def __len__(self) -> int:
        return len(self._open())

    @overload
    def __getitem__(self, index: int) -> Record: ...
    @overload
    def __getitem__(self, index: slice) -> List[Record]: ...

    def __getitem__(self, index):
        native = self._open()
        if isinstance(index, slice):
            return [_record(native.read(i)) for i in range(*index.indices(len(native)))]
        i = operator.index(index)
        n = len(native)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"record {index} out of range for a dataset of {n}")
        return _record(native.read(i))

    def __iter__(self) -> Iterator[Record]:
        native = self._open()
        for i in range(len(native)):
            yield _record(native.read(i))

    def close(self) -> None:
        """Closes the shards. Further use raises ``ValueError``."""
        self._native = None

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._native is None:
            return f"stoker.Dataset({self._uri!r}, closed)"
        return f"stoker.Dataset({self._uri!r}, records={len(self._native)})"

    def _open(self) -> "_native.Dataset":
        if self._native is None:
            raise ValueError(f"dataset {self._uri} is closed")
        return self._native


def _record(fields: tuple) -> Record:
    key, label, meta, payload = fields
    return Record(key, label, json.loads(meta) if meta else None, payload)

"""stoker keeps GPUs fed: packs, reads and checks training data in native threads.

The Python API mirrors the ``stoker`` command line: each function takes the
CLI flags as keyword arguments and returns what the ``--json`` form prints::

    import stoker

    summary = stoker.pack(src="photos/", dst="photos.stoker", resize=256)
    stoker.inspect("photos.stoker")       # like `stoker inspect --json --shards`
    report = stoker.verify("photos.stoker")
    assert report["ok"], report["corruptions"]

    ds = stoker.Dataset("photos.stoker")
    key, label, meta, payload = ds[-1]
    for record in ds:
        ...

    loader = stoker.Loader("photos.stoker", batch_size=256, image_size=224)
    for images, labels in loader:         # one epoch; torch tensors, no copies
        ...

Errors raised by the engine (the message is the engine's, unchanged):

* ``FileNotFoundError``: no such dataset, file or folder;
* ``ValueError``: a bad option or an unusable source;
* ``IndexError``: a record index out of range;
* ``PermissionError``: a file that may not be read or written;
* :class:`DataLossError` (a :class:`StokerError` and an ``OSError``): damaged
  or truncated data, named by file, offset and key;
* :class:`StokerError`: everything else, e.g. a ``strict`` pack that rejected
  inputs.

Heavy calls (packing, verifying, opening and reading) release the GIL.
"""

from stoker._native import DataLossError, StokerError, __version__
from stoker._pack import PackProgress, pack, parse_byte_size
from stoker._dataset import NO_LABEL, Dataset, Record, inspect, verify
from stoker._loader import Loader, distributed_rank

__all__ = [
    "__version__",
    "DataLossError",
    "Dataset",
    "Loader",
    "NO_LABEL",
    "PackProgress",
    "Record",
    "StokerError",
    "distributed_rank",
    "inspect",
    "pack",
    "parse_byte_size",
    "verify",
]

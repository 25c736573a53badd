"""Shared fixtures: the sample data shipped in the repository, packed once per session."""
import pathlib

import pytest

import stoker

ROOT = pathlib.Path(__file__).resolve().parents[2]
MINI = ROOT / "data" / "clothing-mini"


@pytest.fixture(scope="session")
def mini_src() -> pathlib.Path:
    assert MINI.is_dir(), f"sample data missing: {MINI}"
    return MINI


@pytest.fixture(scope="session")
def mini_dataset(tmp_path_factory, mini_src) -> pathlib.Path:
    """data/clothing-mini packed into small shards (several shards, 100 records)."""
    dst = tmp_path_factory.mktemp("packed") / "mini"
    with pytest.warns(UserWarning, match="outside 1-128 MB"):
        summary = stoker.pack(src=mini_src, dst=dst, shard_size="512KiB", workers=2)
    assert summary["records"] == 100 and summary["rejected"] == []
    return dst

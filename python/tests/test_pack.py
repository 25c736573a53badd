"""stoker.pack / inspect / verify / Dataset from Python: round trip, damage, bad input."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

import stoker


def test_round_trip_bytes_and_labels(mini_src, mini_dataset):
    ds = stoker.Dataset(mini_dataset)
    assert len(ds) == 100
    assert len(ds.label_names) == 10
    seen = set()
    for rec in ds:
        src = mini_src / rec.key
        assert src.read_bytes() == rec.payload, rec.key
        assert ds.label_names[rec.label] == src.parent.name
        seen.add(rec.key)
    assert len(seen) == 100
    # Random access, negative indices and slices agree with iteration.
    assert ds[-1] == list(ds)[-1]
    assert ds[3:6] == [ds[3], ds[4], ds[5]]
    with pytest.raises(IndexError):
        ds[100]


def test_inspect_summary(mini_dataset):
    info = stoker.inspect(mini_dataset)
    assert info["records"] == 100
    assert info["classes"] == 10
    assert info["shards"] == len(info["shard_list"]) >= 3
    assert sum(s["records"] for s in info["shard_list"]) == 100
    assert sum(s["bytes"] for s in info["shard_list"]) == info["bytes"]
    assert info["pack_options"]["shard_size"] == 512 * 1024


def test_verify_intact_then_flipped_bit(tmp_path, mini_src):
    dst = tmp_path / "ds"
    stoker.pack(src=mini_src, dst=dst, shard_size="1MiB")
    report = stoker.verify(dst)
    assert report["ok"] and report["records_bad"] == 0 and report["records_ok"] == 100
    shard = sorted(p for p in dst.iterdir() if p.name != "manifest.json" and p.suffix != ".txt")[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside some record's payload
    shard.write_bytes(bytes(data))
    report = stoker.verify(dst)
    assert not report["ok"]
    assert report["records_bad"] >= 1
    assert all(c["shard"].endswith(shard.name) for c in report["corruptions"])
    # The damaged record is named by offset and key (besides the shard's CRC).
    named = [c for c in report["corruptions"] if c["key"]]
    assert len(named) == 1 and named[0]["offset"] > 0
    assert named[0]["key"] in named[0]["reason"]
    # Reading the damaged record raises DataLossError naming the shard.
    ds = stoker.Dataset(dst)
    with pytest.raises(stoker.DataLossError, match=shard.name):
        for _ in ds:
            pass


def test_truncated_shard_is_refused(tmp_path, mini_src):
    dst = tmp_path / "ds"
    stoker.pack(src=mini_src, dst=dst, shard_size="1MiB")
    shard = sorted(p for p in dst.iterdir() if p.name != "manifest.json" and p.suffix != ".txt")[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(stoker.DataLossError, match=shard.name):
        stoker.Dataset(dst)


def test_manifest_with_missing_and_empty_files(tmp_path, mini_src):
    files = sorted((mini_src / "train" / "hat").glob("*.jpg"))[:3]
    (tmp_path / "empty.jpg").write_bytes(b"")
    rows = [{"path": str(f), "label": "hat"} for f in files]
    rows += [{"path": "missing.jpg", "label": "hat"}, {"path": "empty.jpg", "label": "hat"}]
    manifest = tmp_path / "list.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = stoker.pack(manifest=manifest, dst=tmp_path / "ds")
    assert summary["records"] == 3
    reasons = {pathlib.Path(r["path"]).name: r["reason"] for r in summary["rejected"]}
    assert set(reasons) == {"missing.jpg", "empty.jpg"}
    listed = (tmp_path / "ds" / "rejected.txt").read_text()
    assert "missing.jpg" in listed and "empty.jpg" in listed
    # strict: the same input fails and leaves no manifest.
    with pytest.raises(stoker.StokerError):
        stoker.pack(manifest=manifest, dst=tmp_path / "strict", strict=True)
    assert not (tmp_path / "strict" / "manifest.json").exists()


def test_errors_are_python_exceptions(tmp_path):
    with pytest.raises(FileNotFoundError):
        stoker.Dataset(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError):
        stoker.pack(src=tmp_path / "nothing", dst=tmp_path / "out")
    with pytest.raises(ValueError):
        stoker.parse_byte_size("12 parsecs")
    assert stoker.parse_byte_size("64MiB") == 64 << 20
    assert stoker.parse_byte_size("1MB") == 10**6


def test_resize_and_progress(tmp_path, mini_src):
    calls = []
    summary = stoker.pack(src=mini_src, dst=tmp_path / "r", resize=64, split="validation",
                          progress=calls.append)
    assert summary["records"] == 20 and summary["resized"] == 20
    assert calls and calls[-1].files_done == calls[-1].files_total == 20


def test_cli_is_installed_and_agrees(mini_dataset):
    cli = pathlib.Path(sys.executable).parent / "stoker"
    assert os.access(cli, os.X_OK), f"{cli} missing"
    out = subprocess.run([str(cli), "verify", str(mini_dataset), "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["ok"] and report["records_ok"] == 100

"""s3:// datasets against a real S3 API server (moto_server on 127.0.0.1).

pack to S3, inspect, verify, and load in each input mode, byte-identical to
the same dataset read locally; the node cache serves a second epoch.
"""
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import stoker

MOTO = pathlib.Path(sys.executable).parent / "moto_server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto_server for this module, the environment pointing at it, a bucket."""
    if not MOTO.exists():
        pytest.skip(f"moto_server not installed next to {sys.executable}")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=log,
                            stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1)
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    saved = {k: os.environ.get(k) for k in
             ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing-secret", AWS_REGION="us-east-1")
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="data")
    yield endpoint
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    proc.terminate()
    proc.wait(10)
    log.close()


@pytest.fixture(scope="module")
def s3_dataset(s3, mini_src):
    with pytest.warns(UserWarning, match="outside 1-128 MB"):
        summary = stoker.pack(src=mini_src, dst="s3://data/mini", shard_size=256 << 10)
    assert summary["records"] == 100 and summary["shards"] > 4
    return "s3://data/mini"


def _epoch(loader):
    return [(x.copy(), y.copy()) for x, y in loader]


def test_pack_inspect_verify_on_s3(s3_dataset, mini_dataset):
    info = stoker.inspect(s3_dataset)
    assert info["records"] == 100 and info["classes"] == 10
    report = stoker.verify(s3_dataset)
    assert report["ok"], report["corruptions"]
    assert report["records_ok"] == 100
    # The records are the local dataset's, byte for byte.
    local = {r.key: r for r in stoker.Dataset(mini_dataset)}
    remote = list(stoker.Dataset(s3_dataset))
    assert len(remote) == 100
    for rec in remote:
        assert rec.payload == local[rec.key].payload and rec.label == local[rec.key].label


def test_cli_reads_s3(s3_dataset):
    cli = pathlib.Path(sys.executable).parent / "stoker"
    done = subprocess.run([str(cli), "inspect", s3_dataset, "--json"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"records": 100' in done.stdout


@pytest.mark.parametrize("mode", ["file", "pipe", "fastfile"])
def test_every_mode_loads_the_same_bytes(mode, s3_dataset, mini_dataset, tmp_path):
    kwargs = dict(batch_size=16, decode="raw", output="numpy", shuffle=False)
    want = _epoch(stoker.Loader(mini_dataset, **kwargs))
    loader = stoker.Loader(s3_dataset, mode=mode, local_dir=tmp_path / "local",
                           cache_dir=tmp_path / "cache", cache_limit="64MiB", **kwargs)
    got = _epoch(loader)
    assert [p for b in got for p in b[0]] == [p for b in want for p in b[0]]
    assert np.array_equal(np.concatenate([b[1] for b in got]),
                          np.concatenate([b[1] for b in want]))
    stats = loader.stats()
    if mode == "file":
        assert sorted(os.listdir(tmp_path / "local"))[0].startswith("shard-")
        assert stats["bytes_downloaded"] == stoker.inspect(s3_dataset)["bytes"]
    if mode == "pipe":
        assert not (tmp_path / "local").exists() and not (tmp_path / "cache").exists()


def test_fastfile_cache_serves_the_next_loader(s3_dataset, tmp_path):
    kwargs = dict(batch_size=10, image_size=32, output="numpy", mode="fastfile",
                  cache_dir=tmp_path / "cache", cache_limit="64MiB", seed=3)
    first = stoker.Loader(s3_dataset, **kwargs)
    a = _epoch(first)
    shards = stoker.inspect(s3_dataset)["shards"]
    assert first.stats()["cache_misses"] >= shards
    second = stoker.Loader(s3_dataset, **kwargs)  # another job on the same node
    b = _epoch(second)
    assert second.stats()["cache_hits"] >= shards and second.stats()["bytes_downloaded"] == 0
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b))


def test_cache_smaller_than_a_shard_is_an_error_at_start(s3_dataset, tmp_path):
    with pytest.raises(ValueError, match="cache"):
        stoker.Loader(s3_dataset, output="numpy", mode="fastfile", cache_dir=tmp_path / "c",
                      cache_limit=1000)


def test_file_mode_resumes_and_pipe_shuffles_by_window(s3_dataset, tmp_path):
    local = tmp_path / "local"
    stoker.Loader(s3_dataset, output="numpy", mode="file", local_dir=local)
    # A second job finds the shards complete: nothing downloaded again.
    again = stoker.Loader(s3_dataset, output="numpy", mode="file", local_dir=local)
    assert again.stats()["bytes_downloaded"] == 0
    pipe = stoker.Loader(s3_dataset, output="numpy", mode="pipe", batch_size=100,
                         decode="raw", seed=1)
    assert pipe.state_dict()["shuffle_window"] == 1024


def test_missing_dataset_is_not_found(s3):
    with pytest.raises(FileNotFoundError, match="s3://data/nothing"):
        stoker.inspect("s3://data/nothing")


@pytest.mark.parametrize("window", [None, 20])
def test_pipe_with_shuffle_streams_each_shard_about_once(window, s3_dataset, mini_dataset):
    # The default shuffle window (1,024) spans every shard of this small
    # dataset; a window of 20 spans a few of its ~10-record shards at a time,
    # so rings come and go. Either way no shard may be fetched again and again.
    loader = stoker.Loader(s3_dataset, mode="pipe", batch_size=10, decode="raw",
                           output="numpy", seed=4, shuffle_window=window)
    payloads = [p for batch, _ in loader for p in batch]
    want = sorted(rec.payload for rec in stoker.Dataset(mini_dataset))
    assert sorted(payloads) == want  # every sample once
    total = stoker.inspect(s3_dataset)["bytes"]
    assert loader.stats()["bytes_downloaded"] <= 1.5 * total

"""s3:// datasets against a real S3 API server (moto_server on 127.0.0.1).

pack to S3, inspect, verify, and load in each input mode, byte-identical to
the same dataset read locally; the node cache serves a second epoch. Through
src/io/testdata/fault_proxy.py: a network partition shorter and longer than
the retry budget (../shared/RELIABILITY.md row N15).
"""
import faulthandler
import json
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
FAULT_PROXY = pathlib.Path(__file__).resolve().parents[2] / "src/io/testdata/fault_proxy.py"


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


# ---------------------------------------------------------------------------
# N15: a partition shorter or longer than the retry budget, through the
# fault proxy (its rule language is documented at the top of fault_proxy.py).


class FaultProxy:
    """fault_proxy.py in front of the module's moto_server."""

    def __init__(self, moto_endpoint):
        host, port = moto_endpoint.rsplit("//", 1)[1].split(":")
        self.proc = subprocess.Popen([sys.executable, str(FAULT_PROXY), host, port],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            pytest.fail(f"fault_proxy.py did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"

    def rules(self, rules):
        req = urllib.request.Request(self.endpoint + "/__fault__/rules",
                                     data=json.dumps(rules).encode(), method="POST")
        urllib.request.urlopen(req, timeout=5).read()

    def log(self):
        with urllib.request.urlopen(self.endpoint + "/__fault__/log", timeout=5) as r:
            return json.loads(r.read())

    def wait_until_up(self, timeout):
        """After a "refuse" partition the proxy listens again; wait for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                return self.log()
            except OSError:
                time.sleep(0.05)
        pytest.fail("the fault proxy did not come back")

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def fault_proxy(s3):
    # A new proxy, so a new endpoint: the loaders' S3 client for it is made
    # (and reads AWS_MAX_ATTEMPTS) at its first use in this test.
    proxy = FaultProxy(s3)
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def s3_many_shards(s3, mini_src):
    """The mini dataset in about 40 shards: more than any mode reads ahead."""
    with pytest.warns(UserWarning, match="outside 1-128 MB"):
        summary = stoker.pack(src=mini_src, dst="s3://data/mini-64k", shard_size=64 << 10)
    assert summary["shards"] > 32
    return "s3://data/mini-64k"


# Dataset order: the error comes once the loader needs a shard it has not
# fetched yet, and the plan (a pure function of seed and epoch) has an order
# to keep across the restart.
_PARTITION_KWARGS = dict(batch_size=8, decode="raw", output="numpy", shuffle=False,
                         prefetch=1, threads=2)


def _payloads(loader):
    return [p for batch, _ in loader for p in batch]


def _planned_epoch(dataset, mode, tmp_path):
    """Epoch 0 in order, read straight from moto: what every run must deliver."""
    return _payloads(stoker.Loader(dataset, mode=mode, cache_dir=tmp_path / "direct",
                                   **_PARTITION_KWARGS))


def _proxied_loader(dataset, mode, proxy, tmp_path, **extra):
    """A loader reading `dataset` through the fault proxy, in dataset order."""
    return stoker.Loader(dataset, mode=mode, endpoint_url=proxy.endpoint,
                         cache_dir=tmp_path / "cache", local_dir=tmp_path / "local",
                         **_PARTITION_KWARGS, **extra)


def _partition(seconds):
    """The store goes down at the next GET, for `seconds`."""
    return [{"method": "GET", "action": "partition", "mode": "refuse", "seconds": seconds}]


@pytest.mark.parametrize("mode", ["pipe", "fastfile"])
def test_partition_shorter_than_the_retry_budget_is_ridden_out(
        mode, s3_many_shards, fault_proxy, monkeypatch, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    # 19 retries of 50 ms to 5 s backoff (full jitter) outlast 0.5 s by far.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "20")
    loader = _proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path)
    got = []
    faulthandler.dump_traceback_later(60, exit=True)  # a hang fails, loudly
    try:
        for batch, _ in loader:
            if not got:  # the link goes down after the first batch
                fault_proxy.rules(_partition(0.5))
            got.extend(batch)
    finally:
        faulthandler.cancel_dump_traceback_later()
    actions = [e["action"] for e in fault_proxy.log()]
    assert actions.count("partition") == 1, "no fetch after the first batch: nothing was tested"
    assert got == planned  # every sample once, in plan order, same bytes


@pytest.mark.parametrize("mode", ["pipe", "fastfile"])
def test_partition_longer_than_the_retry_budget_is_a_clear_error_then_resumes(
        mode, s3_many_shards, fault_proxy, monkeypatch, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")  # about 0.15 s of retries
    partition = 3.0
    kwargs = dict(_PARTITION_KWARGS, mode=mode, endpoint_url=fault_proxy.endpoint,
                  cache_dir=tmp_path / "cache")
    loader = stoker.Loader(s3_many_shards, **kwargs)
    got, last_good = [], loader.state_dict()
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        with pytest.raises(stoker.StokerError) as failure:
            for batch, _ in loader:
                if not got:
                    fault_proxy.rules(_partition(partition))
                    start = time.monotonic()
                got.extend(batch)
                last_good = loader.state_dict()
        failed_after = time.monotonic() - start
    finally:
        faulthandler.cancel_dump_traceback_later()
    # Clear and bounded: it names the object and the cause, and comes long
    # before the store is back; never "not found".
    message = str(failure.value)
    # ("gave up after 3 attempts", or sooner once the process-wide retry
    # budget is spent by the failures of the earlier tests.)
    assert "s3://data/mini-64k/shard-" in message and "gave up after" in message, message
    assert not isinstance(failure.value, FileNotFoundError)
    assert failed_after < partition - 1
    assert 0 < len(got) < len(planned)  # mid-epoch

    fault_proxy.wait_until_up(partition + 5)
    resumed = stoker.Loader(s3_many_shards, **kwargs)
    resumed.load_state_dict(last_good)
    rest = _payloads(resumed)
    # Exactly once across the two loaders: nothing lost, nothing twice, in
    # plan order, same bytes.
    assert got + rest == planned



# After an outage longer than the retry budget the failed batch is not
# counted as delivered (state_dict() taken after the error resumes from it,
# and the same loader continues from it once the link is back), a read-ahead
# part that failed is loaded again rather than its old error returned, and
# on_error="skip" never skips samples because the store was unreachable.


def _fail_mid_epoch(loader, proxy, seconds):
    """Iterates until the partition (from the second batch on) stops it."""
    got = []
    with pytest.raises(stoker.StokerError, match="gave up after"):
        for batch, _ in loader:
            if not got:
                proxy.rules(_partition(seconds))
            got.extend(batch)
    return got


@pytest.mark.parametrize("mode", ["pipe", "fastfile"])
def test_state_taken_after_a_partition_error_resumes_exactly_once(
        mode, s3_many_shards, fault_proxy, monkeypatch, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    kwargs = dict(_PARTITION_KWARGS, mode=mode, endpoint_url=fault_proxy.endpoint,
                  cache_dir=tmp_path / "cache")
    loader = stoker.Loader(s3_many_shards, **kwargs)
    got = _fail_mid_epoch(loader, fault_proxy, 2.0)
    after_error = loader.state_dict()  # what a training loop saves on its way out
    fault_proxy.wait_until_up(10)
    resumed = stoker.Loader(s3_many_shards, **kwargs)
    resumed.load_state_dict(after_error)
    assert got + _payloads(resumed) == planned


@pytest.mark.parametrize("mode", ["pipe", "fastfile"])
def test_the_loader_that_failed_continues_once_the_link_is_back(
        mode, s3_many_shards, fault_proxy, monkeypatch, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    loader = _proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path)
    got = _fail_mid_epoch(loader, fault_proxy, 2.0)
    fault_proxy.wait_until_up(10)
    assert got + _payloads(loader) == planned


@pytest.mark.parametrize("mode", ["pipe", "fastfile"])
def test_an_outage_is_an_error_even_when_damaged_samples_are_skipped(
        mode, s3_many_shards, fault_proxy, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    loader = _proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path, on_error="skip")
    got, error = [], None
    try:
        for batch, _ in loader:
            if not got:
                fault_proxy.rules(_partition(2.0))
            got.extend(batch)
    except stoker.StokerError as e:
        error = e
    finally:
        fault_proxy.wait_until_up(10)
    skipped = loader.stats()["skipped"]
    assert error is not None and "gave up after" in str(error), (
        f"the epoch ended without an error, {skipped} samples skipped")
    assert skipped == 0


# RELIABILITY.md N13: one byte damaged on the way (HTTP sees nothing wrong)
# is caught by a CRC, fetched once more from the store, and never delivered
# or cached; damaged every time, it is a hard error naming the shard.
_N13_SHARD = "shard-00003.stk"


def _flip(times):
    return [{"method": "GET", "path": _N13_SHARD, "has_range": True, "action": "flip_byte",
             "times": times}]


@pytest.mark.parametrize("mode", ["file", "pipe", "fastfile"])
def test_a_byte_flipped_on_the_way_is_fetched_again(mode, s3_many_shards, fault_proxy, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    fault_proxy.rules(_flip(1))
    got = _payloads(_proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path))
    flips = [e for e in fault_proxy.log() if e["action"] == "flip_byte"]
    assert len(flips) == 1, "the damaged answer was never sent: nothing was tested"
    assert got == planned


@pytest.mark.parametrize("mode", ["file", "pipe", "fastfile"])
def test_a_byte_flipped_every_time_is_an_error_and_never_cached(
        mode, s3_many_shards, fault_proxy, tmp_path):
    planned = _planned_epoch(s3_many_shards, mode, tmp_path)
    fault_proxy.rules(_flip(-1))
    with pytest.raises(stoker.StokerError, match=r"shard-00003\.stk.*(CRC|checksum)"):
        _payloads(_proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path))
    requests = [e for e in fault_proxy.log() if _N13_SHARD in e["path"]]
    if mode != "pipe":  # the whole shard, fetched twice: once more, then the error
        whole = [e for e in requests if e["range"].startswith("bytes=0-")]
        assert len(whole) == 2, requests
    # Nothing damaged stayed behind: the next loader, the link healthy, on the
    # same cache and download folders, reads the right bytes.
    fault_proxy.rules([])
    loader = _proxied_loader(s3_many_shards, mode, fault_proxy, tmp_path)
    assert _payloads(loader) == planned
    if mode == "fastfile":
        assert loader.stats()["cache_misses"] >= 1

"""stoker.Loader: exactly-once epochs, determinism, error policy, shutdown, resume."""
import collections
import gc
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import stoker


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _digest(images, labels) -> str:
    return hashlib.sha256(np.ascontiguousarray(images).tobytes() + labels.tobytes()).hexdigest()


def test_raw_epoch_delivers_every_sample_once_with_its_label(mini_src, mini_dataset):
    ds = stoker.Dataset(mini_dataset)
    by_payload = {rec.payload: rec for rec in ds}
    loader = stoker.Loader(mini_dataset, batch_size=7, decode="raw", output="numpy", threads=2)
    assert len(loader) == 15  # ceil(100 / 7)
    for _ in range(2):  # two epochs
        seen = collections.Counter()
        sizes = []
        for payloads, labels in loader:
            sizes.append(len(payloads))
            assert len(labels) == len(payloads)
            for payload, label in zip(payloads, labels):
                rec = by_payload[payload]
                seen[rec.key] += 1
                assert label == rec.label
                assert ds.label_names[label] == (mini_src / rec.key).parent.name
        assert sizes == [7] * 14 + [2]  # the last batch is short
        assert len(seen) == 100 and set(seen.values()) == {1}
    assert loader.epoch == 2


def test_image_batches_shape_dtype_and_labels(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=32, image_size=64, output="numpy",
                           train=False, shuffle=False)
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(32, 3, 64, 64)] * 3 + [(4, 3, 64, 64)]
    assert all(b[0].dtype == np.uint8 and b[1].dtype == np.int64 for b in batches)
    labels = np.concatenate([b[1] for b in batches])
    want = [rec.label for rec in stoker.Dataset(mini_dataset)]
    assert labels.tolist() == want  # unshuffled: dataset order
    # Real pictures, not blank buffers.
    assert all(b[0].std() > 10 for b in batches)

    f16 = stoker.Loader(mini_dataset, batch_size=8, image_size=32, output="numpy", layout="NHWC",
                        dtype="float16", normalize=True, train=False, shuffle=False)
    images, _ = next(iter(f16))
    assert images.shape == (8, 32, 32, 3) and images.dtype == np.float16
    assert -3 < float(images.min()) < 0 < float(images.max()) < 3


def test_same_seed_is_bit_identical_with_one_or_two_threads(mini_dataset):
    def run(threads, seed=5):
        loader = stoker.Loader(mini_dataset, batch_size=16, image_size=96, seed=seed,
                               threads=threads, output="numpy")
        return [_digest(x, y) for x, y in loader]

    one, two = run(1), run(2)
    assert one == two
    assert run(2, seed=6) != one


def test_epochs_differ_and_set_epoch_replays(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=50, image_size=32, output="numpy")
    e0 = [_digest(x, y) for x, y in loader]
    e1 = [_digest(x, y) for x, y in loader]
    assert e0 != e1
    loader.set_epoch(0)
    assert [_digest(x, y) for x, y in loader] == e0


def test_ranks_are_disjoint_and_cover_the_epoch(mini_dataset):
    ds = stoker.Dataset(mini_dataset)
    index = {rec.payload: i for i, rec in enumerate(ds)}
    per_rank = []
    for rank in range(3):
        loader = stoker.Loader(mini_dataset, batch_size=8, decode="raw", output="numpy",
                               rank=rank, world_size=3)
        ids = [index[p] for payloads, _ in loader for p in payloads]
        assert len(ids) == 34  # ceil(100 / 3): ranks padded to the same count
        per_rank.append(ids)
    together = collections.Counter(i for ids in per_rank for i in ids)
    assert set(together) == set(range(100))  # every sample seen
    assert sum(together.values()) == 102  # 2 padded repeats, reported
    assert sum(1 for c in together.values() if c > 1) == 2


def test_rank_from_launcher_environment(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SM_HOSTS",
                "SM_CURRENT_HOST"):
        monkeypatch.delenv(var, raising=False)
    assert stoker.distributed_rank() == (0, 1)
    monkeypatch.setenv("SM_HOSTS", '["algo-2", "algo-1"]')
    monkeypatch.setenv("SM_CURRENT_HOST", "algo-2")
    assert stoker.distributed_rank() == (1, 2)
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert stoker.distributed_rank() == (3, 8)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert stoker.distributed_rank() == (1, 4)


@pytest.fixture(scope="module")
def corrupt_dataset(tmp_path_factory, mini_src):
    """clothing-mini validation plus one JPEG cut in half (still starts with FF D8)."""
    root = tmp_path_factory.mktemp("corrupt")
    files = sorted((mini_src / "validation").rglob("*.jpg"))
    bad = root / "bad.jpg"
    data = files[0].read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    rows = [{"path": str(f), "label": f.parent.name} for f in files]
    rows.insert(7, {"path": str(bad), "label": files[0].parent.name})
    (root / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = stoker.pack(manifest=root / "list.jsonl", dst=root / "ds")
    assert summary["records"] == 21 and not summary["rejected"]
    return root / "ds"


def _run_with_deadline(fn, seconds=60):
    """Runs fn in a thread; fails the test if it stalls."""
    result = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the loader stalled"
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_corrupt_jpeg_is_skipped_and_named(corrupt_dataset):
    loader = stoker.Loader(corrupt_dataset, batch_size=4, image_size=64, output="numpy",
                           on_error="skip", shuffle=False, train=False)
    sizes = _run_with_deadline(lambda: [len(y) for _, y in loader])
    assert sum(sizes) == 20
    stats = loader.stats()
    assert stats["skipped"] == 1
    assert len(stats["skipped_samples"]) == 1 and "bad.jpg" in stats["skipped_samples"][0]
    assert "shard-" in stats["skipped_samples"][0]


def test_corrupt_jpeg_raises_in_order_with_shard_and_key(corrupt_dataset):
    loader = stoker.Loader(corrupt_dataset, batch_size=4, image_size=64, output="numpy",
                           on_error="raise", shuffle=False, train=False)
    got = []

    def first_pass():
        with pytest.raises(stoker.DataLossError) as err:
            for _, labels in loader:
                got.append(len(labels))
        return err.value

    err = _run_with_deadline(first_pass)
    # bad.jpg sorts among the keys; its batch raises after the earlier batches arrived.
    keys = [rec.key for rec in stoker.Dataset(corrupt_dataset)]
    bad_batch = next(i for i, k in enumerate(keys) if k.endswith("bad.jpg")) // 4
    assert got == [4] * bad_batch
    assert "bad.jpg" in str(err) and "shard-" in str(err)
    # Iterating again continues after the damaged batch.
    rest = _run_with_deadline(lambda: [len(y) for _, y in loader])
    assert len(rest) == len(loader) - bad_batch - 1


def test_break_then_del_leaves_no_thread(mini_dataset):
    warm = stoker.Loader(mini_dataset, batch_size=4, image_size=32, output="numpy", threads=2)
    del warm
    gc.collect()
    before = _threads()
    loader = stoker.Loader(mini_dataset, batch_size=4, image_size=32, output="numpy", threads=2,
                           prefetch=4)
    for i, (images, labels) in enumerate(loader):
        if i == 2:
            assert _threads() > before  # the pipeline is running
            break
    t0 = time.monotonic()
    del loader, images, labels
    gc.collect()
    while _threads() > before and time.monotonic() - t0 < 1.0:
        time.sleep(0.01)
    # (Threads of earlier tests' loaders may exit meanwhile: at most `before`.)
    assert _threads() <= before, f"{_threads() - before} thread(s) left behind"
    assert time.monotonic() - t0 < 1.0


def test_break_then_iterate_runs_next_epoch(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=10, image_size=32, output="numpy")
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert sum(1 for _ in loader) == 10
    assert loader.epoch == 2


def test_batches_outlive_the_loader_and_buffers_are_pooled(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=10, image_size=32, output="numpy",
                           train=False, shuffle=False)
    kept = next(iter(loader))
    first = kept[0].copy()
    for _ in range(3):
        for _ in loader:
            pass
    assert loader.stats()["pool_buffers"] <= 6  # reused, not one per batch
    loader.close()
    del loader
    gc.collect()
    np.testing.assert_array_equal(kept[0], first)  # still valid, never overwritten


_RESUME = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import stoker
    uri, mode = sys.argv[1], sys.argv[2]
    loader = stoker.Loader(uri, batch_size=8, image_size=48, seed=3, output="numpy")
    if mode == "full":
        loader.set_epoch(1)
        out = [hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest() for x, y in loader]
    elif mode == "first":
        loader.set_epoch(1)
        it = iter(loader)
        out = [hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()
               for x, y in (next(it) for _ in range(5))]
        out = {"seen": out, "state": loader.state_dict()}
    else:
        loader.load_state_dict(json.loads(sys.stdin.read()))
        out = [hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest() for x, y in loader]
    print(json.dumps(out))
""")


def _python(*args, stdin=""):
    done = subprocess.run([sys.executable, "-c", _RESUME, *map(str, args)], input=stdin,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_state_dict_resumes_in_a_new_process(mini_dataset):
    full = _python(mini_dataset, "full")
    first = _python(mini_dataset, "first")
    assert first["seen"] == full[:5]
    assert first["state"]["batches_done"] == 5 and first["state"]["epoch"] == 1
    rest = _python(mini_dataset, "rest", stdin=json.dumps(first["state"]))
    assert rest == full[5:]


def test_state_from_another_setup_is_refused(mini_dataset):
    a = stoker.Loader(mini_dataset, batch_size=8, output="numpy")
    b = stoker.Loader(mini_dataset, batch_size=16, output="numpy")
    with pytest.raises(stoker.StokerError, match="batch_size"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError):
        b.load_state_dict({"epoch": 1})


def test_bad_options_are_errors(mini_dataset, tmp_path):
    with pytest.raises(ValueError, match="dtype"):
        stoker.Loader(mini_dataset, dtype="int7", output="numpy")
    with pytest.raises(ValueError, match="normalize"):
        stoker.Loader(mini_dataset, normalize=True, output="numpy")
    with pytest.raises(ValueError, match="output"):
        stoker.Loader(mini_dataset, output="tensorflow")
    with pytest.raises(ValueError):
        stoker.Loader(mini_dataset, rank=3, world_size=2, output="numpy")
    with pytest.raises(FileNotFoundError):
        stoker.Loader(tmp_path / "none", output="numpy")


def test_dlpack_output_is_a_capsule_over_the_same_memory(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=4, image_size=32, output="dlpack",
                           train=False, shuffle=False)
    images, labels = next(iter(loader))
    assert type(images).__name__ == "PyCapsule"
    ref = stoker.Loader(mini_dataset, batch_size=4, image_size=32, output="numpy",
                        train=False, shuffle=False)
    want, _ = next(iter(ref))
    if hasattr(np, "from_dlpack"):
        class _Wrap:  # numpy takes objects with __dlpack__, not bare capsules
            def __init__(self, capsule):
                self.capsule = capsule

            def __dlpack__(self, **kwargs):
                return self.capsule

            def __dlpack_device__(self):
                return (1, 0)

        np.testing.assert_array_equal(np.from_dlpack(_Wrap(images)), want)


def test_torch_tensors_share_the_batch_buffer(mini_dataset):
    torch = pytest.importorskip("torch")
    loader = stoker.Loader(mini_dataset, batch_size=10, image_size=32, train=False,
                           shuffle=False)
    images, labels = next(iter(loader))
    assert isinstance(images, torch.Tensor) and images.dtype == torch.uint8
    assert images.shape == (10, 3, 32, 32) and labels.dtype == torch.int64
    ref = stoker.Loader(mini_dataset, batch_size=10, image_size=32, output="numpy",
                        train=False, shuffle=False)
    want, _ = next(iter(ref))
    assert torch.equal(images, torch.from_numpy(want))


def test_cli_bench_reports_json(mini_dataset):
    cli = pathlib.Path(sys.executable).parent / "stoker"
    out = subprocess.run([str(cli), "bench", str(mini_dataset), "--batch-size", "16",
                          "--image-size", "64", "--epochs", "2", "--json"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    report = json.loads(out)
    assert report["samples"] == 200 and len(report["epochs"]) == 2
    assert report["samples_per_s"] > 0 and report["peak_rss_bytes"] > 0
    assert report["skipped"] == 0


def test_sharded_distribution_gives_each_rank_its_own_shards(mini_dataset):
    shards = [s["records"] for s in stoker.inspect(mini_dataset)["shard_list"]]
    assert len(shards) >= 2
    starts = np.cumsum([0] + shards)
    index = {rec.payload: i for i, rec in enumerate(stoker.Dataset(mini_dataset))}
    counts = []
    for rank in range(2):
        loader = stoker.Loader(mini_dataset, batch_size=8, decode="raw", output="numpy",
                               rank=rank, world_size=2, distribution="sharded")
        ids = [index[p] for payloads, _ in loader for p in payloads]
        shard_of = np.searchsorted(starts, ids, side="right") - 1
        assert set(shard_of % 2) == {rank}
        counts.append(len(ids))
        assert loader.state_dict()["distribution"] == "sharded"
    assert counts[0] == counts[1]  # evened out (padded) so no rank waits for another
    with pytest.raises(ValueError, match="shards for"):
        stoker.Loader(mini_dataset, output="numpy", rank=0, world_size=len(shards) + 1,
                      distribution="sharded")


def test_shuffle_window_reads_shards_front_to_back(mini_dataset):
    loader = stoker.Loader(mini_dataset, batch_size=100, decode="raw", output="numpy",
                           shuffle_window=4, seed=1)
    index = {rec.payload: i for i, rec in enumerate(stoker.Dataset(mini_dataset))}
    (payloads, _), = list(loader)
    ids = [index[p] for p in payloads]
    assert sorted(ids) == list(range(100))
    shards = [s["records"] for s in stoker.inspect(mini_dataset)["shard_list"]]
    shard_of = np.searchsorted(np.cumsum([0] + shards), ids, side="right") - 1
    # Shards are streamed one after another: few switches between shards.
    switches = int(np.count_nonzero(np.diff(shard_of)))
    assert switches < 4 * len(shards)

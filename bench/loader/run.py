#!/usr/bin/env python3
"""Loader benchmark: stoker.Loader against its peers, on the same JPEGs.

Every peer delivers the same thing: batches of 224x224 uint8 images in NCHW
layout with their labels, in two modes,

  train  RandomResizedCrop(224) (torchvision's default scale and ratio) and a
         random horizontal flip;
  eval   Resize(256) (shorter side) and CenterCrop(224).

Peers (--only picks some):

  torch       torchvision ImageFolder + PIL + the torchvision transforms and
              PILToTensor in a PyTorch DataLoader, num_workers 0, 1 and 2;
  webdataset  the same files in tar shards, decoded with PIL and the same
              transforms, in a DataLoader, num_workers 0, 1 and 2;
  dali        an NVIDIA DALI CPU-only pipeline (device_id=None), one thread
              per core; train uses DALI's fused ROI decode
              (decoders.image_random_crop), as DALI's own examples do;
  stoker      stoker.Loader with one thread per core, plus threads=1 and
              threads=2 for scaling; it runs under stoker's own interpreter
              (--stoker-python), the others under this one;
  decode      the physical limit: full-size RGB decode with libjpeg-turbo
              (simplejpeg) of the same files from memory on one core, times
              the core count.

The images (all splits of an ImageFolder tree, or an even --quick subset) are
first copied into one flat ImageFolder tree in a temporary folder, which every
peer reads (warm page cache); the WebDataset shards and stoker's packed
dataset are made from that copy. Each measurement then runs in its own
subprocess, one after another: after WARMUP_BATCHES batches it times full
epochs (--epochs), while this process samples the resident memory (VmRSS) of
the subprocess and all its descendants every 50 ms and keeps the peak of the
sum. The subprocess also reports max(ru_maxrss) over itself and its reaped
children as a cross-check (the largest single process, not a sum). Pss would
count pages shared by forked workers fairly, but reading smaps_rollup of a
process that has imported torch takes ~13 ms, which would steal the CPU being
measured. "at start" is the measured process's RSS before its first batch
(imports and loader construction), the floor under its peak.

Outputs: torch and webdataset yield torch tensors; DALI numpy arrays (as_array
of its CPU output); stoker torch tensors if its interpreter has torch, else
numpy arrays. Every peer's first batch is checked to be Nx3x224x224 uint8.

Usage, with the venv made by bench/loader/setup.sh:

  .venv-bench/bin/python bench/loader/run.py [--quick] [--only stoker,torch]
      [--data DIR] [--batch-size N] [--epochs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchlib import describe_machine  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared/datasets/clothing-small"
DEFAULT_STOKER_PYTHON = Path(__file__).resolve().parents[2] / ".venv/bin/python"

PEERS = ("torch", "webdataset", "dali", "stoker", "decode")
MODES = {
    "train": "RandomResizedCrop(224) + RandomHorizontalFlip",
    "eval": "Resize(256) + CenterCrop(224)",
}
# Folder names that stoker pack also takes as split folders above the classes.
SPLIT_NAMES = {"train", "validation", "val", "valid", "test", "dev"}
JPEG_SUFFIXES = {".jpg", ".jpeg"}

IMAGE_SIZE = 224
RESIZE_SIZE = 256
QUICK_IMAGES = 600
WARMUP_BATCHES = 3
DATALOADER_WORKERS = (0, 1, 2)
# A multiple of every DataLoader worker count, so that workers get equal shares.
WDS_SHARDS = 8
SCALING_THREADS = (1, 2)
SCALING_GOAL = 1.8
DECODE_MIN_SECONDS = 2.0
SAMPLE_PERIOD_S = 0.05
SEED = 0
# Prefix of the one stdout line that carries a worker's result.
RESULT_PREFIX = "STOKER-BENCH-RESULT "


# --------------------------------------------------------------------------
# Worker side: one measurement per process.
# --------------------------------------------------------------------------

Batches = Iterable[tuple[Any, Any]]


def _vmrss_kib(pid: int) -> int:
    """The VmRSS of a process in KiB; 0 if it is gone or has no memory."""
    try:
        with open(f"/proc/{pid}/status") as lines:
            for line in lines:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _time_epochs(epoch: Callable[[], Batches], epochs: int) -> dict:
    """Checks the output contract, warms up, then times `epochs` full epochs.

    `epoch()` starts one epoch and yields (images, labels) batches. Also
    returns this process's RSS before the first batch: the imports and the
    loader's construction, the floor under the peak.
    """
    start_rss_kib = _vmrss_kib(os.getpid())
    for index, (images, labels) in enumerate(epoch()):
        if index == 0:
            shape = tuple(images.shape[1:])
            if shape != (3, IMAGE_SIZE, IMAGE_SIZE) or "uint8" not in str(images.dtype):
                raise RuntimeError(f"batch is {shape} {images.dtype}, not 3x224x224 uint8")
            if len(labels) != len(images):
                raise RuntimeError(f"{len(labels)} labels for {len(images)} images")
        if index + 1 == WARMUP_BATCHES:
            break
    images_done, seconds = 0, []
    for _ in range(epochs):
        start = time.perf_counter()
        for images, _labels in epoch():
            images_done += len(images)
        seconds.append(time.perf_counter() - start)
    return {"images": images_done, "epoch_seconds": seconds, "start_rss_kib": start_rss_kib}


def _torch_transform(train: bool):
    from torchvision import transforms

    if train:
        steps = [transforms.RandomResizedCrop(IMAGE_SIZE), transforms.RandomHorizontalFlip()]
    else:
        steps = [transforms.Resize(RESIZE_SIZE), transforms.CenterCrop(IMAGE_SIZE)]
    return transforms.Compose(steps + [transforms.PILToTensor()])


def _dataloader(dataset, spec: dict, shuffle: bool):
    import torch

    torch.manual_seed(SEED)  # seeds the transforms here and in the workers
    workers = spec["workers"]
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=spec["batch_size"],
        shuffle=shuffle,
        num_workers=workers,
        # Workers outlive the warm-up, so the timed epoch does not pay their start.
        persistent_workers=workers > 0,
    )


def _torch_versions() -> dict:
    import PIL
    import torch
    import torchvision

    return {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "pillow": PIL.__version__}


def run_torch(spec: dict) -> dict:
    from torchvision.datasets import ImageFolder

    train = spec["mode"] == "train"
    dataset = ImageFolder(spec["images_dir"], transform=_torch_transform(train))
    loader = _dataloader(dataset, spec, shuffle=train)
    result = _time_epochs(lambda: loader, spec["epochs"])
    del loader  # joins the workers, so that ru_maxrss counts them
    return {**result, "output": "torch", "versions": _torch_versions()}


def run_webdataset(spec: dict) -> dict:
    import webdataset as wds

    train = spec["mode"] == "train"
    urls = sorted(str(path) for path in Path(spec["shards_dir"]).glob("*.tar"))
    dataset = wds.WebDataset(urls, shardshuffle=len(urls) if train else False,
                             seed=SEED, empty_check=False)
    if train:
        dataset = dataset.shuffle(1000)
    dataset = (dataset.decode("pil").to_tuple("jpg", "cls")
               .map_tuple(_torch_transform(train), int))
    loader = _dataloader(dataset, spec, shuffle=False)
    result = _time_epochs(lambda: loader, spec["epochs"])
    del loader
    return {**result, "output": "torch",
            "versions": {**_torch_versions(), "webdataset": wds.__version__}}


def run_dali(spec: dict) -> dict:
    import nvidia.dali as dali
    from nvidia.dali import fn, pipeline_def, types

    train = spec["mode"] == "train"

    @pipeline_def
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=spec["images_dir"], random_shuffle=train,
                                        name="reader")
        if train:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=IMAGE_SIZE, resize_y=IMAGE_SIZE)
            mirror = fn.random.coin_flip()
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=RESIZE_SIZE)
            mirror = False
        images = fn.crop_mirror_normalize(images, dtype=types.UINT8, output_layout="CHW",
                                          crop=(IMAGE_SIZE, IMAGE_SIZE), mirror=mirror)
        return images, labels

    # device_id=None: a CPU-only pipeline, which needs no GPU or CUDA driver.
    pipe = pipeline(batch_size=spec["batch_size"], num_threads=spec["threads"],
                    device_id=None, seed=SEED)
    pipe.build()
    batches = math.ceil(pipe.epoch_size("reader") / spec["batch_size"])

    def epoch() -> Batches:
        # DALI's reader streams on across epochs, filling the last batch from
        # the next epoch, so an epoch here is the same number of batches.
        for _ in range(batches):
            images, labels = pipe.run()
            yield images.as_array(), labels.as_array()

    result = _time_epochs(epoch, spec["epochs"])
    return {**result, "output": "numpy", "versions": {"dali": dali.__version__}}


def run_stoker(spec: dict) -> dict:
    import stoker

    try:
        import torch  # noqa: F401  (only to choose the output type)
        output = "torch"
    except ImportError:
        output = "numpy"
    train = spec["mode"] == "train"
    with stoker.Loader(spec["dataset_dir"], batch_size=spec["batch_size"],
                       image_size=IMAGE_SIZE, train=train, shuffle=train, seed=SEED,
                       output=output, layout="NCHW", dtype="uint8",
                       threads=spec["threads"]) as loader:
        result = _time_epochs(lambda: loader, spec["epochs"])
        stats = loader.stats()
    return {**result, "output": output, "stats": stats,
            "versions": {"stoker": stoker.__version__}}


def run_decode(spec: dict) -> dict:
    """Single-core full-size RGB decode rate with libjpeg-turbo, bytes in memory."""
    import simplejpeg

    blobs = [path.read_bytes() for path in sorted(Path(spec["images_dir"]).rglob("*"))
             if path.is_file()]
    headers = [simplejpeg.decode_jpeg_header(blob) for blob in blobs]
    for blob in blobs[:WARMUP_BATCHES * spec["batch_size"]]:
        simplejpeg.decode_jpeg(blob, colorspace="RGB")
    images_done, start = 0, time.perf_counter()
    while True:
        for blob in blobs:
            simplejpeg.decode_jpeg(blob, colorspace="RGB")
        images_done += len(blobs)
        seconds = time.perf_counter() - start
        if seconds >= DECODE_MIN_SECONDS:
            break
    return {
        "images": images_done, "epoch_seconds": [seconds], "output": "decode only",
        "mean_bytes": sum(map(len, blobs)) / len(blobs),
        "mean_height": sum(header[0] for header in headers) / len(headers),
        "mean_width": sum(header[1] for header in headers) / len(headers),
        "versions": {"simplejpeg": simplejpeg.__version__},
    }


RUNNERS = {"torch": run_torch, "webdataset": run_webdataset, "dali": run_dali,
           "stoker": run_stoker, "decode": run_decode}


def worker_main(spec: dict) -> None:
    """Runs one measurement and prints its result, or the error that stopped it."""
    try:
        result = RUNNERS[spec["peer"]](spec)
    except Exception as error:  # reported as the peer's outcome, e.g. DALI without a GPU
        message = " ".join(str(error).split())
        print(RESULT_PREFIX + json.dumps({"error": f"{type(error).__name__}: {message}"}),
              flush=True)
        raise
    gc.collect()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result["ru_maxrss_kib"] = max(own, children)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# --------------------------------------------------------------------------
# Orchestrator side: data preparation, subprocesses, memory sampling, report.
# --------------------------------------------------------------------------

def cores() -> int:
    return len(os.sched_getaffinity(0))


def list_images(root: Path) -> list[tuple[Path, str, str]]:
    """(path relative to root, class name, flat name) of every JPEG, by path.

    Takes an ImageFolder tree, with or without split folders above the
    classes. The flat name joins the path less its class folder with "__"
    (train/dress/a.jpg -> train__a.jpg), unique within the class.
    """
    tops = [path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")]
    split_layout = bool(tops) and all(path.name in SPLIT_NAMES for path in tops)
    images = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() not in JPEG_SUFFIXES or not path.is_file():
            continue
        relative = path.relative_to(root)
        class_at = 1 if split_layout else 0
        if len(relative.parts) >= class_at + 2:
            rest = relative.parts[:class_at] + relative.parts[class_at + 1:]
            images.append((relative, relative.parts[class_at], "__".join(rest)))
    return images


def stage(root: Path, images: list[tuple[Path, str, str]],
          dst: Path) -> list[tuple[Path, int]]:
    """Copies the images into one ImageFolder tree, dst/<class>/<flat name>.

    Returns (copied path, label) with labels numbered in sorted class order,
    as ImageFolder, DALI's file reader and stoker pack number them.
    """
    classes = sorted({class_name for _, class_name, _ in images})
    labels = {name: label for label, name in enumerate(classes)}
    staged = []
    for relative, class_name, flat_name in images:
        target = dst / class_name / flat_name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, target)
        staged.append((target, labels[class_name]))
    return staged


def write_shards(staged: list[tuple[Path, int]], dst: Path) -> None:
    """Writes WDS_SHARDS WebDataset tar shards of the images, in shuffled order."""
    order = list(range(len(staged)))
    random.Random(SEED).shuffle(order)
    dst.mkdir(parents=True)
    for shard in range(WDS_SHARDS):
        with tarfile.open(dst / f"shard-{shard:05d}.tar", "w") as tar:
            for index in order[shard::WDS_SHARDS]:
                path, label = staged[index]
                tar.add(path, arcname=f"{index:06d}.jpg")
                member = tarfile.TarInfo(f"{index:06d}.cls")
                payload = str(label).encode()
                member.size = len(payload)
                tar.addfile(member, io.BytesIO(payload))


def probe_stoker(python: Path) -> Optional[str]:
    """None if `python` can import stoker.Loader, else why not."""
    if not python.exists():
        return f"no interpreter at {python}"
    probe = subprocess.run([str(python), "-c", "import stoker; stoker.Loader"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {probe.returncode}"


def pack_for_stoker(python: Path, src: Path, dst: Path) -> None:
    script = "import stoker, sys; stoker.pack(src=sys.argv[1], dst=sys.argv[2], strict=True)"
    subprocess.run([str(python), "-c", script, str(src), str(dst)], check=True)


class TreeMemorySampler(threading.Thread):
    """Samples the summed VmRSS of a process and all its descendants.

    Keeps the peak, in KiB, and the most processes seen at once. A process
    that exits between listing and reading is skipped for that sample.
    Descendants are found through /proc/PID/task/TID/children (a kernel with
    CONFIG_PROC_CHILDREN, as distribution kernels are built).
    """

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self._pid = pid
        self._done = threading.Event()
        self.peak_rss_kib = 0
        self.peak_processes = 0

    def stop(self) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        while True:
            self._sample()
            if self._done.wait(SAMPLE_PERIOD_S):
                return

    def _sample(self) -> None:
        pids = self._tree(self._pid)
        rss = sum(_vmrss_kib(pid) for pid in pids)
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        self.peak_processes = max(self.peak_processes, len(pids))

    @staticmethod
    def _tree(root: int) -> list[int]:
        pids, pending = [], [root]
        while pending:
            pid = pending.pop()
            pids.append(pid)
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{pid}/task/{task}/children") as children:
                        pending.extend(int(child) for child in children.read().split())
                except OSError:
                    pass
        return pids


def run_worker(python: Path, spec: dict) -> dict:
    """Runs one measurement in a subprocess; its result, or {"error": why}."""
    command = [str(python), os.path.abspath(__file__), "--worker", json.dumps(spec)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    sampler = TreeMemorySampler(process.pid)
    sampler.start()
    stdout, stderr = process.communicate()
    sampler.stop()
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    result = {**spec, **json.loads(lines[-1][len(RESULT_PREFIX):])} if lines else dict(spec)
    if process.returncode != 0 or "error" in result:
        tail = [line for line in stderr.strip().splitlines() if line.strip()]
        result.setdefault("error", tail[-1] if tail else f"exit status {process.returncode}")
        result["stderr_tail"] = tail[-20:]
        return result
    result["rate"] = result["images"] / sum(result["epoch_seconds"])
    result["peak_rss_kib"] = sampler.peak_rss_kib
    result["processes"] = sampler.peak_processes
    return result


def config_label(run: dict) -> str:
    if "workers" in run:
        return f"workers={run['workers']}"
    return f"threads={run['threads']}" if "threads" in run else ""


def mib(kib: float) -> str:
    return f"{kib / 1024:.0f}"


def best_of(runs: list[dict], peer: str, mode: str) -> Optional[dict]:
    ok = [run for run in runs if run["peer"] == peer and run.get("mode") == mode
          and "error" not in run and run.get("role") != "scaling"]
    return max(ok, key=lambda run: run["rate"], default=None)


def report(runs: list[dict]) -> dict:
    """Prints the tables; returns the summary (best runs, ratios, limit, scaling)."""
    summary: dict = {"modes": {}}
    decode = next((run for run in runs if run["peer"] == "decode" and "error" not in run), None)
    limit = decode["rate"] * cores() if decode else None
    for mode, description in MODES.items():
        mode_runs = [run for run in runs if run.get("mode") == mode]
        if not mode_runs:
            continue
        stoker = best_of(runs, "stoker", mode)
        print(f"\n{mode}: {description}")
        header = (f"{'peer':<11} {'config':<10} {'images/s':>9} {'peak RSS':>9} "
                  f"{'at start':>9} {'ru_maxrss':>9} {'procs':>5}  stoker/peer")
        print(header + "\n" + "-" * len(header))
        for run in mode_runs:
            if "error" in run:
                print(f"{run['peer']:<11} {config_label(run):<10} did not run: {run['error']}")
                continue
            best = best_of(runs, run["peer"], mode) is run
            ratio = f"{stoker['rate'] / run['rate']:.2f}x" if stoker else "-"
            print(f"{run['peer']:<11} {config_label(run):<10} {run['rate']:9.1f} "
                  f"{mib(run['peak_rss_kib']):>5} MiB {mib(run['start_rss_kib']):>5} MiB "
                  f"{mib(run['ru_maxrss_kib']):>5} MiB {run['processes']:>5}  "
                  f"{ratio}{'  (best)' if best and run['peer'] != 'stoker' else ''}")
        best_runs = {}
        for peer in ("torch", "webdataset", "dali", "stoker"):
            best = best_of(runs, peer, mode)
            if best is None:
                continue
            entry = {"config": config_label(best), "rate": best["rate"],
                     "peak_rss_kib": best["peak_rss_kib"]}
            if stoker and peer != "stoker":
                entry["stoker_speedup"] = stoker["rate"] / best["rate"]
                entry["stoker_rss_ratio"] = stoker["peak_rss_kib"] / best["peak_rss_kib"]
            best_runs[peer] = entry
        mode_summary: dict = {"best": best_runs}
        if stoker and limit:
            mode_summary["stoker_fraction_of_decode_limit"] = stoker["rate"] / limit
        summary["modes"][mode] = mode_summary
        if stoker and len(best_runs) > 1:
            print("stoker against each peer's best: " + ", ".join(
                f"{peer} {entry['stoker_speedup']:.2f}x speed, "
                f"{entry['stoker_rss_ratio']:.2f}x RSS"
                for peer, entry in best_runs.items() if peer != "stoker"))

    if decode:
        summary["decode_limit"] = {"single_core_rate": decode["rate"], "cores": cores(),
                                   "limit_rate": limit}
        print(f"\nphysical limit: libjpeg-turbo (simplejpeg {decode['versions']['simplejpeg']}) "
              f"full RGB decode from memory of these JPEGs (mean {decode['mean_width']:.0f}x"
              f"{decode['mean_height']:.0f}, {decode['mean_bytes'] / 1024:.1f} KiB): "
              f"{decode['rate']:.1f} images/s on one core x {cores()} cores "
              f"= {limit:.1f} images/s")
        for mode in MODES:
            fraction = summary["modes"].get(mode, {}).get("stoker_fraction_of_decode_limit")
            if fraction is not None:
                print(f"  stoker {mode}: {fraction:.2f} of the limit")
    elif any(run["peer"] == "decode" for run in runs):
        print("\nphysical limit: did not run: "
              + next(run["error"] for run in runs if run["peer"] == "decode"))

    scaling = {}
    for mode in MODES:
        rates = {}
        for run in runs:
            if (run["peer"] == "stoker" and run.get("mode") == mode and "error" not in run
                    and run["threads"] in SCALING_THREADS):
                rates[run["threads"]] = run["rate"]
        if len(rates) == len(SCALING_THREADS):
            low, high = SCALING_THREADS
            scaling[mode] = {"rates": rates, "ratio": rates[high] / rates[low]}
    if scaling:
        print(f"\nstoker scaling, threads={SCALING_THREADS[1]} over threads={SCALING_THREADS[0]} "
              f"(goal >= {SCALING_GOAL}):")
        for mode, entry in scaling.items():
            low, high = SCALING_THREADS
            verdict = "meets" if entry["ratio"] >= SCALING_GOAL else "misses"
            print(f"  {mode}: {entry['rates'][low]:.1f} -> {entry['rates'][high]:.1f} images/s, "
                  f"{entry['ratio']:.2f}x ({verdict} the goal)")
        summary["scaling"] = scaling
    return summary


def parse_only(values: Optional[list[str]]) -> list[str]:
    if not values:
        return list(PEERS)
    names = [name for value in values for name in value.split(",") if name]
    unknown = sorted(set(names) - set(PEERS))
    if unknown:
        raise SystemExit(f"--only: unknown peer(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(PEERS)}")
    return [peer for peer in PEERS if peer in names]


def plan(peers: list[str], batch_size: int, epochs: int) -> list[dict]:
    """The measurements to make, in order: each a worker spec less its paths."""
    specs = []
    for mode in MODES:
        base = {"mode": mode, "batch_size": batch_size, "epochs": epochs}
        for peer in ("torch", "webdataset"):
            if peer in peers:
                specs += [{**base, "peer": peer, "workers": w} for w in DATALOADER_WORKERS]
        if "dali" in peers:
            specs.append({**base, "peer": "dali", "threads": cores()})
        if "stoker" in peers:
            specs.append({**base, "peer": "stoker", "threads": cores()})
            specs += [{**base, "peer": "stoker", "threads": t, "role": "scaling"}
                      for t in SCALING_THREADS if t != cores()]
    if "decode" in peers:
        specs.append({"peer": "decode", "batch_size": batch_size})
    return specs


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Benchmarks stoker.Loader against PyTorch DataLoader, WebDataset and "
                    "DALI on the same JPEGs, with the libjpeg-turbo decode limit.")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="ImageFolder tree, optionally with split folders (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1, help="timed epochs per measurement")
    parser.add_argument("--quick", action="store_true",
                        help=f"use an even subset of {QUICK_IMAGES} images (smoke test)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help=f"peers to run, comma or space separated: {', '.join(PEERS)}")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write all results here")
    parser.add_argument("--stoker-python", type=Path, default=DEFAULT_STOKER_PYTHON,
                        help="interpreter that can import stoker (default: %(default)s)")
    parser.add_argument("--tmp", type=Path, help="folder for the temporary copies (default: system)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(json.loads(args.worker))
        return
    if args.batch_size < 1 or args.epochs < 1:
        parser.error("--batch-size and --epochs must be positive")
    peers = parse_only(args.only)

    images = list_images(args.data)
    if not images:
        raise SystemExit(f"no JPEGs in class folders under {args.data}")
    total = len(images)
    if args.quick and total > QUICK_IMAGES:
        images = [images[i * total // QUICK_IMAGES] for i in range(QUICK_IMAGES)]

    stoker_python = args.stoker_python
    skipped = []
    if "stoker" in peers:
        why = probe_stoker(stoker_python)
        if why:
            skipped.append({"peer": "stoker", "error": f"cannot use stoker.Loader "
                                                       f"with {stoker_python}: {why}"})
            peers.remove("stoker")

    print(f"machine: {describe_machine(cores())}")
    print(f"data: {args.data}, {len(images)} of {total} JPEGs; batch {args.batch_size}, "
          f"{IMAGE_SIZE}x{IMAGE_SIZE} uint8 NCHW; {args.epochs} timed epoch(s) after "
          f"{WARMUP_BATCHES} warm-up batches")
    for entry in skipped:
        print(f"{entry['peer']}: skipped: {entry['error']}")

    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="stoker-loader-bench-", dir=args.tmp) as tmp:
        paths = {"images_dir": str(Path(tmp) / "images"),
                 "shards_dir": str(Path(tmp) / "shards"),
                 "dataset_dir": str(Path(tmp) / "stoker")}
        staged = stage(args.data, images, Path(paths["images_dir"]))
        if "webdataset" in peers:
            write_shards(staged, Path(paths["shards_dir"]))
        if "stoker" in peers:
            pack_for_stoker(stoker_python, Path(paths["images_dir"]), Path(paths["dataset_dir"]))
        for spec in plan(peers, args.batch_size, args.epochs):
            python = stoker_python if spec["peer"] == "stoker" else Path(sys.executable)
            run = run_worker(python, {**spec, **paths})
            for key in paths:
                run.pop(key)
            if "error" in run:
                print(f"{run['peer']} {run.get('mode', '')} {config_label(run)}: "
                      f"did not run: {run['error']}", file=sys.stderr)
            runs.append(run)

    summary = report(runs)
    if args.json:
        document = {
            "machine": describe_machine(cores()), "cores": cores(), "data": str(args.data),
            "images": len(images), "images_in_data": total, "quick": args.quick,
            "batch_size": args.batch_size, "epochs": args.epochs,
            "warmup_batches": WARMUP_BATCHES, "image_size": IMAGE_SIZE,
            "modes": MODES, "command": sys.argv, "runs": skipped + runs, "summary": summary,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()

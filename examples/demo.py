"""The main job on the sample data: pack, verify, read back, load, report.

Run by `make demo`. Uses the `stoker` CLI installed next to this Python and
the `stoker` module, on data/clothing-mini (100 CC0 photos, 10 classes).
"""
import json
import pathlib
import shutil
import subprocess
import sys
import time

import stoker

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "data" / "clothing-mini"
OUT = ROOT / "out" / "demo"
CLI = pathlib.Path(sys.executable).parent / "stoker"


def run(*args):
    print("$ stoker " + " ".join(str(a) for a in args), flush=True)
    done = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"stoker {args[0]} failed ({done.returncode}):\n{done.stderr}{done.stdout}")
    return done.stdout


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    dataset = OUT / "clothing-mini"
    resized = OUT / "clothing-mini-256"

    # 1. Pack: every photo into shards, with an index and per-record CRC-32C.
    summary = json.loads(run("pack", SRC, dataset, "--shard-size", "1MiB", "--json"))
    print(f"  packed {summary['records']} records in {summary['classes']} classes into "
          f"{summary['shards']} shards, {summary['bytes'] / 1e6:.2f} MB in "
          f"{summary['seconds']:.3f} s; rejected: {len(summary['rejected'])}")

    # 2. Pack again, resizing ahead of time (shorter side 256, quality 90).
    small = json.loads(run("pack", SRC, resized, "--resize", "256", "--json"))
    print(f"  resized {small['resized']} images: {summary['payload_bytes'] / 1e6:.2f} MB -> "
          f"{small['payload_bytes'] / 1e6:.2f} MB of JPEG in {small['seconds']:.3f} s "
          f"({small['records'] / max(small['seconds'], 1e-9):.0f} images/s)")

    # 3. Inspect and verify: every record read, every checksum checked.
    print(run("inspect", dataset).rstrip())
    report = json.loads(run("verify", dataset, "--json"))
    print(f"  verify: ok={report['ok']}, {report['records_ok']} records intact, "
          f"{report['bytes'] / 1e6:.2f} MB in {report['seconds']:.3f} s")
    if not report["ok"]:
        sys.exit("verify found damage: " + json.dumps(report["corruptions"], indent=2))

    # 4. Read it back through the Python module and compare with the sources.
    t0 = time.perf_counter()
    ds = stoker.Dataset(str(dataset))
    names = ds.label_names
    same = 0
    nbytes = 0
    for rec in ds:
        source = SRC / rec.key
        if source.read_bytes() != rec.payload:
            sys.exit(f"record {rec.key} differs from {source}")
        if names[rec.label] != source.parent.name:
            sys.exit(f"record {rec.key} has label {rec.label} ({names[rec.label]})")
        same += 1
        nbytes += len(rec.payload)
    dt = time.perf_counter() - t0
    print(f"  read back {same}/{len(ds)} records, byte-identical to their source files, "
          f"labels right ({nbytes / 1e6:.2f} MB in {dt:.3f} s)")

    # 5. Load batches: decode + RandomResizedCrop + flip in native threads.
    loader = stoker.Loader(str(dataset), batch_size=25, image_size=224, output="numpy", seed=0)
    t0 = time.perf_counter()
    shapes = [images.shape for images, labels in loader]
    dt = time.perf_counter() - t0
    stats = loader.stats()
    print(f"  loaded 1 epoch: {len(shapes)} batches of {shapes[0]} uint8, "
          f"{stats['samples']} samples in {dt:.3f} s ({stats['samples'] / dt:.0f} images/s), "
          f"first batch after {stats['first_batch_seconds']:.3f} s, skipped {stats['skipped']}")
    print(f"demo done: datasets in {OUT}")


if __name__ == "__main__":
    main()

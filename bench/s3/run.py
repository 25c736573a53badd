#!/usr/bin/env python3
"""S3 benchmark: stoker reading s3:// datasets from an emulated object store.

The store: nginx serving a temporary folder on 127.0.0.1 (config generated
here, in the temporary folder; nothing in /etc is used or changed), behind
objstore_proxy.py, which adds a time to first byte per request (--ttfb-ms,
default 20) and a bandwidth cap per connection (--bandwidth, default 25MB/s).
Path-style URLs: http://127.0.0.1:<proxy>/<bucket>/<key> is the file
<tmp>/www/<bucket>/<key>. Both servers are started here and always stopped
at the end, failures included.

A. Small objects against large ones (the same ~100 MB of random bytes):
   20,000 objects of 5 kB (bucket "small") against those same records packed
   by stoker.pack into ~20 shards of 5 MB (s3://bench/ds).
     - the emulated store itself: time to first byte of a 5 kB GET on a kept
       alive connection, and the bandwidth of reading the shards with curl
       over 1, 8 and (one per shard) all connections: the limits;
     - boto3 get_object of every small object, sequentially (a timed subset,
       --seq-objects, extrapolated to all) and with 32 threads sharing one
       client (max_pool_connections=32); and boto3 with 32 threads on the
       shards, for reference;
     - stoker.Loader(decode="raw", batch_size=256, shuffle=False) reading
       every record of s3://bench/ds in mode pipe, fastfile (fresh cache) and
       file (fresh local_dir): seconds from Loader() to the last batch.
   Goals: stoker >= 10x boto3 with 32 threads; stoker's MB/s >= 0.9 of the
   emulated aggregate bandwidth it could use, taken as curl over 8
   connections (stoker's read-ahead depth: 8 parts of a large read, 8 shards
   ahead in fastfile); the fractions of the 1, 2 and 21 connection limits
   are printed too.

B. Input modes on clothing-small (--data), packed once into the store with
   shard_size 16MB and shuffle_seed 1 (s3://bench/clothing): Loader(batch 64,
   image_size 224, output numpy, default train transform) in mode file, pipe
   and fastfile (fresh local_dir / cache_dir per run), and from the packed
   local folder for reference: time to first batch, epochs 1 and 2, stats()
   (cache_hits, cache_misses, bytes_downloaded), bytes through the proxy per
   epoch and peak RSS (VmHWM of the measuring process).
   Pipe also runs with shuffle=False (shards streamed front to back, no
   shuffle window).
   Goals: pipe's first batch <= 1 s; fastfile's epoch 2 >= 0.9 of the local
   folder's speed; pipe's peak RSS above the local run's within its read-ahead
   budget (rings x pipe_parts 8 x part 2 MiB, docs/input_modes.md).
   A measurement that runs past --timeout is stopped and reported with what
   it had done (progress, bytes through the proxy).

Every measurement runs in its own subprocess (this file with --worker, the
spec as JSON on stdin), one after another; --repeat N runs the cheap ones N
times and reports medians (boto3 runs once). The page cache is warm (nginx
reads the same files every time); the fastfile cache and file local_dir sit on
the same disk.

Usage (stoker's venv; bench/s3/setup.sh installs nginx and boto3):

  .venv/bin/python bench/s3/run.py [--quick] [--json PATH] [--repeat N]
      [--only a,b] [--ttfb-ms 20] [--bandwidth 25MB] [--seq-objects 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchlib import describe_machine  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_DATA = ROOT.parent / "shared/datasets/clothing-small"
PROXY = HERE / "objstore_proxy.py"
RESULT_PREFIX = "STOKER-S3-BENCH-RESULT "
PROGRESS_PREFIX = "STOKER-S3-BENCH-PROGRESS "

SMALL_OBJECTS = 20_000
SMALL_SIZE = 5_000            # bytes: "5 kB"
SHARD_SIZE_A = "5MB"          # 20,000 x 5 kB -> ~20 shards of 5 MB
CLOTHING_SHARD_SIZE = "16MB"
CLOTHING_SEED = 1
QUICK_FACTOR = 10
BOTO3_THREADS = 32
LIMIT_CONNECTIONS = (1, 2, 8) # plus "one per shard"
STOKER_MAX_REQUESTS = 8       # read-ahead depth: parts of a GetRange, fastfile fetches
PROBE_REQUESTS = 50
BATCH_RAW = 256
BATCH_IMAGES = 64
IMAGE_SIZE = 224
EPOCHS_B = 2
PIPE_PARTS = 8                # stoker's defaults (include/stoker/dataset.h)
PIPE_PART_BYTES = 2 << 20
PIPE_WARM_AHEAD = 4
SHUFFLE_WINDOW = 1024         # the Loader's default shuffle_window


def pipe_rings(shards: int, fewest_records: int) -> int:
    """Shards holding a ring at once in pipe mode (src/format/dataset.cc):
    those a shuffle block spans, plus 3, plus those streamed ahead, at least
    2, at most every shard."""
    spanned = -(-SHUFFLE_WINDOW // fewest_records) + 3
    return max(2, min(spanned + PIPE_WARM_AHEAD, shards))
GOAL_VS_BOTO3 = 10.0
GOAL_BANDWIDTH = 0.9
GOAL_PIPE_FIRST_BATCH_S = 1.0
GOAL_FASTFILE_VS_LOCAL = 0.9
BUCKET_SMALL, BUCKET = "small", "bench"
# Part B's runs: the default train loader (shuffle on: pipe uses its 1,024-sample
# window) per mode, and pipe with shuffle=False (shards streamed in order).
B_CONFIGS = ("local", "file", "pipe", "pipe shuffle=False", "fastfile")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench-access-key",
               "AWS_SECRET_ACCESS_KEY": "bench-secret-key",
               "AWS_REGION": "us-east-1"}


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------

def vm_kib(field: str) -> int:
    """VmHWM / VmRSS of this process, KiB."""
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def median_run(runs: list[dict]) -> dict:
    """Field-wise median of numeric fields (first run's other fields); min/max
    of `seconds` beside it."""
    if len(runs) == 1:
        return dict(runs[0], repeats=1)
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
            out[key] = statistics.median(values)
    out["repeats"] = len(runs)
    for key in ("seconds", "epoch2_seconds", "first_batch_seconds"):
        if key in runs[0]:
            out[key + "_range"] = [min(r[key] for r in runs), max(r[key] for r in runs)]
    return out


def describe_stoker(stoker) -> dict:
    """Which build is measured: the extension's mtime and hash, the checkout's HEAD."""
    pkg = Path(stoker.__file__).parent
    info: dict[str, Any] = {"package": str(pkg)}
    native = sorted(pkg.glob("_native*.so"))
    if native:
        import hashlib

        data = native[0].read_bytes()
        info["native"] = native[0].name
        info["native_sha256"] = hashlib.sha256(data).hexdigest()[:12]
        info["native_mtime"] = time.strftime("%Y-%m-%d %H:%M:%S",
                                             time.localtime(native[0].stat().st_mtime))
    try:
        info["checkout_head"] = subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %ci %s"],
            capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


# --------------------------------------------------------------------------
# The servers: nginx + the proxy, always stopped
# --------------------------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    etag on;
    default_type application/octet-stream;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy_temp;
    fastcgi_temp_path {tmp}/fastcgi_temp;
    uwsgi_temp_path {tmp}/uwsgi_temp;
    scgi_temp_path {tmp}/scgi_temp;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""


def find_nginx() -> str:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("nginx not found: run bench/s3/setup.sh")


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{what} did not start (exit {proc.poll()}): {tail}")
        time.sleep(0.05)


class Servers:
    """nginx on a free port serving `root`, and the proxy in front of it."""

    def __init__(self, tmp: Path, root: Path, ttfb_ms: float, bandwidth: str,
                 proxy_log: Optional[Path]):
        self.tmp, self.root = tmp, root
        self.ttfb_ms, self.bandwidth, self.proxy_log = ttfb_ms, bandwidth, proxy_log
        self.nginx: Optional[subprocess.Popen] = None
        self.proxy: Optional[subprocess.Popen] = None
        self.endpoint = ""

    def __enter__(self) -> "Servers":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        nginx_dir = self.tmp / "nginx"
        nginx_dir.mkdir()
        port = free_port()
        conf = nginx_dir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(tmp=nginx_dir, port=port, root=self.root))
        log = nginx_dir / "nginx-error.log"
        self.nginx = subprocess.Popen(
            [find_nginx(), "-p", str(nginx_dir), "-c", str(conf), "-e", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(nginx_dir / "nginx-stderr.log", "w"))
        wait_port(port, self.nginx, "nginx", nginx_dir / "nginx-stderr.log")
        self.nginx_port = port

        port_file = self.tmp / "proxy.port"
        proxy_out = self.tmp / "proxy.log"
        cmd = [sys.executable, str(PROXY), "--upstream", f"127.0.0.1:{port}",
               "--ttfb-ms", str(self.ttfb_ms), "--bandwidth", self.bandwidth,
               "--port-file", str(port_file)]
        if self.proxy_log:
            cmd += ["--log", str(self.proxy_log)]
        self.proxy = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                      stdout=open(proxy_out, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not port_file.exists():
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"proxy did not start: {proxy_out.read_text()[-2000:]}")
            time.sleep(0.05)
        self.proxy_port = int(port_file.read_text())
        wait_port(self.proxy_port, self.proxy, "proxy", proxy_out)
        self.endpoint = f"http://127.0.0.1:{self.proxy_port}"

    def stop(self) -> None:
        for name in ("proxy", "nginx"):
            proc = getattr(self, name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()  # nginx: fast shutdown of master and workers
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        # nginx workers die with their master; make sure none outlived it.
        pid_file = self.tmp / "nginx" / "nginx.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass

    def proxy_stats(self, reset: bool = False) -> dict:
        with urllib.request.urlopen(self.endpoint + "/__proxy__/stats", timeout=10) as r:
            stats = json.load(r)
        if reset:
            urllib.request.urlopen(self.endpoint + "/__proxy__/reset", timeout=10).read()
        return stats


def worker_env(endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") or k in ("AWS_CA_BUNDLE",)}
    env.update(CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
    # Keep the shared ~/.aws files out of it.
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env["AWS_CONFIG_FILE"] = os.devnull
    return env


# --------------------------------------------------------------------------
# Worker side: one measurement per process
# --------------------------------------------------------------------------

def w_probe(spec: dict) -> dict:
    """Sequential GETs of one small object on one kept-alive connection."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", spec["port"], timeout=30)
    times = []
    for _ in range(spec["requests"]):
        t0 = time.perf_counter()
        conn.request("GET", spec["path"])
        resp = conn.getresponse()
        resp.read()
        times.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise RuntimeError(f"GET {spec['path']}: {resp.status}")
    conn.request("HEAD", spec["path"])
    head = conn.getresponse()
    head.read()
    return {"median_seconds": statistics.median(times), "min_seconds": min(times),
            "max_seconds": max(times), "requests": len(times),
            "head_headers": dict(head.getheaders())}


def _boto3_client(spec: dict):
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=spec["endpoint"], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"},
                      max_pool_connections=max(10, spec["threads"]),
                      retries={"max_attempts": 3, "mode": "standard"}))


def w_boto3(spec: dict) -> dict:
    """get_object + read of every key, with `threads` threads sharing one client."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3

    client = _boto3_client(spec)
    bucket, keys = spec["bucket"], spec["keys"]

    def get(key: str) -> int:
        return len(client.get_object(Bucket=bucket, Key=key)["Body"].read())

    t0 = time.perf_counter()
    if spec["threads"] == 1:
        total = sum(get(k) for k in keys)
    else:
        with ThreadPoolExecutor(spec["threads"]) as pool:
            total = sum(pool.map(get, keys, chunksize=16))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "objects": len(keys), "bytes": total,
            "boto3": boto3.__version__, "vmhwm_kib": vm_kib("VmHWM")}


def w_stoker_raw(spec: dict) -> dict:
    """Every record of the dataset, raw bytes, in file order."""
    import stoker

    base_hwm = vm_kib("VmHWM")
    t0 = time.perf_counter()
    loader = stoker.Loader(spec["uri"], decode="raw", output="numpy", batch_size=BATCH_RAW,
                           shuffle=False, mode=spec["mode"], **spec.get("dirs", {}))
    opened = time.perf_counter() - t0
    records = payload = 0
    first = None
    for payloads, _labels in loader:
        if first is None:
            first = time.perf_counter() - t0
        records += len(payloads)
        payload += sum(map(len, payloads))
    seconds = time.perf_counter() - t0
    stats = loader.stats()
    return {"seconds": seconds, "open_seconds": opened, "first_batch_seconds": first,
            "records": records, "payload_bytes": payload,
            "stats": {k: stats.get(k) for k in ("cache_hits", "cache_misses",
                                                 "bytes_downloaded", "bytes_read")},
            "base_vmhwm_kib": base_hwm, "vmhwm_kib": vm_kib("VmHWM")}


def _proxy_stats(endpoint: Optional[str], reset: bool) -> Optional[dict]:
    if not endpoint:
        return None
    with urllib.request.urlopen(endpoint + "/__proxy__/stats", timeout=10) as r:
        stats = json.load(r)
    if reset:
        urllib.request.urlopen(endpoint + "/__proxy__/reset", timeout=10).read()
    return {k: stats[k] for k in ("requests_total", "requests", "body_bytes", "connections",
                                  "peak_active_connections", "statuses")}


def w_stoker_images(spec: dict) -> dict:
    """Epochs of the default train transform; times, stats, wire bytes, VmHWM."""
    import stoker

    endpoint = spec.get("proxy")
    _proxy_stats(endpoint, reset=True)
    base_hwm = vm_kib("VmHWM")
    t0 = time.perf_counter()
    loader = stoker.Loader(spec["uri"], batch_size=BATCH_IMAGES, image_size=IMAGE_SIZE,
                           output="numpy", mode=spec["mode"], **spec.get("dirs", {}),
                           **spec.get("loader", {}))
    opened = time.perf_counter() - t0
    first = None
    epochs = []
    for epoch in range(spec["epochs"]):
        start = time.perf_counter()
        images = 0
        for batch, (x, y) in enumerate(loader):
            if first is None:
                first = time.perf_counter() - t0
                if tuple(x.shape[1:]) != (3, IMAGE_SIZE, IMAGE_SIZE):
                    raise RuntimeError(f"batch shape {x.shape}")
            images += len(x)
            if batch % 5 == 0:  # what the orchestrator reports if we time out
                print(PROGRESS_PREFIX + json.dumps({
                    "open_seconds": opened, "first_batch_seconds": first, "epoch": epoch + 1,
                    "images_this_epoch": images, "since_loader": time.perf_counter() - t0,
                    "vmhwm_kib": vm_kib("VmHWM")}), flush=True)
        end = time.perf_counter()
        stats = loader.stats()
        epochs.append({
            "seconds": end - start,
            "since_loader": end - t0 if epoch == 0 else None,
            "images": images,
            "stats": {k: stats.get(k) for k in ("samples", "cache_hits", "cache_misses",
                                                 "bytes_downloaded", "bytes_read")},
            "wire": _proxy_stats(endpoint, reset=True),
            "vmhwm_kib": vm_kib("VmHWM"),
        })
    return {"open_seconds": opened, "first_batch_seconds": first,
            "epoch1_seconds": epochs[0]["seconds"],
            "epoch1_since_loader_seconds": epochs[0]["since_loader"],
            "epoch2_seconds": epochs[1]["seconds"] if len(epochs) > 1 else None,
            "images_per_epoch": epochs[0]["images"],
            "epochs": epochs, "base_vmhwm_kib": base_hwm, "vmhwm_kib": vm_kib("VmHWM"),
            "vmrss_end_kib": vm_kib("VmRSS")}


WORKERS = {"probe": w_probe, "boto3": w_boto3, "stoker_raw": w_stoker_raw,
           "stoker_images": w_stoker_images}


def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = WORKERS[spec["kind"]](spec)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


# --------------------------------------------------------------------------
# Orchestrator side
# --------------------------------------------------------------------------

class Bench:
    def __init__(self, args, tmp: Path, servers: Servers):
        self.args, self.tmp, self.servers = args, tmp, servers
        self.env = worker_env(servers.endpoint)
        self.fresh = 0
        self.warnings: list[str] = []

    def fresh_dir(self, name: str) -> str:
        self.fresh += 1
        path = self.tmp / "client" / f"{name}-{self.fresh}"
        path.parent.mkdir(exist_ok=True)
        return str(path)

    def worker(self, spec: dict, timeout: Optional[float] = None) -> dict:
        """Runs one measurement in a subprocess; attaches the proxy's counters
        (reset before it). On failure or timeout returns {"error": ...} with
        the stderr tail and the last progress line."""
        timeout = timeout or self.args.timeout
        self.servers.proxy_stats(reset=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker"],
                                  input=json.dumps(spec), capture_output=True, text=True,
                                  env=self.env, timeout=timeout)
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
            timed_out = False
        except subprocess.TimeoutExpired as e:  # run() has killed the worker
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            stdout, stderr, rc, timed_out = text(e.stdout), text(e.stderr), None, True
        wall = time.perf_counter() - t0
        wire = {k: v for k, v in self.servers.proxy_stats().items()
                if k in ("requests_total", "requests", "body_bytes", "connections",
                         "peak_active_connections", "statuses")}
        warnings_seen = sorted({l.strip() for l in stderr.splitlines()
                                if "warning" in l.lower() and l.strip()})
        for w in warnings_seen:
            if w not in self.warnings:
                self.warnings.append(w)
        lines = [l for l in stdout.splitlines() if l.startswith(RESULT_PREFIX)]
        progress = [l for l in stdout.splitlines() if l.startswith(PROGRESS_PREFIX)]
        if timed_out or rc != 0 or not lines:
            tail = [l for l in (stderr + stdout).splitlines()
                    if l.strip() and not l.startswith(PROGRESS_PREFIX)]
            error = (f"timed out after {timeout:g} s" if timed_out else
                     tail[-1] if tail else f"exit status {rc}")
            out = {"error": error, "timed_out": timed_out, "stderr_tail": tail[-30:],
                   "wire": wire, "wall_seconds": wall}
            if progress:
                out["progress"] = json.loads(progress[-1][len(PROGRESS_PREFIX):])
            return out
        result = json.loads(lines[-1][len(RESULT_PREFIX):])
        result["wire"] = wire
        if warnings_seen:
            result["warnings"] = warnings_seen
        return result

    def repeated(self, make_spec, label: str) -> dict:
        runs = []
        for _ in range(self.args.repeat):
            run = self.worker(make_spec())
            if "error" in run:
                print(f"  {label}: FAILED: {run['error']}", flush=True)
                if runs:  # keep the good runs; report the failure beside them
                    run["earlier_runs"] = runs
                return run
            runs.append(run)
        out = median_run(runs)
        out["runs"] = runs
        return out

    # -- the emulated store's own limits ------------------------------------

    def curl_limit(self, urls: list[str], connections: int) -> dict:
        """All URLs with curl over `connections` connections (kept alive)."""
        cmd = ["curl", "-s", "-S", "--fail", "-w", "%{size_download}\\n"]
        if connections > 1:
            cmd += ["--parallel", "--parallel-immediate", "--parallel-max", str(connections)]
        for url in urls:
            cmd += [url, "-o", "/dev/null"]
        self.servers.proxy_stats(reset=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"error": proc.stderr.strip() or f"curl exit {proc.returncode}"}
        total = sum(int(x) for x in proc.stdout.split())
        wire = self.servers.proxy_stats()
        return {"connections": connections, "objects": len(urls), "bytes": total,
                "seconds": seconds, "mb_per_s": total / seconds / 1e6,
                "proxy_connections": wire["connections"],
                "peak_active_connections": wire["peak_active_connections"]}

    # -- A ----------------------------------------------------------------

    def part_a(self, www: Path) -> dict:
        args = self.args
        scale = QUICK_FACTOR if args.quick else 1
        n_small = SMALL_OBJECTS // scale
        shard_size = "500kB" if args.quick else SHARD_SIZE_A
        print(f"\n== A. {n_small:,} objects of {SMALL_SIZE / 1000:g} kB against the same "
              f"records in ~20 stoker shards of {shard_size} ==", flush=True)

        src = www / BUCKET_SMALL / "obj"
        src.mkdir(parents=True)
        rng = random.Random(0)
        t0 = time.perf_counter()
        for i in range(n_small):
            (src / f"{i:05d}.bin").write_bytes(rng.randbytes(SMALL_SIZE))
        keys = [f"obj/{i:05d}.bin" for i in range(n_small)]
        import stoker

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quick: shard size outside 1-128 MB
            summary = stoker.pack(src=str(src), dst=str(www / BUCKET / "ds"),
                                  shard_size=shard_size)
        manifest = json.loads((www / BUCKET / "ds" / "manifest.json").read_text())
        shards = [s["path"] for s in manifest["shards"]]
        shard_bytes = sum(s["bytes"] for s in manifest["shards"])
        payload = n_small * SMALL_SIZE
        print(f"made {n_small:,} objects ({mb(payload)} MB) and packed them into "
              f"{len(shards)} shards ({mb(shard_bytes)} MB, "
              f"{mb(shard_bytes / len(shards))} MB each) in {time.perf_counter() - t0:.1f} s",
              flush=True)
        os.system(f"chmod -R a+rX {www}")
        res: dict[str, Any] = {"small_objects": n_small, "small_size": SMALL_SIZE,
                               "payload_bytes": payload, "shards": len(shards),
                               "shard_bytes": shard_bytes, "shard_size": shard_size,
                               "pack_summary": {k: v for k, v in summary.items()
                                                if k != "rejected"}}
        endpoint = self.servers.endpoint

        probe = self.worker({"kind": "probe", "port": self.servers.proxy_port,
                             "path": f"/{BUCKET_SMALL}/{keys[0]}", "requests": PROBE_REQUESTS})
        res["probe"] = probe
        if "error" in probe:
            raise RuntimeError(f"the emulated store does not answer: {probe}")
        print(f"emulated store: GET of one {SMALL_SIZE / 1000:g} kB object on a kept-alive "
              f"connection {probe['median_seconds'] * 1e3:.1f} ms median "
              f"(set: TTFB {args.ttfb_ms:g} ms, {args.bandwidth}/s per connection)",
              flush=True)
        urls = [f"{endpoint}/{BUCKET}/ds/{p}" for p in shards]
        limits = {}
        for n in LIMIT_CONNECTIONS + (len(shards),):
            runs = [self.curl_limit(urls, n) for _ in range(args.repeat)]
            bad = [r for r in runs if "error" in r]
            limits[n] = bad[0] if bad else median_run(runs)
            if not bad:
                print(f"  limit: curl, {n} connection(s), {len(urls)} shards: "
                      f"{limits[n]['mb_per_s']:.1f} MB/s ({limits[n]['seconds']:.2f} s)",
                      flush=True)
            else:
                print(f"  limit: curl, {n} connection(s): FAILED {bad[0]['error']}")
        res["limits"] = {str(k): v for k, v in limits.items()}

        boto = {}
        seq_keys = keys if args.seq_objects <= 0 else keys[:min(args.seq_objects, n_small)]
        print(f"boto3 sequential on {len(seq_keys):,} objects ...", flush=True)
        boto["sequential"] = self.worker({"kind": "boto3", "endpoint": endpoint, "threads": 1,
                                          "bucket": BUCKET_SMALL, "keys": seq_keys},
                                         timeout=3600)
        print(f"boto3 {BOTO3_THREADS} threads on {n_small:,} objects ...", flush=True)
        boto["threads"] = self.worker({"kind": "boto3", "endpoint": endpoint,
                                       "threads": BOTO3_THREADS, "bucket": BUCKET_SMALL,
                                       "keys": keys}, timeout=1800)
        boto["threads_shards"] = self.worker({"kind": "boto3", "endpoint": endpoint,
                                              "threads": BOTO3_THREADS, "bucket": BUCKET,
                                              "keys": [f"ds/{p}" for p in shards]})
        for name, run in boto.items():
            if "error" in run:
                print(f"  boto3 {name}: FAILED: {run['error']}")
        res["boto3"] = boto

        stoker_runs = {}
        for mode in ("pipe", "fastfile", "file"):
            print(f"stoker {mode} ...", flush=True)

            def spec(mode=mode):
                dirs = {"cache_dir": self.fresh_dir("cache")} if mode == "fastfile" else \
                    {"local_dir": self.fresh_dir("local")} if mode == "file" else {}
                return {"kind": "stoker_raw", "uri": f"s3://{BUCKET}/ds", "mode": mode,
                        "dirs": dirs}

            run = self.repeated(spec, f"stoker {mode}")
            if "error" not in run and (run["records"] != n_small or
                                       run["payload_bytes"] != payload):
                run["error"] = (f"read {run['records']} records, {run['payload_bytes']} "
                                f"bytes; expected {n_small}, {payload}")
            stoker_runs[mode] = run
        res["stoker"] = stoker_runs
        return res

    # -- B ----------------------------------------------------------------

    def part_b(self, www: Path) -> dict:
        args = self.args
        data = args.data
        if not data.is_dir():
            raise SystemExit(f"--data {data}: no such folder")
        print(f"\n== B. input modes on {data.name} ==", flush=True)
        src = data
        if args.quick:  # every 10th image, same class folders
            src = self.tmp / "quick-src"
            files = sorted(p for p in data.rglob("*")
                           if p.is_file() and p.suffix.lower() in (".jpg", ".jpeg"))
            for p in files[::QUICK_FACTOR]:
                dst = src / p.relative_to(data)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dst)
        shard_size = "1600kB" if args.quick else CLOTHING_SHARD_SIZE
        import stoker

        dst = www / BUCKET / "clothing"
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            summary = stoker.pack(src=str(src), dst=str(dst), shard_size=shard_size,
                                  shuffle_seed=CLOTHING_SEED)
        os.system(f"chmod -R a+rX {www}")
        manifest = json.loads((dst / "manifest.json").read_text())
        n_shards = len(manifest["shards"])
        print(f"packed {summary['records']:,} records into {n_shards} shards of "
              f"{shard_size} ({mb(summary['bytes'])} MB, {len(summary['rejected'])} rejected) "
              f"in {time.perf_counter() - t0:.1f} s", flush=True)
        res: dict[str, Any] = {"records": summary["records"], "bytes": summary["bytes"],
                               "shards": n_shards, "shard_size": shard_size,
                               "largest_shard": max(s["bytes"] for s in manifest["shards"]),
                               "fewest_records": min(s["records"] for s in manifest["shards"]
                                                     if s["records"] > 0),
                               "rejected": len(summary["rejected"])}
        runs = {}
        for name in B_CONFIGS:
            print(f"stoker {name} ...", flush=True)

            def spec(name=name):
                mode = name.split(" ")[0]
                loader = {"shuffle": False} if "shuffle=False" in name else {}
                if mode == "local":
                    return {"kind": "stoker_images", "uri": str(dst), "mode": "auto",
                            "epochs": EPOCHS_B, "loader": loader}
                dirs = {"cache_dir": self.fresh_dir("cache")} if mode == "fastfile" else \
                    {"local_dir": self.fresh_dir("local")} if mode == "file" else {}
                return {"kind": "stoker_images", "uri": f"s3://{BUCKET}/clothing", "mode": mode,
                        "dirs": dirs, "epochs": EPOCHS_B, "proxy": self.servers.endpoint,
                        "loader": loader}

            runs[name] = self.repeated(spec, f"stoker {name}")
        res["modes"] = runs
        return res


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------

def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def report_a(a: dict, args) -> dict:
    summary: dict[str, Any] = {}
    payload = a["payload_bytes"]
    n = a["small_objects"]
    limits = {int(k): v for k, v in a["limits"].items() if "error" not in v}
    usable = limits.get(STOKER_MAX_REQUESTS)
    print(f"\nA. reading {mb(payload)} MB: {n:,} objects of {a['small_size'] / 1000:g} kB, "
          f"or the same records in {a['shards']} stoker shards ({mb(a['shard_bytes'])} MB)")
    print(f"emulated store: TTFB {args.ttfb_ms:g} ms (a 5 kB GET measures "
          f"{a['probe']['median_seconds'] * 1e3:.1f} ms), {args.bandwidth}/s per connection")
    print("limits (curl reading the shards): " + "; ".join(
        f"{k} conn: {v['mb_per_s']:.1f} MB/s" for k, v in sorted(limits.items())))
    rows = []
    boto = a["boto3"]
    base = boto["threads"].get("seconds") if "error" not in boto["threads"] else None
    seq = boto["sequential"]
    if "error" not in seq:
        per = seq["seconds"] / seq["objects"]
        seq_total = per * n
        label = "boto3 sequential"
        if seq["objects"] < n:
            label += f" ({seq['objects']:,} timed, x{n / seq['objects']:g})"
        rows.append((label, f"{n:,} x 5 kB", seq_total, payload, seq["wire"]))
        summary["boto3_sequential_seconds"] = seq_total
        summary["boto3_sequential_ms_per_object"] = per * 1e3
    for key, label, what in (("threads", f"boto3 {BOTO3_THREADS} threads", f"{n:,} x 5 kB"),
                             ("threads_shards", f"boto3 {BOTO3_THREADS} threads, the shards",
                              f"{a['shards']} shards")):
        run = boto[key]
        if "error" not in run:
            rows.append((label, what, run["seconds"], run["bytes"], run["wire"]))
    for mode, run in a["stoker"].items():
        if "error" not in run:
            rows.append((f"stoker {mode}", f"{a['shards']} shards", run["seconds"],
                         run["payload_bytes"], run["wire"]))
    print("\n| reader | objects | seconds | MB/s (payload) | requests | connections | "
          f"speed vs boto3 {BOTO3_THREADS} threads |")
    print("|---|---|---|---|---|---|---|")
    for label, what, seconds, nbytes, wire in rows:
        ratio = f"{base / seconds:.1f}x" if base else "-"
        print(f"| {label} | {what} | {seconds:.2f} | {nbytes / seconds / 1e6:.1f} | "
              f"{wire['requests_total']:,} | {wire['connections']} | {ratio} |")
    for name, run in list(boto.items()) + [(f"stoker {m}", r) for m, r in a["stoker"].items()]:
        if "error" in run:
            print(f"  {name}: FAILED: {run['error']}")
    print("\nGoals:")
    summary["stoker"] = {}
    for mode, run in a["stoker"].items():
        if "error" in run:
            summary["stoker"][mode] = {"error": run["error"]}
            continue
        entry = {"seconds": run["seconds"], "open_seconds": run["open_seconds"],
                 "mb_per_s_payload": payload / run["seconds"] / 1e6,
                 "mb_per_s_shards": a["shard_bytes"] / run["seconds"] / 1e6}
        if base:
            entry["vs_boto3_threads"] = base / run["seconds"]
            print(f"  stoker {mode} vs boto3 {BOTO3_THREADS} threads: "
                  f"{entry['vs_boto3_threads']:.1f}x (goal >= {GOAL_VS_BOTO3:g}x: "
                  f"{verdict(entry['vs_boto3_threads'] >= GOAL_VS_BOTO3)})")
        fractions = {k: entry["mb_per_s_shards"] / v["mb_per_s"] for k, v in limits.items()}
        entry["fraction_of_limit"] = {str(k): f for k, f in fractions.items()}
        if usable:
            f = fractions[STOKER_MAX_REQUESTS]
            print(f"  stoker {mode}: {entry['mb_per_s_shards']:.1f} MB/s of shards "
                  f"(open {run['open_seconds']:.2f} s) = {f:.2f} of the "
                  f"{STOKER_MAX_REQUESTS}-connection aggregate {usable['mb_per_s']:.1f} MB/s "
                  f"(goal >= {GOAL_BANDWIDTH}: {verdict(f >= GOAL_BANDWIDTH)}); "
                  + ", ".join(f"{fr:.2f} of {k} conn" for k, fr in sorted(fractions.items())
                              if k != STOKER_MAX_REQUESTS)
                  + f"; {run['wire']['peak_active_connections']} connections at once at most")
        entry["goal_vs_boto3_met"] = (bool(base) and
                                      entry.get("vs_boto3_threads", 0) >= GOAL_VS_BOTO3)
        entry["goal_bandwidth_met"] = (bool(usable) and
                                       fractions[STOKER_MAX_REQUESTS] >= GOAL_BANDWIDTH)
        entry["stats"] = run["stats"]
        entry["wire"] = run["wire"]
        summary["stoker"][mode] = entry
    summary["limits_mb_per_s"] = {str(k): v["mb_per_s"] for k, v in limits.items()}
    if base:
        summary["boto3_threads_seconds"] = base
    return summary


def report_b(b: dict) -> dict:
    summary: dict[str, Any] = {"modes": {}}
    modes = b["modes"]
    print(f"\nB. {b['records']:,} images, {mb(b['bytes'])} MB in {b['shards']} shards of "
          f"{b['shard_size']}; batch {BATCH_IMAGES}, {IMAGE_SIZE}x{IMAGE_SIZE}, train "
          f"transform, numpy; times from Loader() unless noted")
    print("\n| mode | open s | first batch s | epoch 1 s (from Loader()) | epoch 2 s | "
          "epoch 2 img/s | peak RSS MiB (VmHWM) | proxy MB ep1 / ep2 | requests ep1 / ep2 | "
          "cache hits / misses | bytes_downloaded MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, run in modes.items():
        if "error" in run:
            prog = run.get("progress")
            wire = run.get("wire") or {}
            if prog:
                print(f"| {mode} | {prog['open_seconds']:.2f} | "
                      f"{prog['first_batch_seconds']:.2f} | **{run['error']}**: epoch "
                      f"{prog['epoch']} at {prog['images_this_epoch']:,} of {b['records']:,} "
                      f"images after {prog['since_loader']:.0f} s | - | - | "
                      f">= {prog['vmhwm_kib'] / 1024:.0f} | {mb(wire.get('body_bytes', 0))} "
                      f"(all) | {wire.get('requests_total', '-')} (all) | - | - |")
            else:
                print(f"| {mode} | FAILED: {run['error']} |")
            summary["modes"][mode] = {"error": run["error"], "progress": prog, "wire": wire}
            continue
        e1, e2 = run["epochs"][0], run["epochs"][-1]
        wire = (f"{mb(e1['wire']['body_bytes'])} / {mb(e2['wire']['body_bytes'])}"
                if e1.get("wire") else "-")
        reqs = (f"{e1['wire']['requests_total']} / {e2['wire']['requests_total']}"
                if e1.get("wire") else "-")
        st = e2["stats"]
        print(f"| {mode} | {run['open_seconds']:.2f} | {run['first_batch_seconds']:.2f} | "
              f"{run['epoch1_since_loader_seconds']:.2f} | {run['epoch2_seconds']:.2f} | "
              f"{run['images_per_epoch'] / run['epoch2_seconds']:,.0f} | "
              f"{run['vmhwm_kib'] / 1024:.0f} | {wire} | {reqs} | "
              f"{st.get('cache_hits')} / {st.get('cache_misses')} | "
              f"{mb(st.get('bytes_downloaded') or 0)} |")
        summary["modes"][mode] = {
            "open_seconds": run["open_seconds"], "first_batch_seconds": run["first_batch_seconds"],
            "epoch1_since_loader_seconds": run["epoch1_since_loader_seconds"],
            "epoch2_seconds": run["epoch2_seconds"], "vmhwm_mib": run["vmhwm_kib"] / 1024,
            "stats_after_epoch2": st,
            "wire_bytes_per_epoch": [e["wire"]["body_bytes"] for e in run["epochs"]
                                     if e.get("wire")]}
    print("\nGoals:")
    local, fast = modes.get("local"), modes.get("fastfile")
    local_ok = local and "error" not in local
    rings = pipe_rings(b["shards"], b["fewest_records"])
    budget = rings * PIPE_PARTS * PIPE_PART_BYTES
    summary["pipe_budget_mib"] = budget / 2**20
    for name in ("pipe", "pipe shuffle=False"):
        run = modes.get(name)
        if not run:
            continue
        partial = "error" in run
        src = run.get("progress") if partial else run
        if not src:
            print(f"  {name}: no figures ({run['error']})")
            continue
        fb = src["first_batch_seconds"]
        entry = summary["modes"][name]
        entry["first_batch_goal_met"] = fb is not None and fb <= GOAL_PIPE_FIRST_BATCH_S
        if fb is not None:
            print(f"  {name}: first batch {fb:.2f} s (goal <= {GOAL_PIPE_FIRST_BATCH_S:g} s: "
                  f"{verdict(fb <= GOAL_PIPE_FIRST_BATCH_S)})")
        if local_ok:
            extra = (src["vmhwm_kib"] - local["vmhwm_kib"]) * 1024
            entry["memory"] = {"vmhwm_mib": src["vmhwm_kib"] / 1024,
                               "local_vmhwm_mib": local["vmhwm_kib"] / 1024,
                               "extra_mib": extra / 2**20, "budget_mib": budget / 2**20,
                               "partial": partial, "goal_met": extra <= budget}
            print(f"  {name}: peak RSS {src['vmhwm_kib'] / 1024:.0f} MiB"
                  f"{' (until stopped)' if partial else ''}, local {local['vmhwm_kib'] / 1024:.0f}"
                  f" MiB: {extra / 2**20:+.0f} MiB for streaming; budget {rings} "
                  f"shards x {PIPE_PARTS} parts x {PIPE_PART_BYTES / 2**20:.0f} MiB = "
                  f"{budget / 2**20:.0f} MiB ({verdict(extra <= budget)}); dataset "
                  f"{b['bytes'] / 2**20:.0f} MiB")
        if partial:
            wire = run.get("wire") or {}
            print(f"  {name}: {run['error']} in epoch {src['epoch']} at "
                  f"{src['images_this_epoch']:,} of {b['records']:,} images; "
                  f"{mb(wire.get('body_bytes', 0))} MB through the proxy "
                  f"({wire.get('body_bytes', 0) / b['bytes']:.0f}x the dataset) in "
                  f"{wire.get('requests_total', 0)} requests")
    if fast and local_ok and "error" not in fast:
        ratio = local["epoch2_seconds"] / fast["epoch2_seconds"]
        summary["fastfile_epoch2_vs_local"] = ratio
        print(f"  fastfile epoch 2 (from cache) {fast['epoch2_seconds']:.2f} s against local "
              f"{local['epoch2_seconds']:.2f} s: {ratio:.2f} of local speed (goal >= "
              f"{GOAL_FASTFILE_VS_LOCAL}: {verdict(ratio >= GOAL_FASTFILE_VS_LOCAL)})")
    return summary


# --------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] == "--worker":
        worker_main(sys.stdin.read())  # the spec as JSON (20,000 keys exceed argv's limit)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="scale part A down 10x (2,000 x 5 kB vs 20 x 500 kB) and use every "
                         "10th image in part B")
    ap.add_argument("--only", default="a,b", help="parts to run: a, b or a,b")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--ttfb-ms", type=float, default=20.0)
    ap.add_argument("--bandwidth", default="25MB", help="per-connection cap (e.g. 25MB = 25 MB/s)")
    ap.add_argument("--seq-objects", type=int, default=2000,
                    help="objects timed for boto3 sequential, extrapolated to all (0 = all)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of each curl/stoker measurement (median); boto3 runs once")
    ap.add_argument("--timeout", type=float, default=120,
                    help="seconds a stoker measurement may take before it is stopped and "
                         "reported as timed out (boto3: 30-60 minutes)")
    ap.add_argument("--json", type=Path, metavar="PATH")
    ap.add_argument("--tmp", type=Path, help="where the store's files go (removed at the end)")
    ap.add_argument("--proxy-log", type=Path, help="log every proxied request here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    parts = {p.strip().lower() for p in args.only.split(",") if p.strip()}

    # A SIGTERM must run the finally blocks that stop the servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    machine = describe_machine()
    import stoker

    build = describe_stoker(stoker)
    print(f"machine: {machine}")
    print(f"stoker {getattr(stoker, '__version__', '?')} from {build['package']} "
          f"({build.get('native')} sha256 {build.get('native_sha256')}, built "
          f"{build.get('native_mtime')}); checkout HEAD {build.get('checkout_head')}")
    print(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="stoker-s3-bench-", dir=args.tmp))
    tmp.chmod(0o755)  # nginx's workers run as another user when we are root
    www = tmp / "www"
    www.mkdir()
    out: dict[str, Any] = {"machine": machine, "stoker": build,
                           "args": {k: str(v) for k, v in vars(args).items()},
                           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_start = time.perf_counter()
    try:
        with Servers(tmp, www, args.ttfb_ms, args.bandwidth, args.proxy_log) as servers:
            print(f"nginx on 127.0.0.1:{servers.nginx_port}, root {www}; proxy "
                  f"{servers.endpoint}", flush=True)
            bench = Bench(args, tmp, servers)
            try:
                if "a" in parts:
                    out["a"] = bench.part_a(www)
                if "b" in parts:
                    out["b"] = bench.part_b(www)
            finally:
                out["worker_warnings"] = bench.warnings
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    out["seconds"] = time.perf_counter() - t_start
    print(f"\n==== results ({machine}) ====")
    summary = {}
    if "a" in out:
        summary["a"] = report_a(out["a"], args)
    if "b" in out:
        summary["b"] = report_b(out["b"])
    out["summary"] = summary
    after = describe_stoker(stoker)
    if after.get("native_sha256") != build.get("native_sha256"):
        out["stoker_after"] = after
        print(f"\nWARNING: stoker's extension changed during the run (now sha256 "
              f"{after.get('native_sha256')}, built {after.get('native_mtime')}): the "
              f"figures mix two builds, and a build running beside the benchmark steals CPU")
    if out.get("worker_warnings"):
        print("\nwarnings printed by the measured processes:")
        for w in out["worker_warnings"]:
            print(f"  {w}")
    print(f"\ntotal {out['seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An HTTP proxy that makes a local static file server behave like an object store.

It listens on 127.0.0.1:<port> and forwards every request, byte for byte
apart from hop-by-hop headers, to an upstream HTTP/1.1 server (nginx serving
<root>/<bucket>/<key>, so that the path-style URL /<bucket>/<key> is the file
<root>/<bucket>/<key>). On the way back it adds what makes an object store
slow in the ways that matter to a data loader:

  --ttfb-ms MS        time to first byte per request: the response's first
                      byte leaves no earlier than MS after the request's head
                      arrived (default 20 ms, about what S3 takes for a GET);
  --bandwidth RATE    a cap per client connection on response bytes
                      (default 25MB/s; 0 = none), paced with a token bucket
                      that banks at most 5 ms of idle time;
  --total-bandwidth RATE
                      an optional cap shared by all connections (default 0 =
                      none: the aggregate is whatever the machine manages).

HEAD, GET with Range (206) and conditional headers (If-Match, If-None-Match)
go to the upstream unchanged, so their semantics are nginx's (ETag, 206,
412, 416). Client connections are kept alive (HTTP/1.1 default, HTTP/1.0
with "Connection: keep-alive"); each client connection has its own upstream
connection, kept alive too and reopened when the upstream closes it.
Response bodies may be Content-Length, chunked, or delimited by close;
request bodies must have a Content-Length (uploads are not what this is for).

Requests to /__proxy__/stats answer at once (no delay, no cap) with JSON
counters since start or the last /__proxy__/reset: client connections,
requests by method and status, response body bytes sent, upstream
connections. Nothing else is answered by the proxy itself.

Standard library only. Usage:

  python3 objstore_proxy.py --upstream 127.0.0.1:8080 [--port 0]
      [--ttfb-ms 20] [--bandwidth 25MB] [--total-bandwidth 0]
      [--port-file PATH] [--log PATH]

With --port 0 (default) it picks a free port; it prints "listening on
http://127.0.0.1:<port>" and, with --port-file, writes the port there once
it accepts connections. SIGTERM or SIGINT stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections import Counter
from typing import Optional

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade",
    "proxy-authenticate", "proxy-authorization",
}
MAX_HEAD = 64 << 10
CHUNK = 64 << 10
STATS_PATH = "/__proxy__/stats"
RESET_PATH = "/__proxy__/reset"

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_rate(text: str) -> float:
    """'25MB', '25MB/s', '25MiB', '1e6' -> bytes per second (0 = no cap)."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*?)(/s)?\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a rate: {text!r} (e.g. 25MB, 25MiB, 0)")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


class Pacer:
    """Token bucket that banks almost no idle time: n bytes may leave n / rate
    seconds after the previous ones were allowed to. Credit for idle time is
    capped at SLACK seconds, just enough to make up for sleeps that overshoot
    (without it the long-run rate falls ~15% short of `rate`)."""

    SLACK = 0.005

    def __init__(self, rate: float):
        self.rate = rate
        self.next_free = 0.0

    async def spend(self, n: int) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        start = max(self.next_free, now - self.SLACK)
        self.next_free = start + n / self.rate
        # Sleep until this chunk's share of time has passed: the chunk is
        # sent first, then we wait, so the long-run rate is `rate`.
        delay = self.next_free - now
        if delay > 0.0005:
            await asyncio.sleep(delay)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        # `active` is not reset: connections open across a reset stay counted.
        self.since = time.time()
        self.connections = 0
        self.upstream_connections = 0
        self.requests: Counter = Counter()
        self.statuses: Counter = Counter()
        self.body_bytes = 0
        self.peak_active = getattr(self, "active", 0)
        self.active = getattr(self, "active", 0)

    def as_dict(self) -> dict:
        return {
            "since": self.since,
            "seconds": time.time() - self.since,
            "connections": self.connections,
            "upstream_connections": self.upstream_connections,
            "requests": dict(self.requests),
            "requests_total": sum(self.requests.values()),
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "body_bytes": self.body_bytes,
            "active_connections": self.active,
            "peak_active_connections": self.peak_active,
        }


class Proxy:
    def __init__(self, upstream: tuple[str, int], ttfb: float, bandwidth: float,
                 total_bandwidth: float, log=None):
        self.log = log
        self.upstream = upstream
        self.ttfb = ttfb
        self.bandwidth = bandwidth
        self.total = Pacer(total_bandwidth)
        self.stats = Stats()

    # -- helpers ----------------------------------------------------------

    @staticmethod
    async def read_head(reader: asyncio.StreamReader) -> Optional[bytes]:
        """The bytes of one message head up to and including CRLFCRLF; None
        on a clean EOF before any byte."""
        try:
            return await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial.strip():
                return None
            raise ConnectionError("connection closed inside a message head")
        except asyncio.LimitOverrunError:
            raise ConnectionError("message head too large")

    @staticmethod
    def parse_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
        lines = head.decode("latin-1").split("\r\n")
        first = lines[0]
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        return first, headers

    @staticmethod
    def header(headers: list[tuple[str, str]], name: str) -> Optional[str]:
        name = name.lower()
        for k, v in headers:
            if k.lower() == name:
                return v
        return None

    async def open_upstream(self):
        r, w = await asyncio.open_connection(*self.upstream, limit=MAX_HEAD)
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stats.upstream_connections += 1
        return r, w

    async def send_body(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, n: int,
                        pacer: Pacer) -> None:
        """Relays exactly n bytes, paced."""
        while n > 0:
            data = await src.read(min(n, CHUNK))
            if not data:
                raise ConnectionError("upstream closed inside a body")
            n -= len(data)
            dst.write(data)
            self.stats.body_bytes += len(data)
            await dst.drain()
            await pacer.spend(len(data))
            await self.total.spend(len(data))

    async def send_chunked(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                           pacer: Pacer) -> None:
        """Relays a chunked body as it is (chunk lines, data, trailers)."""
        while True:
            line = await src.readuntil(b"\r\n")
            dst.write(line)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = await src.readuntil(b"\r\n")
                    dst.write(trailer)
                    if trailer == b"\r\n":
                        break
                await dst.drain()
                return
            await self.send_body(src, dst, size, pacer)
            dst.write(await src.readexactly(2))

    async def send_until_close(self, src, dst, pacer: Pacer) -> None:
        while True:
            data = await src.read(CHUNK)
            if not data:
                return
            dst.write(data)
            self.stats.body_bytes += len(data)
            await dst.drain()
            await pacer.spend(len(data))
            await self.total.spend(len(data))

    def local_answer(self, path: str, writer: asyncio.StreamWriter, keep: bool) -> None:
        if path.startswith(RESET_PATH):
            self.stats.reset()
            body = b"{}\n"
        else:
            body = (json.dumps(self.stats.as_dict()) + "\n").encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n" +
                     (b"" if keep else b"Connection: close\r\n") + b"\r\n" + body)

    # -- one client connection --------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        counted = False  # counted once it carries a proxied request (not stats queries)
        pacer = Pacer(self.bandwidth)
        up = None  # (reader, writer) to the upstream, kept alive
        try:
            while True:
                head = await self.read_head(reader)
                if head is None:
                    return
                t0 = time.monotonic()
                first, headers = self.parse_head(head)
                parts = first.split(" ")
                if len(parts) != 3:
                    raise ConnectionError(f"bad request line {first!r}")
                method, target, version = parts
                conn = (self.header(headers, "connection") or "").lower()
                keep = ("close" not in conn) if version == "HTTP/1.1" else ("keep-alive" in conn)
                if self.header(headers, "transfer-encoding"):
                    writer.write(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                    await writer.drain()
                    return
                length = int(self.header(headers, "content-length") or 0)
                body = await reader.readexactly(length) if length else b""
                if target.startswith("/__proxy__/"):
                    self.local_answer(target, writer, keep)
                    await writer.drain()
                    if not keep:
                        return
                    continue
                self.stats.requests[method] += 1
                if not counted:
                    counted = True
                    self.stats.connections += 1
                    self.stats.active += 1
                    self.stats.peak_active = max(self.stats.peak_active, self.stats.active)

                out = [f"{method} {target} HTTP/1.1"]
                out += [f"{k}: {v}" for k, v in headers if k.lower() not in HOP_BY_HOP]
                request = ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body

                # Send; if a kept-alive upstream connection turns out closed
                # (nginx's keepalive_timeout or keepalive_requests), reopen once.
                for attempt in range(2):
                    reused = up is not None
                    if up is None:
                        up = await self.open_upstream()
                    try:
                        up[1].write(request)
                        await up[1].drain()
                        rhead = await self.read_head(up[0])
                        if rhead is None:
                            raise ConnectionError("upstream closed before answering")
                        break
                    except (ConnectionError, asyncio.IncompleteReadError):
                        up[1].close()
                        up = None
                        if not reused or attempt == 1:
                            raise
                status_line, rheaders = self.parse_head(rhead)
                status = int(status_line.split(" ")[1])
                while 100 <= status < 200:  # interim responses: skip
                    rhead = await self.read_head(up[0])
                    status_line, rheaders = self.parse_head(rhead)
                    status = int(status_line.split(" ")[1])
                self.stats.statuses[status] += 1
                if self.log is not None:
                    req = {k: self.header(headers, k) for k in ("range", "if-match")}
                    resp = {k: self.header(rheaders, k) for k in
                            ("content-length", "content-range", "etag", "transfer-encoding")}
                    self.log.write(f"{time.time():.3f} {method} {target} "
                                   f"{json.dumps({k: v for k, v in req.items() if v})} -> "
                                   f"{status} {json.dumps({k: v for k, v in resp.items() if v})}\n")
                    self.log.flush()
                up_conn = (self.header(rheaders, "connection") or "").lower()
                up_keep = "close" not in up_conn
                te = (self.header(rheaders, "transfer-encoding") or "").lower()
                clen = self.header(rheaders, "content-length")
                no_body = method == "HEAD" or status in (204, 304)
                until_close = not no_body and "chunked" not in te and clen is None
                if until_close:
                    keep = False

                lines = [status_line]
                lines += [f"{k}: {v}" for k, v in rheaders if k.lower() not in HOP_BY_HOP
                          or k.lower() == "trailer"]
                if "chunked" in te and not no_body:
                    lines.append("Transfer-Encoding: chunked")
                if not keep:
                    lines.append("Connection: close")
                # Time to first byte: nothing leaves before t0 + ttfb.
                wait = t0 + self.ttfb - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                if not no_body:
                    pacer.next_free = time.monotonic()  # no credit from the TTFB wait
                    if "chunked" in te:
                        await self.send_chunked(up[0], writer, pacer)
                    elif clen is not None:
                        await self.send_body(up[0], writer, int(clen), pacer)
                    else:
                        await self.send_until_close(up[0], writer, pacer)
                        up_keep = False
                await writer.drain()
                if not up_keep:
                    up[1].close()
                    up = None
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as e:
            if os.environ.get("OBJSTORE_PROXY_DEBUG"):
                print(f"connection error: {e!r}", file=sys.stderr)
        finally:
            if counted:
                self.stats.active -= 1
            if up is not None:
                up[1].close()
            writer.close()


async def serve(args) -> None:
    host, _, port = args.upstream.rpartition(":")
    log = open(args.log, "a", buffering=1) if args.log else None
    proxy = Proxy((host or "127.0.0.1", int(port)), args.ttfb_ms / 1000.0, args.bandwidth,
                  args.total_bandwidth, log)
    server = await asyncio.start_server(proxy.handle, args.host, args.port, limit=MAX_HEAD,
                                        backlog=1024, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{args.host}:{bound} -> upstream {args.upstream}, "
          f"ttfb {args.ttfb_ms:g} ms, {args.bandwidth / 1e6:g} MB/s per connection, "
          f"total cap {args.total_bandwidth / 1e6:g} MB/s (0 = none)", flush=True)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(bound))
        os.replace(tmp, args.port_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="host:port of the origin (nginx)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--ttfb-ms", type=float, default=20.0)
    ap.add_argument("--bandwidth", type=parse_rate, default=parse_rate("25MB"),
                    help="cap per connection, e.g. 25MB (/s); 0 = none")
    ap.add_argument("--total-bandwidth", type=parse_rate, default=0.0,
                    help="cap over all connections; 0 = none")
    ap.add_argument("--port-file", help="write the bound port here when ready")
    ap.add_argument("--log", help="append one line per proxied request (method, path, Range, "
                    "If-Match -> status, Content-Length, Content-Range, ETag) to this file")
    asyncio.run(serve(ap.parse_args()))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 proxy for the S3 client tests (s3_test.cc).

    fault_proxy.py UPSTREAM_HOST UPSTREAM_PORT

Listens on 127.0.0.1 at a free port and prints "PORT <n>" once ready. Requests
go to the upstream (moto_server) unchanged, Host header included, so SigV4
signatures stay valid. Client connections are kept alive; each request opens
a fresh upstream connection.

Tests script it over HTTP on the same port:

    POST /__fault__/rules   body: JSON list of rules; replaces the rules and
                            clears the log
    GET  /__fault__/log     JSON list, one entry per proxied request:
                            {"conn", "method", "path", "query", "range",
                             "if_match", "action"}

A rule applies to a request when every filter it has matches:
    "method"     exact ("GET", "HEAD", "PUT", ...)
    "path"       substring of the path (no query)
    "query"      substring of the query string
    "has_range"  whether the request has a Range header
and its counters allow: the first "skip" matching requests (default 0) pass
untouched, then the rule applies "times" times (default 1; -1 = always). The
first applicable rule in list order wins. Actions ("action" plus parameters):
    status               answer "status" with an S3 <Error> "code" (no upstream;
                         no body to a HEAD, as S3 does)
    error_in_200         answer 200 with an S3 <Error> "code" as body
    reset                forward; send the headers and "after" body bytes,
                         then reset the connection (RST)
    truncate             forward; send the headers (original Content-Length)
                         and "after" body bytes, then close cleanly (FIN)
    stall                forward; send the headers and "after" body bytes,
                         then nothing for "seconds", then close
    stall_before_headers read the request, send nothing for "seconds", close
    respond              answer "status" (default 200) with the "headers" given
                         (an object) and the body "body_b64" (base64), without
                         asking upstream: e.g. a 200 with the whole object to a
                         ranged GET. (Editing the request instead would break
                         its signature: Range is a signed header.)
    drop_content_range   forward; remove Content-Range from the answer
    shift_content_range  forward; move Content-Range's first byte up by one
    drop_etag            forward; remove the ETag header
    endless              answer "status" with a chunked body that never ends
    bandwidth            forward; send the headers, then the body at
                         "bytes_per_second" (default 65536) in slices every
                         "tick" seconds (default 0.05): a slow link whose bytes
                         keep moving (N9)
    partition            start a network partition of "seconds" (default 1)
                         now; this request is its first casualty (N15).
                         "mode":
                           "refuse" (default): the store is down. The proxy
                             stops listening, so new connections are refused,
                             closes every open client connection without an
                             answer (this one included), and listens again on
                             the same port once the time is up. The control
                             endpoint is unreachable meanwhile.
                           "drop": packets are dropped (as `nft drop`).
                             Connections are accepted but no request gets an
                             answer while the partition lasts; a request whose
                             client still waits when it ends is then served
                             (TCP retransmission getting through). Control
                             requests are still answered.
    flip_byte            forward; invert the bits of the body byte at "at"
                         (default: the middle one), headers unchanged: bytes
                         damaged on the way that HTTP does not notice (N13)
"""
import base64
import json
import socket
import socketserver
import struct
import sys
import threading
import time

UPSTREAM = (sys.argv[1], int(sys.argv[2]))
LOCK = threading.Lock()
RULES = []
LOG = []
CONN_IDS = iter(range(1, 1 << 30))
# The current partition (rule action "partition"): its mode and when it ends
# (time.monotonic()). Guarded by LOCK, as is OPEN (client sockets now open).
PARTITION = {"mode": None, "until": 0.0}
OPEN = set()


class Closed(Exception):
    pass


def read_head(sock, buf):
    """Reads up to and including the blank line; returns (head, rest)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise Closed()
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def read_exact(sock, buf, n):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise Closed()
        buf += chunk
    return buf[:n], buf[n:]


def parse_headers(lines):
    headers = []
    for line in lines:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return headers


def get_header(headers, name):
    for k, v in headers:
        if k.lower() == name.lower():
            return v
    return None


def without(headers, *names):
    lowered = {n.lower() for n in names}
    return [(k, v) for k, v in headers if k.lower() not in lowered]


def error_xml(code, message="injected by fault_proxy"):
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
        "<Message>%s</Message><RequestId>FAULTPROXYREQ</RequestId></Error>" % (code, message)
    ).encode()


def choose_rule(method, path, query, has_range):
    with LOCK:
        chosen = None
        for rule in RULES:
            if "method" in rule and rule["method"] != method:
                continue
            if "path" in rule and rule["path"] not in path:
                continue
            if "query" in rule and rule["query"] not in query:
                continue
            if "has_range" in rule and bool(rule["has_range"]) != has_range:
                continue
            rule["_seen"] = rule.get("_seen", 0) + 1
            if chosen is not None or rule["_seen"] <= rule.get("skip", 0):
                continue
            times = rule.get("times", 1)
            if times != -1 and rule.get("_applied", 0) >= times:
                continue
            rule["_applied"] = rule.get("_applied", 0) + 1
            chosen = dict(rule)
        return chosen


def forward(method, target, headers, body):
    """Sends the request upstream; returns (status, reason, headers, body)."""
    up = socket.create_connection(UPSTREAM, timeout=30)
    try:
        out = ["%s %s HTTP/1.1" % (method, target)]
        for k, v in without(headers, "connection", "expect", "proxy-connection"):
            out.append("%s: %s" % (k, v))
        out.append("Connection: close")
        up.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
        head, rest = read_head(up, b"")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        rheaders = parse_headers(lines[1:])
        if method == "HEAD" or status in (204, 304) or status < 200:
            return status, reason, rheaders, b""
        length = get_header(rheaders, "content-length")
        if length is not None:
            data, _ = read_exact(up, rest, int(length))
            return status, reason, rheaders, data
        if (get_header(rheaders, "transfer-encoding") or "").lower() == "chunked":
            data = b""
            while True:
                while b"\r\n" not in rest:
                    rest += up.recv(65536)
                size_line, rest = rest.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                chunk, rest = read_exact(up, rest, size + 2)
                if size == 0:
                    break
                data += chunk[:size]
            return status, reason, without(rheaders, "transfer-encoding"), data
        data = rest
        while True:
            chunk = up.recv(65536)
            if not chunk:
                break
            data += chunk
        return status, reason, rheaders, data
    finally:
        up.close()


def response_head(status, reason, headers, keep_alive):
    out = ["HTTP/1.1 %d %s" % (status, reason)]
    for k, v in without(headers, "connection", "transfer-encoding", "keep-alive"):
        out.append("%s: %s" % (k, v))
    out.append("Connection: %s" % ("keep-alive" if keep_alive else "close"))
    return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")


def set_content_length(headers, n):
    return without(headers, "content-length") + [("Content-Length", str(n))]


def wait_or_client_gone(sock, seconds):
    """Sleeps up to `seconds`, returning early when the client hangs up."""
    deadline = time.monotonic() + seconds
    sock.settimeout(0.05)
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return
        except socket.timeout:
            continue
        except OSError:
            return


def partition_mode():
    """The mode of the partition in force now, or None."""
    with LOCK:
        if time.monotonic() < PARTITION["until"]:
            return PARTITION["mode"]
        return None


def start_partition(rule, server, own_sock):
    mode = rule.get("mode", "refuse")
    if mode not in ("refuse", "drop"):
        raise ValueError("partition mode %r is not refuse or drop" % mode)
    with LOCK:
        PARTITION["mode"] = mode
        PARTITION["until"] = time.monotonic() + float(rule.get("seconds", 1))
        others = [s for s in OPEN if s is not own_sock]
    if mode == "refuse":
        # serve_forever returns, main() closes the listening socket, waits for
        # the partition to end and listens again. shutdown() blocks until the
        # loop has stopped, so it runs on a thread of its own.
        threading.Thread(target=server.shutdown, daemon=True).start()
        for s in others:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes its handler, which closes it
            except OSError:
                pass


def hold_while_dropped(sock):
    """Waits while a "drop" partition lasts; False when the client hung up."""
    sock.settimeout(0.05)
    try:
        while partition_mode() == "drop":
            try:
                if not sock.recv(65536):
                    return False
            except socket.timeout:
                continue
            except OSError:
                return False
        return True
    finally:
        sock.settimeout(None)


def send_paced(sock, data, bytes_per_second, tick):
    """Sends `data` at about `bytes_per_second`, one slice per `tick` seconds."""
    step = max(1, int(bytes_per_second * tick))
    start = time.monotonic()
    for i, pos in enumerate(range(0, len(data), step)):
        delay = start + i * tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendall(data[pos:pos + step])


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        sock = self.request
        conn = next(CONN_IDS)
        buf = b""
        with LOCK:
            OPEN.add(sock)
        try:
            while True:
                head, buf = read_head(sock, buf)
                lines = head.split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = parse_headers(lines[1:])
                if (get_header(headers, "expect") or "").lower() == "100-continue":
                    sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body, buf = read_exact(sock, buf, int(get_header(headers, "content-length") or 0))
                path, _, query = target.partition("?")
                if path.startswith("/__fault__/"):
                    self.control(sock, method, path, body)
                    continue
                if not self.proxy(sock, conn, method, target, path, query, headers, body):
                    return
        except (Closed, ConnectionError, OSError):
            return
        finally:
            with LOCK:
                OPEN.discard(sock)

    def control(self, sock, method, path, body):
        global RULES, LOG
        if method == "POST" and path == "/__fault__/rules":
            with LOCK:
                RULES = json.loads(body or b"[]")
                LOG = []
            payload = b"ok"
        elif path == "/__fault__/log":
            with LOCK:
                payload = json.dumps(LOG).encode()
        else:
            payload = b"unknown control path"
        sock.sendall(response_head(200, "OK", [("Content-Length", str(len(payload)))], True)
                     + payload)

    def proxy(self, sock, conn, method, target, path, query, headers, body):
        """Serves one request; returns False when the connection is done."""
        has_range = get_header(headers, "range") is not None

        def log(action):
            with LOCK:
                LOG.append({"conn": conn, "method": method, "path": path, "query": query,
                            "range": get_header(headers, "range") or "",
                            "if_match": get_header(headers, "if-match") or "",
                            "action": action})

        mode = partition_mode()
        if mode == "refuse":  # accepted just before the listener closed
            log("refused")
            sock.close()
            return False
        if mode == "drop":
            log("dropped")
            if not hold_while_dropped(sock):
                return False
        rule = choose_rule(method, path, query, has_range)
        action = rule["action"] if rule else "pass"
        log(action)

        if action == "partition":
            start_partition(rule, self.server, sock)
            if rule.get("mode", "refuse") == "refuse":
                sock.close()
                return False
            if not hold_while_dropped(sock):
                return False
            action = "pass"

        if action == "status" or action == "error_in_200":
            status = rule.get("status", 503) if action == "status" else 200
            payload = error_xml(rule.get("code", "SlowDown"))
            rh = [("Content-Type", "application/xml"), ("Content-Length", str(len(payload))),
                  ("x-amz-request-id", "FAULTPROXYREQ")]
            if method == "HEAD":
                payload = b""
            sock.sendall(response_head(status, "Injected", rh, True) + payload)
            return True
        if action == "respond":
            payload = base64.b64decode(rule.get("body_b64", ""))
            rh = list(rule.get("headers", {}).items())
            rh = set_content_length(rh, len(payload))
            if method == "HEAD":
                payload = b""
            sock.sendall(response_head(rule.get("status", 200), "Canned", rh, True) + payload)
            return True
        if action == "stall_before_headers":
            wait_or_client_gone(sock, rule.get("seconds", 10))
            sock.close()
            return False
        if action == "endless":
            rh = [("Content-Type", "application/xml"), ("Transfer-Encoding", "chunked")]
            out = ["HTTP/1.1 %d Injected" % rule.get("status", 500)]
            out += ["%s: %s" % kv for kv in rh] + ["Connection: close"]
            sock.sendall(("\r\n".join(out) + "\r\n\r\n").encode())
            chunk = b"<Error>" + b"x" * 65536
            frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
            try:
                for _ in range(100000):  # about 6.5 GB: "endless" for any test
                    sock.sendall(frame)
            except OSError:
                pass
            sock.close()
            return False

        status, reason, rheaders, rbody = forward(method, target, headers, body)
        if action == "drop_content_range":
            rheaders = without(rheaders, "content-range")
        elif action == "shift_content_range":
            cr = get_header(rheaders, "content-range")
            if cr:
                unit, _, spec = cr.partition(" ")
                first, _, rest = spec.partition("-")
                rheaders = without(rheaders, "content-range") + [
                    ("Content-Range", "%s %d-%s" % (unit, int(first) + 1, rest))]
        elif action == "drop_etag":
            rheaders = without(rheaders, "etag")
        elif action == "flip_byte" and rbody:
            at = min(rule.get("at", len(rbody) // 2), len(rbody) - 1)
            rbody = rbody[:at] + bytes([rbody[at] ^ 0xFF]) + rbody[at + 1:]
        if method != "HEAD":
            rheaders = set_content_length(rheaders, len(rbody))

        if action == "bandwidth":
            sock.sendall(response_head(status, reason, rheaders, True))
            send_paced(sock, rbody, rule.get("bytes_per_second", 65536), rule.get("tick", 0.05))
            return True
        if action in ("reset", "truncate", "stall"):
            after = min(rule.get("after", 0), len(rbody))
            sock.sendall(response_head(status, reason, rheaders, False) + rbody[:after])
            if action == "reset":
                reset(sock)
            elif action == "truncate":
                sock.shutdown(socket.SHUT_WR)
                wait_or_client_gone(sock, 2)
                sock.close()
            else:
                wait_or_client_gone(sock, rule.get("seconds", 10))
                sock.close()
            return False
        sock.sendall(response_head(status, reason, rheaders, True) + rbody)
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def listen(port):
    """A server on `port` (0: a free one); retries while the port is busy."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return Server(("127.0.0.1", port), Handler)
        except OSError:
            if port == 0 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    server = listen(0)
    port = server.server_address[1]
    print("PORT %d" % port, flush=True)
    while True:
        server.serve_forever(poll_interval=0.05)
        # A "refuse" partition stopped the loop: nobody listens until it ends.
        server.server_close()
        with LOCK:
            until = PARTITION["until"]
        time.sleep(max(0.0, until - time.monotonic()))
        server = listen(port)


if __name__ == "__main__":
    main()

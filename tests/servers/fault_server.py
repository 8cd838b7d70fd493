#!/usr/bin/env python3
"""A loopback HTTP/1.1 file server that injects faults, for fetch tests and benchmarks.

Serves files from a directory at /f/<fault>/<name>. Supports Range, ETag, If-Range and
keep-alive like a real server (nginx does the same), and records every request.

Faults (each applies per path; "first" means the first request to that path):
  ok          plain serving
  drop        first: send half the body, then close the connection
  stall       first: send a tenth of the body, then go silent
  trickle     send 64 KiB/s (to test stall timeouts and to kill a transfer halfway)
  503, 429    first two requests: that status with Retry-After: 1
  wrong       the body has one byte flipped (a digest mismatch)
  short       first: Content-Length of the whole file, then half the bytes and close
  etagchange  first: ETag "v1" and drop halfway; afterwards ETag "v2" (If-Range must fail)
  redirect    302 to /f/ok/<name>
  loop        302 to itself, forever
  404         not found
  norange     ignores Range: always 200 and the whole file

/m/<name> serves <name> with the server's current fault, set by whoever runs the server
(bench/chaos): set_mode(fault) changes it and starts the "first request" counts afresh, so
one fixed URL in a manifest can be healthy in one run and faulty in the next.

Usage: fault_server.py DIR [PORT]   (prints the port on stdout)
"""
import http.server
import json
import os
import socketserver
import sys
import threading
import time


class FaultServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root, port=0, trickle_rate=64 * 1024):
        self.root = root
        self.trickle_rate = trickle_rate
        self.log = []
        self.counts = {}
        self.lock = threading.Lock()
        self.mode, self.epoch = "ok", 0
        super().__init__(("127.0.0.1", port), Handler)

    @property
    def port(self):
        return self.server_address[1]

    def url(self, fault, name):
        return f"http://127.0.0.1:{self.port}/f/{fault}/{name}"

    def start(self):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.shutdown()
        self.server_close()

    def set_mode(self, fault):
        """/m/<name> now answers with `fault`; each call is a new epoch of first requests."""
        with self.lock:
            self.mode, self.epoch = fault, self.epoch + 1

    def requests_for(self, name):
        with self.lock:
            return [r for r in self.log if r["path"].endswith("/" + name)]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, status, sent):
        with self.server.lock:
            self.server.log.append({"path": self.path, "range": self.headers.get("Range"),
                                    "if_range": self.headers.get("If-Range"), "status": status, "bytes": sent})

    def simple(self, status, extra=None, body=b""):
        self.send_response(status)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.record(status, len(body))

    def do_GET(self):
        if self.path.startswith("/m/"):
            with self.server.lock:
                mode, epoch = self.server.mode, self.server.epoch
            self.path = f"/f/{mode}/e{epoch}/{self.path[3:]}"  # the name's basename is served
        parts = self.path.split("?", 1)[0].split("/", 3)  # a SAS-style query string names no file
        if len(parts) != 4 or parts[1] != "f":
            return self.simple(404)
        fault, name = parts[2], parts[3]
        with self.server.lock:
            n = self.server.counts.get(self.path, 0)
            self.server.counts[self.path] = n + 1
        path = os.path.join(self.server.root, os.path.basename(name))
        if fault == "404" or not os.path.isfile(path):
            return self.simple(404)
        if fault in ("503", "429") and n < 2:
            return self.simple(int(fault), {"Retry-After": "1"})
        if fault == "redirect":
            return self.simple(302, {"Location": f"/f/ok/{name}"})
        if fault == "loop":
            return self.simple(302, {"Location": self.path})
        with open(path, "rb") as f:
            data = f.read()
        if fault == "wrong":
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        etag = '"v1"' if (fault == "etagchange" and n == 0) else ('"v2"' if fault == "etagchange" else
                                                                    f'"{int(os.path.getmtime(path))}-{len(data)}"')
        start, status = 0, 200
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and fault != "norange" and (if_range is None or if_range == etag):
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                return self.simple(416, {"Content-Range": f"bytes */{len(data)}"})
            status = 206
        body = data[start:]
        self.send_response(status)
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        first = n == 0
        if first and fault in ("drop", "short", "etagchange"):
            cut = len(body) // 2
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.record(status, cut)
            self.close_connection = True
            return
        if first and fault == "stall":
            cut = len(body) // 10
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.record(status, cut)
            time.sleep(3600)
            return
        sent = 0
        try:
            if fault == "trickle":
                step = max(1, self.server.trickle_rate // 10)
                while sent < len(body):
                    self.wfile.write(body[sent:sent + step])
                    self.wfile.flush()
                    sent += len(body[sent:sent + step])
                    time.sleep(0.1)
            else:
                self.wfile.write(body)
                sent = len(body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.record(status, sent)


if __name__ == "__main__":
    srv = FaultServer(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(srv.port, flush=True)
    srv.serve_forever()

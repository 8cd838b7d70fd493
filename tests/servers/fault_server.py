#!/usr/bin/env python3
"""A loopback HTTP/1.1 file server that injects faults, for fetch tests and benchmarks.

Serves files from a directory at /f/<fault>/<name>. Supports Range, ETag, If-Range and
keep-alive like a real server (nginx does the same), and records every request.

Faults (each applies per path; "first" means the first request to that path). Several join
with "+" (/f/auth+trickle/<name>: Basic auth required, then served slowly):
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
  downgrade   302 to http://.../f/ok/<name> (the server's downgrade_to, else itself over http): from a
              TLS server (tls=...), an https -> http downgrade
  oversize    serves the file followed by as many bytes again, Content-Length honest (twice the size)
  overlong    Content-Length of the file, then the file and 64 KiB more than it claims, and close
  endless     no Content-Length: the file, then zeros until endless_bytes in all (default 1 GiB) or
              the client hangs up
  auth        401 unless the request carries Basic auth with the server's credentials
              (userinfo_url() puts them in the URL)
  gzip        the body gzip-compressed with Content-Encoding: gzip, whatever Accept-Encoding says
  203         203 (Non-Authoritative Information) with the first half of the file as its body: a 2xx
              that is not the file (a transforming proxy's answer), never to be kept as a partial
  bigheader   200 and the file, after a response header line of 1 MiB (past libcurl's limit)

/m/<name> serves <name> with the server's current fault, set by whoever runs the server
(bench/chaos): set_mode(fault) changes it and starts the "first request" counts afresh, so
one fixed URL in a manifest can be healthy in one run and faulty in the next.

make_test_ca(DIR) makes a CA and a certificate for 127.0.0.1 with openssl, for tls=.

Usage: fault_server.py DIR [PORT]   (prints the port on stdout)
"""
import base64
import gzip
import http.server
import json
import os
import socketserver
import ssl
import subprocess
import sys
import threading
import time


class FaultServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, root, port=0, trickle_rate=64 * 1024, tls=None, credentials=("hpcbake", "s3cret-Pa55"),
                 downgrade_to=None, endless_bytes=1 << 30):
        """tls: (certificate, key) files to serve HTTPS; downgrade_to: the base URL the downgrade
        fault redirects to (default: this server over http)."""
        self.root = root
        self.trickle_rate = trickle_rate
        self.credentials = credentials
        self.downgrade_to = downgrade_to
        self.endless_bytes = endless_bytes
        self.log = []
        self.arrivals = 0  # requests numbered as they arrive: the log is kept in that order
        self.counts = {}
        self.lock = threading.Lock()
        self.mode, self.epoch = "ok", 0
        super().__init__(("127.0.0.1", port), Handler)
        self.scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.socket = ctx.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"

    @property
    def port(self):
        return self.server_address[1]

    def base(self, userinfo=False):
        """scheme://127.0.0.1:PORT, with the server's credentials (user:password@) when asked:
        a /m/ URL made with them passes the auth fault."""
        user, password = self.credentials
        return f"{self.scheme}://{f'{user}:{password}@' if userinfo else ''}127.0.0.1:{self.port}"

    def url(self, fault, name):
        return f"{self.base()}/f/{fault}/{name}"

    def userinfo_url(self, fault, name):
        """url() with the server's credentials in it (user:password@)."""
        return f"{self.base(userinfo=True)}/f/{fault}/{name}"

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
            # A handler records when it has answered, so a request whose client hung up mid-header
            # (bigheader) can be recorded after the next URL's: arrival order is the client's order.
            return sorted((r for r in self.log if r["path"].endswith("/" + name)), key=lambda r: r["arrival"])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # a client that hung up (bigheader): nothing to report
            pass

    def record(self, status, sent):
        with self.server.lock:
            self.server.log.append({"arrival": getattr(self, "arrival", 0), "path": self.path,
                                    "range": self.headers.get("Range"),
                                    "if_range": self.headers.get("If-Range"), "status": status, "bytes": sent,
                                    "accept_encoding": self.headers.get("Accept-Encoding"),
                                    "authorization": self.headers.get("Authorization")})

    def authorized(self):
        user, password = self.server.credentials
        want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return self.headers.get("Authorization") == want

    def send_close_delimited(self, status, headers, body, total):
        """No Content-Length: `body`, then zeros up to `total` bytes, then close."""
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = 0
        try:
            self.wfile.write(body)
            sent = len(body)
            zeros = bytes(256 * 1024)
            while sent < total:
                n = min(len(zeros), total - sent)
                self.wfile.write(zeros[:n])
                sent += n
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        self.record(status, sent)

    def simple(self, status, extra=None, body=b""):
        self.send_response(status)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # the client refused the body
            self.close_connection = True
        self.record(status, len(body))

    def do_GET(self):
        with self.server.lock:
            self.server.arrivals += 1
            self.arrival = self.server.arrivals
        if self.path.startswith("/m/"):
            with self.server.lock:
                mode, epoch = self.server.mode, self.server.epoch
            self.path = f"/f/{mode}/e{epoch}/{self.path[3:]}"  # the name's basename is served
        parts = self.path.split("?", 1)[0].split("/", 3)  # a SAS-style query string names no file
        if len(parts) != 4 or parts[1] != "f":
            return self.simple(404)
        fault, name = parts[2], parts[3]
        faults = set(fault.split("+"))
        with self.server.lock:
            n = self.server.counts.get(self.path, 0)
            self.server.counts[self.path] = n + 1
        path = os.path.join(self.server.root, os.path.basename(name))
        if "auth" in faults and not self.authorized():
            return self.simple(401, {"WWW-Authenticate": 'Basic realm="hpcbake fault server"'})
        if "404" in faults or not os.path.isfile(path):
            return self.simple(404)
        for code in ("503", "429"):
            if code in faults and n < 2:
                return self.simple(int(code), {"Retry-After": "1"})
        if "redirect" in faults:
            return self.simple(302, {"Location": f"/f/ok/{name}"})
        if "loop" in faults:
            return self.simple(302, {"Location": self.path})
        if "downgrade" in faults:
            base = self.server.downgrade_to or f"http://127.0.0.1:{self.server.port}"
            return self.simple(302, {"Location": f"{base}/f/ok/{name}"})
        with open(path, "rb") as f:
            data = f.read()
        if "wrong" in faults:
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:]
        if "oversize" in faults:
            data += bytes(len(data))
        if "203" in faults:
            return self.simple(203, {"ETag": '"203"'}, data[:len(data) // 2])
        if "bigheader" in faults:
            try:
                return self.simple(200, {"X-Padding": "a" * (1 << 20)}, data)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):  # the client gave up in the header
                self.close_connection = True
                return self.record(200, 0)
        if "gzip" in faults:  # whatever the client asked for (Accept-Encoding: identity included)
            return self.simple(200, {"Content-Encoding": "gzip", "ETag": '"gz"'}, gzip.compress(data))
        if "endless" in faults:
            return self.send_close_delimited(200, {"ETag": '"endless"'}, data, self.server.endless_bytes)
        etag = '"v1"' if ("etagchange" in faults and n == 0) else ('"v2"' if "etagchange" in faults else
                                                                     f'"{int(os.path.getmtime(path))}-{len(data)}"')
        start, status = 0, 200
        rng = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if rng and "norange" not in faults and (if_range is None or if_range == etag):
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
        if "overlong" in faults:  # more than the Content-Length just sent, then hang up
            body += b"\x5a" * (64 * 1024)
            self.close_connection = True
        if first and faults & {"drop", "short", "etagchange"}:
            cut = len(body) // 2
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.record(status, cut)
            self.close_connection = True
            return
        if first and "stall" in faults:
            cut = len(body) // 10
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.record(status, cut)
            time.sleep(3600)
            return
        sent = 0
        try:
            if "trickle" in faults:
                step = max(1, self.server.trickle_rate // 10)
                while sent < len(body):
                    self.wfile.write(body[sent:sent + step])
                    self.wfile.flush()
                    sent += len(body[sent:sent + step])
                    time.sleep(0.1)
            else:
                self.wfile.write(body)
                sent = len(body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        self.record(status, sent)


def make_test_ca(directory):
    """A CA (ca.pem) and a certificate for 127.0.0.1 signed by it (srv.pem, srv.key) in
    `directory`, made with openssl; returns (ca, (certificate, key)) for --ca-file and tls=."""
    def ssl_cmd(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)
    ssl_cmd("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=hpcbake fault server CA")
    ssl_cmd("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    ssl_cmd("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            "srv.pem", "-days", "2", "-extfile", "san.ext")
    join = lambda f: os.path.join(directory, f)  # noqa: E731
    return join("ca.pem"), (join("srv.pem"), join("srv.key"))


if __name__ == "__main__":
    srv = FaultServer(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(srv.port, flush=True)
    srv.serve_forever()

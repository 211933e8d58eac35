#!/usr/bin/python3
"""The attacking side of tests/integration/test_abuse.sh: hostile clients against the real tpud.

usage: abuse.py GROUP --port N [--http-port N --pid PID limits...]   (abuse.py --help)

Groups (each run against a tpud the driver started with lowered limits; the limits are passed in
so every expectation is derived from them):
  probe    a well-behaved gRPC client (h2c, one connection, ModelInfer at a fixed rate) that runs
           until a stop file appears; prints one JSON line: requests, errors, latency percentiles.
  conn     connection-level abuse on both ports at once: slowloris (silent partial frames,
           request heads and prefaces), dribblers (a byte a second), oversized length prefixes,
           half-sent frames, an HTTP client that never reads its responses, a 1 TB
           Content-Length.
  h2       HTTP/2 abuse on the native port: rapid reset (CVE-2023-44487), more than
           grpc-max-streams concurrent streams, a header list over grpc-max-header-bytes,
           CONTINUATION floods, PING and SETTINGS floods from a client that does not read,
           SETTINGS never acknowledged (silent and chatty), a message over max-message-bytes.
  flood    connection floods past --max-connections on both ports, and the limit across ports.
  memory   response amplification held by clients that never read (framed) or never grant
           flow-control window (gRPC): server RSS against max-unsent-bytes.
  tls      abuse of a TLS tpud: garbage, plaintext, silent and dribbled ClientHellos on both
           ports, ALPN h2 without a SETTINGS acknowledgement.
  answers  one gRPC ServerLive and ModelInfer (is the server still serving?).

Prints "ok: ...", "FAIL: ..." and "note: ..." lines (a note is a weakness worth knowing that no
documented limit promises to prevent); exits 1 when anything failed. Needs only the standard
library and python3-h2 (hyperframe, hpack).
"""
import argparse
import json
import os
import select
import socket
import ssl
import struct
import sys
import threading
import time
import urllib.request

import hpack
import hyperframe.frame as hf

FAILS = 0
LOCK = threading.Lock()


def say(kind, msg):
    with LOCK:
        print("%s: %s" % (kind, msg), flush=True)


def ok(msg):
    say("ok", msg)


def note(msg):
    say("note", msg)


def fail(msg):
    global FAILS
    with LOCK:
        FAILS += 1
    say("FAIL", msg)


def check(cond, good, bad):
    (ok if cond else fail)(good if cond else bad)
    return cond


# ---- the server's own view: /proc and /metrics ----

# Under AddressSanitizer (make test-asan sets ASAN_OPTIONS) freed memory sits in its quarantine
# and RSS says nothing about what tpud holds: RSS reads as 0 there, so every RSS bound holds
# trivially; the Release run (make test) is the one that checks them.
SANITIZED = bool(os.environ.get("ASAN_OPTIONS"))


def rss_mib(pid):
    if SANITIZED:
        return 0.0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics(hport):
    """/metrics as {'name{labels}': value}; {} when the server cannot be asked right now."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hport, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


# ---- bytes: protobuf, tpud frames, HTTP/2 ----

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fld(num, payload):
    """A protobuf field: int → varint, bytes → length-delimited."""
    if isinstance(payload, int):
        return varint(num << 3) + varint(payload)
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def envelope(rid, method, payload=b""):
    return fld(1, rid) + fld(2, method) + (fld(5, payload) if payload else b"")


def prefix(msg):
    """gRPC's length prefix: flag 0, 4-byte big-endian length."""
    return b"\x00" + struct.pack(">I", len(msg)) + msg


SERVER_LIVE, MODEL_INFER, MATMUL = 1, 6, 9


def matmul_req(m, k, n):
    """INT8 A[m,k] x B[k,n]: (m·k + k·n) bytes in, an m·n INT32 result (4·m·n bytes) out."""
    def tensor(shape, data):
        return b"".join(fld(1, s) for s in shape) + fld(2, b"INT8") + fld(3, data)
    return fld(1, tensor([m, k], b"\x01" * (m * k))) + fld(2, tensor([k, n], b"\x01" * (k * n)))


def infer_req(model, name, width):
    t = fld(1, name.encode()) + fld(2, b"FP32") + fld(3, 1) + fld(3, width)
    return (fld(1, model.encode()) + fld(5, t) +
            fld(7, struct.pack("<%df" % width, *([0.25] * width))))


def decode_response(b):
    """(id, code, message) of a tpud ResponseEnvelope."""
    i, rid, code, msg = 0, 0, 0, ""

    def rv(i):
        v = shift = 0
        while True:
            c = b[i]
            i += 1
            v |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return v, i
    while i < len(b):
        key, i = rv(i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = rv(i)
            if num == 1:
                rid = v
            elif num == 2:
                code = v
        elif wt == 2:
            n, i = rv(i)
            if num == 3:
                msg = b[i:i + n].decode(errors="replace")
            i += n
        else:
            break
    return rid, code, msg


def read_responses(sock, timeout):
    """Framed responses until EOF or timeout: ([(id, code, msg)], eof)."""
    end = time.time() + timeout
    buf, eof = b"", False
    while time.time() < end:
        r, _, _ = select.select([sock], [], [], max(0.0, end - time.time()))
        if not r:
            break
        try:
            d = sock.recv(65536)
        except OSError:
            d = b""
        if not d:
            eof = True
            break
        buf += d
    out = []
    while len(buf) >= 5:
        n = struct.unpack(">I", buf[1:5])[0]
        if len(buf) < 5 + n:
            break
        out.append(decode_response(buf[5:5 + n]))
        buf = buf[5 + n:]
    return out, eof


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
LIVE_PATH = "/inference.GRPCInferenceService/ServerLive"
MATMUL_PATH = "/tpud.TpudService/MatMul"
H2_ERRORS = {0: "NO_ERROR", 1: "PROTOCOL_ERROR", 2: "INTERNAL_ERROR", 3: "FLOW_CONTROL_ERROR",
             7: "REFUSED_STREAM", 8: "CANCEL", 11: "ENHANCE_YOUR_CALM"}


def h2err(code):
    return H2_ERRORS.get(code, str(code))


def grpc_headers(path, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers")] + list(extra)


def header_block(path, extra=()):
    """A self-contained HPACK block (a fresh encoder: valid on any connection, any number of
    times)."""
    return hpack.Encoder().encode(grpc_headers(path, extra))


class H2:
    """A raw HTTP/2 client connection: frames out as bytes, frames in parsed (hyperframe)."""

    def __init__(self, port, ack=True, settings=None, sock=None, preface=True):
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf, self.eof, self.frames = b"", False, []
        self.dec = hpack.Decoder()
        self.dec.max_header_list_size = 1 << 20
        self.data_in = 0  # DATA bytes received and not yet given back with WINDOW_UPDATE
        self.t0 = time.time()
        if preface:
            f = hf.SettingsFrame(0)
            if settings:
                f.settings = settings
            self.send(PREFACE + f.serialize())
            if ack:
                self.wait_for(lambda f: isinstance(f, hf.SettingsFrame) and "ACK" not in f.flags, 5)
                self.send(hf.SettingsFrame(0, flags=["ACK"]).serialize())

    def send(self, data):
        self.sock.sendall(data)

    def poll(self, timeout):
        """Waits up to timeout for bytes, then reads all that are there; returns the new
        frames."""
        new = []
        end = time.time() + timeout
        got = False
        while True:
            rem = 0.0 if got else max(0.0, end - time.time())
            r, _, _ = select.select([self.sock], [], [], rem)
            got = got or bool(r)
            if r:
                try:
                    d = self.sock.recv(1 << 20)
                except OSError:
                    d = b""
                if not d:
                    self.eof = True
                self.buf += d
                while len(self.buf) >= 9:
                    f, length = hf.Frame.parse_frame_header(memoryview(self.buf[:9]))
                    if len(self.buf) < 9 + length:
                        break
                    f.parse_body(memoryview(self.buf[9:9 + length]))
                    self.buf = self.buf[9 + length:]
                    if isinstance(f, (hf.HeadersFrame, hf.ContinuationFrame)):
                        f.hdrs = {}
                        try:  # (a HEADERS frame of ours never spans CONTINUATION frames)
                            for k, v in self.dec.decode(f.data):
                                f.hdrs[k.decode() if isinstance(k, bytes) else k] = (
                                    v.decode() if isinstance(v, bytes) else v)
                        except Exception as e:
                            f.hdrs = {"hpack-error": str(e)}
                    elif isinstance(f, hf.DataFrame):
                        self.data_in += length
                    new.append(f)
            if self.eof or not r or rem <= 0:
                self.frames += new
                return new

    def wait_for(self, pred, timeout):
        end = time.time() + timeout
        for f in self.frames:
            if pred(f):
                return f
        while time.time() < end and not self.eof:
            for f in self.poll(min(0.2, max(0.0, end - time.time()))):
                if pred(f):
                    return f
        return None

    def goaway(self):
        for f in self.frames:
            if isinstance(f, hf.GoAwayFrame):
                return f
        return None

    def call(self, sid, path, msg, extra=()):
        """Sends one unary gRPC call on stream sid."""
        self.send(hf.HeadersFrame(sid, data=header_block(path, extra),
                                  flags=["END_HEADERS"]).serialize() +
                  hf.DataFrame(sid, data=prefix(msg), flags=["END_STREAM"]).serialize())

    def status(self, sid, timeout=5):
        """The grpc-status (int) and grpc-message of stream sid's answer, or (None, why)."""
        end = time.time() + timeout
        seen = 0
        while True:
            frames = self.frames
            for f in frames[seen:]:
                if isinstance(f, hf.HeadersFrame):
                    if f.stream_id == sid and "grpc-status" in f.hdrs:
                        return int(f.hdrs["grpc-status"]), f.hdrs.get("grpc-message", "")
                elif isinstance(f, hf.RstStreamFrame) and f.stream_id == sid:
                    return None, "RST_STREAM %s" % h2err(f.error_code)
                elif isinstance(f, hf.GoAwayFrame):
                    return None, "GOAWAY %s" % h2err(f.error_code)
            seen = len(frames)
            if self.eof or time.time() >= end:
                return None, "no answer (eof %s)" % self.eof
            self.poll(min(0.2, max(0.0, end - time.time())))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def peer_closed(sock):
    """Whether the server closed (or reset) the connection; reads nothing."""
    p = select.poll()
    p.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return bool(p.poll(0))


def watch_close(socks, limit_s, feed=None, every=1.0):
    """Waits until each socket in {name: sock} is closed by the server or limit_s passes;
    feed(name, sock, i) is called every `every` seconds on those still open (dribblers).
    Returns {name: seconds until closed, or None}."""
    t0 = time.time()
    res = {k: None for k in socks}
    left = dict(socks)
    next_feed, i = t0 + every, 0
    while left and time.time() - t0 < limit_s:
        for k, s in list(left.items()):
            if peer_closed(s):
                res[k] = time.time() - t0
                del left[k]
        if feed and time.time() >= next_feed:
            i += 1
            next_feed += every
            for k, s in list(left.items()):
                try:
                    feed(k, s, i)
                except OSError:
                    pass
        time.sleep(0.05)
    for s in socks.values():
        try:
            s.close()
        except OSError:
            pass
    return res


def connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def in_window(t, lo, hi):
    return t is not None and lo <= t <= hi


def fmt(t):
    return "still open" if t is None else "%.1f s" % t


def run_threads(*fns):
    ts = [threading.Thread(target=guard, args=(f,)) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def guard(fn):
    try:
        fn()
    except Exception as e:  # a crash in one case is a failure, not a hung driver
        import traceback
        traceback.print_exc()
        fail("%s raised %s: %s" % (fn.__name__, type(e).__name__, e))


# ---- probe: the well-behaved gRPC client ----

def probe(a):
    """ModelInfer (digits) on one h2c connection at a.rate per second until a.stop exists."""
    lat, errors, kinds = [], 0, {}
    h = H2(a.port)
    sid = 1
    interval = 1.0 / a.rate
    next_t = time.time()
    msg = infer_req("digits", "x", 64)
    while not os.path.exists(a.stop):
        now = time.time()
        if now < next_t:
            time.sleep(min(next_t - now, 0.05))
            continue
        next_t = max(next_t + interval, now)  # paced; a late call does not make the next ones late
        sent_at = time.time()
        try:
            if h.eof or sid > 2 ** 30:
                h.close()
                h, sid = H2(a.port), 1
            h.call(sid, INFER_PATH, msg)
            st, why = h.status(sid, timeout=10)
        except OSError as e:
            st, why = None, "socket: %s" % e
            h.eof = True
        h.frames = []
        if h.data_in >= 16384 and not h.eof:  # give the connection window back
            try:
                h.send(hf.WindowUpdateFrame(0, window_increment=h.data_in).serialize())
            except OSError:
                h.eof = True
            h.data_in = 0
        sid += 2
        if st == 0:
            lat.append((time.time() - sent_at) * 1000.0)  # from the send (this client is Python)
        else:
            errors += 1
            k = str(st) if st is not None else why.split(" (")[0]
            kinds[k] = kinds.get(k, 0) + 1
            if st is None:
                h.eof = True  # reset, GOAWAY or gone: the next call reconnects
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(len(lat) * p / 100.0))] if lat else 0.0
    print(json.dumps({"requests": len(lat), "errors": errors, "errors_by_status": kinds,
                      "latency_ms": {"p50": pct(50), "p99": pct(99),
                                     "max": lat[-1] if lat else 0.0}}), flush=True)
    return 0


# ---- conn: connection-level abuse on both ports ----

def conn_group(a):
    IDLE, HT, HS, SLACK = a.idle_timeout, a.http_timeout, a.handshake_timeout, a.slack

    def slowloris():
        """Silent partial input: each connection must be closed by its timeout, no sooner."""
        native = {"empty": b"", "2 bytes of a frame header": b"\x00\x00",
                  "a frame header alone": b"\x00\x00\x00\x00\x40",
                  "half a frame": b"\x00\x00\x00\x00\x40" + b"\x08" * 20}
        http = {"empty": b"", "half a request line": b"GET /v2/hea",
                "a head without its blank line": b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",
                "half a body": b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 100\r\n\r\n{\"inputs\""}
        socks = {}
        for k, v in native.items():
            s = connect(a.port)
            s.sendall(v)
            socks["native: " + k] = s
        for k, v in http.items():
            s = connect(a.http_port)
            s.sendall(v)
            socks["http: " + k] = s
        s = connect(a.port)
        s.sendall(PREFACE[:9])
        socks["h2: 9 bytes of the preface"] = s
        res = watch_close(socks, max(IDLE, HT, HS) + SLACK + 2)
        for k, t in res.items():
            lim = IDLE if k.startswith("native") else HT if k.startswith("http") else HS
            name = ("--idle-timeout-s" if k.startswith("native") else
                    "--http-timeout-s" if k.startswith("http") else "--tls-handshake-timeout-s")
            hi = lim + SLACK + (1 if k.startswith("http") else 0)  # HTTP: a once-a-second sweep
            check(in_window(t, lim - 0.5, hi),
                  "slowloris (%s) closed by the server after %.1f s (%s %d)"
                  % (k, t or 0, name, lim),
                  "slowloris (%s): %s, expected closed by %s (%d s) within [%.1f, %.1f] s"
                  % (k, fmt(t), name, lim, lim - 0.5, hi))

    def dribblers():
        """One byte a second, never finishing: a frame, a request head, the HTTP/2 preface."""
        pay = {"native frame": b"\x00\x00\x00\x10\x00" + b"\x08" * 4096,
               "http head": b"GET /v2/health/ready HTTP/1.1\r\nX-Slow: " + b"a" * 4096,
               "h2 preface": PREFACE + b"\x00" * 4096}
        socks = {"native frame": connect(a.port), "http head": connect(a.http_port),
                 "h2 preface": connect(a.port)}
        for k, s in socks.items():
            s.sendall(pay[k][:1])
        lim = max(IDLE, HT, HS) + SLACK + 2
        res = watch_close(socks, lim, feed=lambda k, s, i: s.send(pay[k][i:i + 1]))
        # Documented: "a client that does not acknowledge the server's SETTINGS within
        # --tls-handshake-timeout-s is closed" (README, grpc.c). A preface never completed
        # never acknowledges anything.
        t = res["h2 preface"]
        check(in_window(t, HS - 0.5, HS + SLACK),
              "h2 dribbler (preface a byte a second, SETTINGS never acknowledged) closed after "
              "%.1f s (--tls-handshake-timeout-s %d)" % (t or 0, HS),
              "h2 dribbler (preface a byte a second, SETTINGS never acknowledged): %s after "
              "%.0f s, expected closed within --tls-handshake-timeout-s %d (+%d s slack): the "
              "SETTINGS deadline is an inactivity timeout, every byte re-arms it"
              % (fmt(t), lim, HS, SLACK))
        for k, what in (("native frame", "--idle-timeout-s %d" % IDLE),
                        ("http head", "--http-timeout-s %d" % HT)):
            t = res[k]
            if t is None:
                note("slowloris dribbler (%s, a byte a second) still open after %.0f s: %s is "
                     "an inactivity timeout, so a client that trickles never finishes its %s "
                     "and holds its connection slot; only --max-connections bounds them"
                     % (k, lim, what, "frame" if k.startswith("native") else "request head"))
            else:
                ok("slowloris dribbler (%s) closed after %.1f s" % (k, t))

    def oversized():
        """Length prefixes the server must refuse from the 5 header bytes alone."""
        cases = [("length 0xFFFFFFFF", b"\x00\xff\xff\xff\xff", 8, "maximum message size"),
                 ("length max-message-bytes + 1",
                  b"\x00" + struct.pack(">I", a.max_message + 1), 8, "maximum message size"),
                 ("length 2^31 with some body", b"\x00\x80\x00\x00\x00" + b"\x00" * 1000, 8,
                  "maximum message size"),
                 ("flag byte 0x7f", b"\x7f\x00\x00\x00\x01", 3, "flag"),
                 ("compressed flag", b"\x01\x00\x00\x00\x05", 12, "compress")]
        for what, data, code, words in cases:
            s = connect(a.port)
            r0 = rss_mib(a.pid)
            t0 = time.time()
            s.sendall(data)
            resp, eof = read_responses(s, 5)
            dt = time.time() - t0
            s.close()
            good = (eof and len(resp) == 1 and resp[0][0] == 0 and resp[0][1] == code
                    and words in resp[0][2])
            check(good, "oversized/bad prefix (%s): error %d for id 0 (\"%s\") and closed in "
                  "%.2f s, RSS %+.1f MiB" % (what, code, resp[0][2][:60] if resp else "",
                                             dt, rss_mib(a.pid) - r0),
                  "oversized/bad prefix (%s): responses %r, closed %s, expected one error "
                  "frame (id 0, code %d) and a close" % (what, resp, eof, code))

    def half_sent():
        """A frame whose body stops half way and then the client half-closes: the server must
        close (and count a bad frame), not wait for the rest forever."""
        for body in (b"\x00\x00\x00\x01\x00" + b"\x08" * 100,
                     prefix(envelope(7, SERVER_LIVE))[:-2]):
            s = connect(a.port)
            s.sendall(body)
            s.shutdown(socket.SHUT_WR)
            t0 = time.time()
            resp, eof = read_responses(s, 5)
            s.close()
            dt = time.time() - t0
            check(eof and dt < 3,
                  "half-sent frame (%d bytes) then EOF: closed in %.2f s" % (len(body), dt),
                  "half-sent frame then EOF: closed %s after %.1f s, responses %r"
                  % (eof, time.time() - t0, resp))

    def http_never_reads():
        """Pipelined infer requests whose answers are never read: the server must stop reading
        (back-pressure) and close the connection after --http-timeout-s of no write progress.
        (The matmul model: 64 rows of 256 in, 64 rows of 256 out, so answers outweigh
        requests and the server's output fills first.)"""
        body = (b'{"inputs":[{"name":"a","shape":[64,256],"datatype":"FP32","data":[' +
                b",".join([b"3"] * (64 * 256)) + b"]}]}")
        req = (b"POST /v2/models/matmul/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
        s = connect(a.http_port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(1.0)
        sent, t0, blocked = 0, time.time(), False
        r0 = rss_mib(a.pid)
        try:
            while time.time() - t0 < 10:
                s.sendall(req)
                sent += 1
        except socket.timeout:
            blocked = True
        except OSError:
            pass
        grew = rss_mib(a.pid) - r0
        res = watch_close({"x": s}, HT + SLACK + 2)
        t = res["x"]
        check(blocked and t is not None and t <= HT + 1 + SLACK,
              "HTTP client that never reads: server stopped reading after %d pipelined requests "
              "(%.1f MiB of them), closed the connection %.1f s later (--http-timeout-s %d); "
              "RSS %+.1f MiB" % (sent, sent * len(req) / 2 ** 20, t or 0, HT, grew),
              "HTTP client that never reads: blocked %s after %d requests, then %s "
              "(--http-timeout-s %d)" % (blocked, sent, fmt(t), HT))

    def http_huge_body():
        """An HTTP Content-Length of a terabyte: refused from the head (413), nothing
        allocated for it."""
        s = connect(a.http_port)
        r0 = rss_mib(a.pid)
        s.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1000000000000\r\n\r\n{\"inputs\":")
        s.settimeout(5)
        try:
            d = s.recv(4096)
        except OSError:
            d = b""
        s.close()
        check(d.startswith(b"HTTP/1.1 413"),
              "HTTP Content-Length of 1 TB: 413 from the head alone, RSS %+.1f MiB"
              % (rss_mib(a.pid) - r0),
              "HTTP Content-Length of 1 TB: got %r" % d[:80])

    run_threads(slowloris, dribblers, oversized, half_sent, http_never_reads, http_huge_body)
    return 1 if FAILS else 0


# ---- h2: HTTP/2 abuse on the native port ----

def h2_group(a):
    HS, SLACK = a.handshake_timeout, a.slack

    def never_acks():
        """Our SETTINGS never acknowledged: closed after --tls-handshake-timeout-s, whether the
        client stays silent or keeps talking (PING every half second)."""
        silent = H2(a.port, ack=False)
        chatty = H2(a.port, ack=False)
        t0 = time.time()
        done = {}
        while time.time() - t0 < HS + SLACK + 2 and len(done) < 2:
            for name, h in (("silent", silent), ("chatty", chatty)):
                if name in done:
                    continue
                h.poll(0)
                if h.eof or peer_closed(h.sock):
                    done[name] = time.time() - t0
            try:
                if "chatty" not in done:
                    chatty.send(hf.PingFrame(0, opaque_data=b"12345678").serialize())
            except OSError:
                pass
            time.sleep(0.5)
        for name in ("silent", "chatty"):
            t = done.get(name)
            check(in_window(t, HS - 0.5, HS + SLACK),
                  "SETTINGS never acknowledged (%s client): closed after %.1f s "
                  "(--tls-handshake-timeout-s %d)" % (name, t or 0, HS),
                  "SETTINGS never acknowledged (%s client): %s after %.0f s, expected closed "
                  "within --tls-handshake-timeout-s %d (+%d s slack)%s"
                  % (name, fmt(t), time.time() - t0, HS, SLACK,
                     ": a PING every 0.5 s re-arms the deadline (it is a read timeout)"
                     if name == "chatty" else ""))
        silent.close()
        chatty.close()

    def rapid_reset(with_body):
        """HEADERS (+ DATA with a real ModelInfer) then RST_STREAM, in a loop: nghttp2's
        stream-reset limit (a burst of 1000, then 33 a second) must end it with GOAWAY, the
        server must not compute what was reset, and the connection must close."""
        what = "HEADERS+DATA+RST_STREAM" if with_body else "HEADERS+RST_STREAM"
        m0 = metrics(a.http_port)
        c0 = cpu_s(a.pid)
        h = H2(a.port)
        hb = header_block(INFER_PATH)
        body = prefix(infer_req(a.reset_model, "a", 256))
        sid, sent, t0 = 1, 0, time.time()
        try:
            while time.time() - t0 < 15 and not h.eof and not h.goaway():
                chunk = []
                for _ in range(50):
                    chunk.append(hf.HeadersFrame(sid, data=hb, flags=["END_HEADERS"]).serialize())
                    if with_body:
                        chunk.append(hf.DataFrame(sid, data=body, flags=["END_STREAM"]).serialize())
                    r = hf.RstStreamFrame(sid)
                    r.error_code = 8  # CANCEL
                    chunk.append(r.serialize())
                    sid += 2
                h.send(b"".join(chunk))
                sent += 50
                h.poll(0)
        except OSError:
            pass
        h.wait_for(lambda f: isinstance(f, hf.GoAwayFrame), 3)
        dt = time.time() - t0
        g = h.goaway()
        closed_at = watch_close({"x": h.sock}, 5)["x"]
        time.sleep(0.5)  # let cancelled calls come back
        m1 = metrics(a.http_port)
        cpu = cpu_s(a.pid) - c0
        key = 'tpud_model_requests_total{model="%s",version="1",code="%%s"}' % a.reset_model
        calls = sum(m1.get(key % c, 0) - m0.get(key % c, 0) for c in ("OK", "CANCELLED"))
        key = 'tpud_model_rows_total{model="%s",version="1"}' % a.reset_model
        rows = m1.get(key, 0) - m0.get(key, 0)
        bound = 1000 + 33 * dt + 100
        if not g:
            fail("rapid reset (%s): no GOAWAY after %d streams in %.1f s (closed: %s)"
                 % (what, sent, dt, fmt(closed_at)))
            return
        accepted = (g.last_stream_id + 1) // 2
        check(accepted <= bound and closed_at is not None,
              "rapid reset (%s): GOAWAY %s after %d streams sent in %.2f s (last stream "
              "processed %d, i.e. %d streams; bound %d), connection closed"
              % (what, h2err(g.error_code), sent, dt, g.last_stream_id, accepted, bound),
              "rapid reset (%s): GOAWAY after %d streams (last stream %d, bound %d), closed %s"
              % (what, sent, g.last_stream_id, bound, fmt(closed_at)))
        check(g.error_code == 11,
              "rapid reset (%s): the GOAWAY says ENHANCE_YOUR_CALM" % what,
              "rapid reset (%s): GOAWAY error code %s, but README (gRPC section) and issue #10 "
              "promise ENHANCE_YOUR_CALM (nghttp2's own stream-reset limit sends "
              "INTERNAL_ERROR)" % (what, h2err(g.error_code)))
        if with_body:
            check(calls <= bound and rows <= calls / 2,
                  "rapid reset: %d calls reached model '%s' (%d rows computed, server CPU %.2f s) "
                  "for %d streams sent: compute bounded" % (calls, a.reset_model, rows, cpu, sent),
                  "rapid reset: %d calls reached the model, %d rows computed (bounds: %d calls, "
                  "half of them computed): reset streams' calls are not being cancelled"
                  % (calls, rows, bound))

    def too_many_streams():
        """More than --grpc-max-streams open streams: the extra ones must be refused
        (RST_STREAM REFUSED_STREAM, or a connection error naming the limit)."""
        n = a.max_streams + 10
        h = H2(a.port)
        hb = header_block(INFER_PATH)
        h.send(b"".join(hf.HeadersFrame(1 + 2 * i, data=hb, flags=["END_HEADERS"]).serialize()
                        for i in range(n)))
        end = time.time() + 2
        while time.time() < end and not h.eof and not h.goaway():
            h.poll(0.2)
        refused = [f.stream_id for f in h.frames
                   if isinstance(f, hf.RstStreamFrame) and f.error_code == 7]
        g = h.goaway()
        if g:
            check(g.error_code == 1 and g.last_stream_id <= 2 * a.max_streams - 1,
                  "%d concurrent streams: connection error %s at stream %d (\"%s\"): the "
                  "streams past --grpc-max-streams %d were refused"
                  % (n, h2err(g.error_code), g.last_stream_id,
                     g.additional_data.decode(errors="replace"), a.max_streams),
                  "%d concurrent streams: GOAWAY %s last stream %d"
                  % (n, h2err(g.error_code), g.last_stream_id))
        else:
            check(len(refused) >= 10 and min(refused) > 2 * a.max_streams - 1,
                  "%d concurrent streams: %d refused with REFUSED_STREAM" % (n, len(refused)),
                  "%d concurrent streams: neither refused nor GOAWAY (refused %r)" % (n, refused))
        h.close()

    def big_headers():
        """A 20 KiB header list (HEADERS + CONTINUATION) over --grpc-max-header-bytes: the
        call is RESOURCE_EXHAUSTED and the connection keeps serving."""
        h = H2(a.port)
        hb = header_block(LIVE_PATH, [("x-padding", "p" * 20000)])
        h.send(hf.HeadersFrame(1, data=hb[:16000]).serialize() +
               hf.ContinuationFrame(1, data=hb[16000:], flags=["END_HEADERS"]).serialize() +
               hf.DataFrame(1, data=prefix(b""), flags=["END_STREAM"]).serialize())
        st, msg = h.status(1)
        check(st == 8 and "grpc-max-header-bytes" in msg,
              "20 KiB header list: grpc-status 8 (%s)" % msg,
              "20 KiB header list: grpc-status %s (%s), expected 8 RESOURCE_EXHAUSTED" % (st, msg))
        h.call(3, LIVE_PATH, b"")
        st, msg = h.status(3)
        check(st == 0, "the same connection then serves ServerLive",
              "ServerLive after the big header list: %s %s" % (st, msg))
        h.close()

    def continuation_flood(junk):
        """HEADERS without END_HEADERS followed by endless CONTINUATION frames (empty, or each
        carrying a new header field): nghttp2's CONTINUATION limit must end the connection
        quickly, with memory flat."""
        what = "with header fields" if junk else "empty"
        r0 = rss_mib(a.pid)
        h = H2(a.port)
        h.send(hf.HeadersFrame(1, data=header_block(LIVE_PATH)).serialize())
        sent, t0 = 0, time.time()
        try:
            while time.time() - t0 < 10 and not h.eof and not h.goaway():
                if junk:
                    frames = [hf.ContinuationFrame(1, data=hpack.Encoder().encode(
                        [("x-junk-%d" % (sent + i), "v" * 200)])).serialize() for i in range(100)]
                else:
                    frames = [hf.ContinuationFrame(1, data=b"").serialize()] * 100
                h.send(b"".join(frames))
                sent += 100
                h.poll(0)
        except OSError:
            pass
        h.wait_for(lambda f: isinstance(f, hf.GoAwayFrame), 2)
        g = h.goaway()
        t = watch_close({"x": h.sock}, 3)["x"]
        grew = rss_mib(a.pid) - r0
        check((g or t is not None) and time.time() - t0 < 8 and grew < 32,
              "CONTINUATION flood (%s): %s after %d frames in %.2f s, RSS %+.1f MiB"
              % (what, "GOAWAY " + h2err(g.error_code) if g else "closed", sent,
                 time.time() - t0, grew),
              "CONTINUATION flood (%s): %d frames sent, GOAWAY %s, closed %s, RSS %+.1f MiB"
              % (what, sent, g and h2err(g.error_code), fmt(t), grew))

    def control_flood(kind):
        """PING or SETTINGS frames as fast as possible from a client that never reads the
        acknowledgements: the server must stop reading (back-pressure) or say GOAWAY; its
        memory must stay flat either way."""
        r0 = rss_mib(a.pid)
        h = H2(a.port)
        h.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if kind == "PING":
            frame = hf.PingFrame(0, opaque_data=b"abcdefgh").serialize()
        else:
            f = hf.SettingsFrame(0)
            f.settings = {hf.SettingsFrame.INITIAL_WINDOW_SIZE: 65535}
            frame = f.serialize()
        batch = frame * 1000
        h.sock.settimeout(2)
        sent, t0, how = 0, time.time(), "ran 10 s unhindered"
        try:
            while time.time() - t0 < 10:
                h.sock.sendall(batch)
                sent += 1000
        except socket.timeout:
            how = "server stopped reading (back-pressure)"
        except OSError as e:
            how = "connection ended (%s)" % e.__class__.__name__
        peak = rss_mib(a.pid) - r0
        h.sock.settimeout(10)
        h.poll(0.5)
        g = h.goaway()
        if g:
            how = "GOAWAY %s" % h2err(g.error_code)
        check(how != "ran 10 s unhindered" and peak < 32,
              "%s flood from a client that never reads: %s after %d frames (%.1f MB) in %.1f s, "
              "RSS %+.1f MiB" % (kind, how, sent, sent * len(frame) / 1e6, time.time() - t0, peak),
              "%s flood: %s, %d frames, RSS %+.1f MiB" % (kind, how, sent, peak))
        h.close()

    def big_message():
        """A 2 MiB gRPC message over --max-message-bytes: RESOURCE_EXHAUSTED (answered before
        the client has finished sending); then a prefix that merely announces 4 GiB."""
        h = H2(a.port)
        msg = b"\x00" * (2 * a.max_message)
        h.send(hf.HeadersFrame(1, data=header_block(INFER_PATH), flags=["END_HEADERS"]).serialize())
        data = prefix(msg)
        off, early = 0, None
        try:
            while off < len(data):
                chunk = data[off:off + 16384]
                off += len(chunk)
                h.send(hf.DataFrame(1, data=chunk,
                                    flags=["END_STREAM"] if off >= len(data) else []).serialize())
                if early is None and any(isinstance(f, hf.HeadersFrame) for f in h.poll(0)):
                    early = off
        except OSError:
            pass
        st, why = h.status(1)
        check(st == 8 and "max-message-bytes" in why,
              "%d-byte gRPC message: grpc-status 8 (%s)%s" % (
                  len(msg), why, ", answered after %d bytes" % early if early else ""),
              "%d-byte gRPC message: %s %s" % (len(msg), st, why))
        h.send(hf.HeadersFrame(3, data=header_block(INFER_PATH), flags=["END_HEADERS"]).serialize()
               + hf.DataFrame(3, data=b"\x00\xff\xff\xff\xff" + b"\x00" * 100,
                              flags=["END_STREAM"]).serialize())
        st, why = h.status(3)
        check(st == 8, "a prefix announcing 4 GiB: grpc-status 8 (%s)" % why,
              "a prefix announcing 4 GiB: %s %s" % (st, why))
        h.call(5, LIVE_PATH, b"")
        st, why = h.status(5)
        check(st == 0, "the same connection then serves ServerLive",
              "ServerLive after: %s %s" % (st, why))
        h.close()

    def sequence():
        rapid_reset(True)
        rapid_reset(False)
        too_many_streams()
        big_headers()
        continuation_flood(False)
        continuation_flood(True)
        big_message()
        control_flood("PING")
        control_flood("SETTINGS")

    run_threads(never_acks, sequence)
    return 1 if FAILS else 0


# ---- flood: past --max-connections ----

def flood_group(a):
    MAX, IDLE, SLACK = a.max_connections, a.idle_timeout, a.slack

    def open_many(port, n, first=b""):
        socks = []
        for _ in range(n):
            try:
                s = connect(port)
                if first:
                    s.sendall(first)
                socks.append(s)
            except OSError:
                pass
        return socks

    # 1. HTTP: 2×MAX keep-alive connections, each asking for /v2/health/live.
    req = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    hs = open_many(a.http_port, 2 * MAX, req)
    answers, t0 = {}, time.time()
    while len(answers) < len(hs) and time.time() - t0 < 5:
        for i, s in enumerate(hs):
            if i not in answers and select.select([s], [], [], 0)[0]:
                try:
                    answers[i] = s.recv(4096)
                except OSError:
                    answers[i] = b""
        time.sleep(0.05)
    served = sum(1 for d in answers.values() if d.startswith(b"HTTP/1.1 200"))
    busy = sum(1 for d in answers.values() if d.startswith(b"HTTP/1.1 503")
               and b"max-connections reached" in d)
    time.sleep(0.3)
    http_open = sum(1 for s in hs if not peer_closed(s))
    check(served + busy == len(hs) and http_open == served and served <= MAX
          and busy >= len(hs) - MAX,
          "HTTP flood of %d connections: %d served, %d answered 503 \"max-connections reached\" "
          "and closed (--max-connections %d)" % (len(hs), served, busy, MAX),
          "HTTP flood of %d connections: %d served, %d got the 503, %d still open "
          "(--max-connections %d)" % (len(hs), served, busy, http_open, MAX))
    # 2. With the HTTP port holding what the limit leaves, the native port must refuse too:
    #    --max-connections counts "open connections at once" (tpud --help), both ports.
    ns = open_many(a.port, 10)
    time.sleep(1.0)
    native_open = sum(1 for s in ns if not peer_closed(s))
    check(native_open == 0,
          "with %d HTTP connections open, %d new native connections were all refused "
          "(the limit counts both ports)" % (http_open, len(ns)),
          "--max-connections %d not enforced across ports: with %d HTTP connections open "
          "(the HTTP port refused the rest), %d of %d new native connections were accepted; "
          "the native accept counts only native connections (server.c on_accept), the HTTP "
          "accept counts both (http.c on_accept)" % (MAX, http_open, native_open, len(ns)))
    for s in hs + ns:
        s.close()
    time.sleep(0.5)
    # 3. Native: 2×MAX silent connections. The ones past the limit are closed at once; the
    #    rest by the idle timeout, although the flooder keeps its sockets.
    ns = open_many(a.port, 2 * MAX)
    t0 = time.time()
    closed_n, stable = -1, 0
    while time.time() - t0 < 4 and stable < 4:  # until the server has dealt with all of them
        time.sleep(0.1)
        n = sum(1 for s in ns if peer_closed(s))
        stable = stable + 1 if n == closed_n else 0
        closed_n = n
    held = [s for s in ns if not peer_closed(s)]
    check(len(held) <= MAX and len(ns) - len(held) >= len(ns) - MAX,
          "native flood of %d connections: %d held, %d closed at accept (--max-connections %d)"
          % (len(ns), len(held), len(ns) - len(held), MAX),
          "native flood of %d connections: %d held open (--max-connections %d)"
          % (len(ns), len(held), MAX))
    # a new client cannot get in now...
    s = connect(a.port)
    s.sendall(prefix(envelope(1, SERVER_LIVE)))
    resp, eof = read_responses(s, 2)
    s.close()
    check(not resp, "a new native client is refused while the flood holds every slot",
          "a new native client was served while the flood should hold every slot: %r" % resp)
    # ...until the idle timeout frees the slots, with the flooder still holding its sockets.
    while time.time() - t0 < IDLE + SLACK and any(not peer_closed(s) for s in held):
        time.sleep(0.1)
    left = sum(1 for s in held if not peer_closed(s))
    check(left == 0, "the %d held flood connections were closed by --idle-timeout-s %d after "
          "%.1f s" % (len(held), IDLE, time.time() - t0),
          "%d flood connections still open %.1f s after the flood (--idle-timeout-s %d)"
          % (left, time.time() - t0, IDLE))
    s = connect(a.port)
    s.sendall(prefix(envelope(2, SERVER_LIVE)))
    resp, eof = read_responses(s, 3)
    s.close()
    check(resp and resp[0][:2] == (2, 0),
          "after the idle timeout a new native client is served again (flooder still connected)",
          "after the flood a new native client got %r" % resp)
    for s in ns:
        s.close()
    return 1 if FAILS else 0


# ---- memory: responses held for clients that do not take them ----

def memory_group(a):
    """Two cases on a tpud of their own (the driver runs it with MALLOC_MMAP_THRESHOLD_ fixed,
    so that freed result buffers leave RSS at once and RSS measures what tpud holds):
      - gRPC, one connection that grants no flow-control window (SETTINGS_INITIAL_WINDOW_SIZE
        0) asking for 64 MatMuls: every answer is computed and then waits for window;
      - framed, 8 connections each pipelining 16 MatMuls (one 16 KiB read of the server's) and
        never reading.
    A MatMul request of 961 bytes asks for a 900 KiB result, so what a connection may make the
    server hold is what max-unsent-bytes is for: the bound is, per connection, max-unsent-bytes
    plus one max-message-bytes (the answer that crosses the limit), plus 24 MiB of slack."""
    IDLE, SLACK = a.idle_timeout, a.slack
    m, k, n = 480, 1, 480
    req_len = len(prefix(envelope(1, MATMUL, matmul_req(m, k, n))))
    out_mib = 4 * m * n / 2 ** 20

    def bound(conns):
        return conns * (a.max_unsent + a.max_message) / 2 ** 20 + 24

    def peak_rss(r0, limit_s, done=lambda: False):
        """Samples RSS until it has been flat for 1.5 s (or limit_s): the peak."""
        peak, last, t0, flat = r0, r0, time.time(), 0
        while time.time() - t0 < limit_s and not done():
            time.sleep(0.25)
            r = rss_mib(a.pid)
            peak = max(peak, r)
            flat = flat + 1 if abs(r - last) < 0.5 else 0
            last = r
            if flat >= 6 and time.time() - t0 > 2:
                break
        return peak

    def back_to(r0, what):
        t0 = time.time()
        while time.time() - t0 < 5 and rss_mib(a.pid) - r0 > 8:
            time.sleep(0.25)
        d = rss_mib(a.pid) - r0
        check(d <= 8, "%s: RSS back to %+.1f MiB of where it started" % (what, d),
              "%s: RSS still %+.1f MiB over where it started 5 s after the client left"
              % (what, d))

    # gRPC without window.
    nstreams = 64
    r0 = rss_mib(a.pid)
    h = H2(a.port, settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    hb = header_block(MATMUL_PATH)
    body = prefix(matmul_req(m, k, n))
    h.send(b"".join(hf.HeadersFrame(1 + 2 * i, data=hb, flags=["END_HEADERS"]).serialize() +
                    hf.DataFrame(1 + 2 * i, data=body, flags=["END_STREAM"]).serialize()
                    for i in range(nstreams)))
    t0 = time.time()
    grew = peak_rss(r0, 10, done=lambda: (h.poll(0), h.eof)[1]) - r0
    check(grew <= bound(1),
          "gRPC client that grants no window (%d MatMul streams): server RSS %+.0f MiB (bound "
          "%.0f MiB)" % (nstreams, grew, bound(1)),
          "gRPC client that grants no flow-control window: %d MatMul streams (%.0f KiB of "
          "requests, %.0f MiB of results) grew server RSS by %.0f MiB, over the %.0f MiB that "
          "--max-unsent-bytes %d + one --max-message-bytes %d allow: answers waiting in nghttp2 "
          "for window are not counted against max-unsent-bytes, so one connection can hold "
          "grpc-max-streams x max-message-bytes" % (nstreams, nstreams * req_len / 1024,
                                                    nstreams * out_mib, grew, bound(1),
                                                    a.max_unsent, a.max_message))
    while time.time() - t0 < IDLE + SLACK + 6 and not h.eof:
        h.poll(0.2)
    g = h.goaway()
    check(h.eof, "the no-window connection was closed after %.1f s%s (--idle-timeout-s %d)" % (
              time.time() - t0, " with GOAWAY %s" % h2err(g.error_code) if g else "", IDLE),
          "the no-window connection is still open %.0f s later (--idle-timeout-s %d)"
          % (time.time() - t0, IDLE))
    h.close()
    back_to(r0, "no-window client gone")

    # Framed clients that never read.
    conns, nreq = 8, 16
    r0 = rss_mib(a.pid)
    socks = []
    for c in range(conns):
        s = connect(a.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"".join(prefix(envelope(i + 1, MATMUL, matmul_req(m, k, n)))
                           for i in range(nreq)))
        socks.append(s)
    t0 = time.time()
    grew = peak_rss(r0, 10) - r0
    check(grew <= bound(conns),
          "framed clients that never read (%d x %d MatMuls): server RSS %+.0f MiB (bound %.0f "
          "MiB)" % (conns, nreq, grew, bound(conns)),
          "framed clients that never read: %d connections x %d pipelined MatMuls (%.0f KiB of "
          "requests, %.0f MiB of results) grew server RSS by %.0f MiB, over the %.0f MiB that "
          "--max-unsent-bytes %d + one --max-message-bytes %d per connection allow: the unsent "
          "limit stops reading only once answers have piled up; every request already read is "
          "dispatched and every answer buffered (up to --max-inflight-per-conn x "
          "max-message-bytes per connection)"
          % (conns, nreq, conns * nreq * req_len / 1024, conns * nreq * out_mib, grew,
             bound(conns), a.max_unsent, a.max_message))
    while time.time() - t0 < IDLE + 2:
        time.sleep(0.2)
    still = sum(1 for s in socks if not peer_closed(s))
    if still:
        note("%d of %d framed connections that never read are still open %.0f s later "
             "(--idle-timeout-s %d): the native port has no write timeout, so a client that "
             "stops reading keeps its slot and its unsent answers as long as it likes (HTTP "
             "closes it after --http-timeout-s)" % (still, conns, time.time() - t0, IDLE))
    else:
        ok("framed connections that never read were closed after %.0f s" % (time.time() - t0))
    for s in socks:
        s.close()
    back_to(r0, "non-reading clients gone")
    return 1 if FAILS else 0


# ---- tls: a TLS tpud ----

def tls_group(a):
    HS, SLACK = a.handshake_timeout, a.slack
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    o = ctx.wrap_bio(inc, out, server_hostname="localhost")
    try:
        o.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()  # a real ClientHello

    def refused():
        socks, expect = {}, {}
        for port_name, port in (("native", a.port), ("https", a.http_port)):
            for what, data, lim in (("600 random bytes", os.urandom(600), 0),
                                    ("a plaintext HTTP request",
                                     b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0),
                                    ("a plaintext tpud frame", prefix(envelope(1, SERVER_LIVE)), 0),
                                    ("half a ClientHello", hello[:60], HS),
                                    ("nothing", b"", HS)):
                s = connect(port)
                s.sendall(data)
                socks["%s: %s" % (port_name, what)] = s
                expect["%s: %s" % (port_name, what)] = lim
        res = watch_close(socks, HS + SLACK + 1)
        for k, t in res.items():
            lim = expect[k]
            lo, hi = (lim - 0.5, lim + SLACK) if lim else (0, 2.0)
            check(in_window(t, lo, hi),
                  "TLS port, %s: closed after %.1f s" % (k, t or 0),
                  "TLS port, %s: %s, expected closed within [%.1f, %.1f] s" % (k, fmt(t), lo, hi))

    def dribbled():
        # A ClientHello a byte a second: --tls-handshake-timeout-s is "close a connection whose TLS
        # handshake takes longer" (tpud --help).
        drib = {"native": connect(a.port), "https": connect(a.http_port)}
        for s in drib.values():
            s.sendall(hello[:1])
        res = watch_close(drib, HS + SLACK + 3, feed=lambda k, s, i: s.send(hello[i:i + 1]))
        for k, t in res.items():
            check(in_window(t, HS - 0.5, HS + SLACK),
                  "TLS %s port, ClientHello a byte a second: closed after %.1f s "
                  "(--tls-handshake-timeout-s %d)" % (k, t or 0, HS),
                  "TLS %s port, ClientHello a byte a second: %s after %.0f s, expected closed "
                  "within --tls-handshake-timeout-s %d (+%d s slack): the handshake deadline is a "
                  "read timeout that every byte re-arms" % (k, fmt(t), HS + SLACK + 3, HS, SLACK))

    def alpn_h2():
        # ALPN h2, a complete handshake and preface, SETTINGS never acknowledged.
        hctx = ssl.create_default_context()
        hctx.check_hostname = False
        hctx.verify_mode = ssl.CERT_NONE
        hctx.set_alpn_protocols(["h2"])
        raw = connect(a.port)
        s = hctx.wrap_socket(raw, server_hostname="localhost")
        alpn = s.selected_alpn_protocol()
        s.sendall(PREFACE + hf.SettingsFrame(0).serialize())
        t0 = time.time()
        s.settimeout(0.2)
        t = None
        while time.time() - t0 < HS + SLACK + 2:
            try:
                if not s.recv(65536):
                    t = time.time() - t0
                    break
            except socket.timeout:
                pass
            except OSError:
                t = time.time() - t0
                break
        s.close()
        check(alpn == "h2" and in_window(t, HS - 0.5, HS + SLACK),
              "TLS with ALPN h2, SETTINGS never acknowledged: closed after %.1f s" % (t or 0),
              "TLS with ALPN %s, SETTINGS never acknowledged: %s (--tls-handshake-timeout-s %d)"
              % (alpn, fmt(t), HS))

    run_threads(refused, dribbled, alpn_h2)
    return 1 if FAILS else 0


# ---- answers: the server still serves gRPC ----

def answers(a):
    h = H2(a.port)
    h.call(1, LIVE_PATH, b"")
    h.call(3, INFER_PATH, infer_req("digits", "x", 64))
    for sid, what in ((1, "ServerLive"), (3, "ModelInfer")):
        st, why = h.status(sid)
        check(st == 0, "gRPC %s answered OK" % what, "gRPC %s: %s %s" % (what, st, why))
    h.close()
    return 1 if FAILS else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("group", choices=["probe", "conn", "h2", "flood", "memory", "tls", "answers"])
    p.add_argument("--port", type=int, required=True, help="native port")
    p.add_argument("--http-port", type=int, default=0)
    p.add_argument("--pid", type=int, default=0, help="tpud's pid (/proc: RSS, CPU)")
    p.add_argument("--idle-timeout", type=int, default=3)
    p.add_argument("--http-timeout", type=int, default=3)
    p.add_argument("--handshake-timeout", type=int, default=2)
    p.add_argument("--max-connections", type=int, default=48)
    p.add_argument("--max-message", type=int, default=1 << 20)
    p.add_argument("--max-unsent", type=int, default=256 << 10)
    p.add_argument("--max-streams", type=int, default=100)
    p.add_argument("--reset-model", default="matmul",
                   help="h2: the model rapid reset targets (no other client should use it: its "
                   "counters measure what the attack cost)")
    p.add_argument("--slack", type=int, default=3, help="seconds a timeout may fire late")
    p.add_argument("--rate", type=float, default=20, help="probe: calls per second")
    p.add_argument("--stop", default="", help="probe: runs until this file exists")
    a = p.parse_args()
    return {"probe": probe, "conn": conn_group, "h2": h2_group, "flood": flood_group,
            "memory": memory_group, "tls": tls_group, "answers": answers}[a.group](a)


if __name__ == "__main__":
    sys.exit(main())

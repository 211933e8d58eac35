#!/usr/bin/python3
"""limits.py - tpud's process-wide limits against the real binary (issue #15 items 1, 2, 8).

usage: limits.py BUILD_DIR SRC_DIR [fds|accept|buffered ...]   (all three by default)

  fds       --max-connections under RLIMIT_NOFILE: a default that does not fit is lowered (the
            warning and /v2/debug/config say so), an explicit one refuses to start, the soft limit
            is raised to the hard one; and with every connection slot taken (plus more knocking)
            the server still opens files: a SIGHUP rescan loads a new model and rotates the audit
            log, and connections past the limit are refused at once, not left in the backlog.
  accept    the descriptor limit lowered under a running tpud (prlimit --pid) while clients
            connect to both ports: accept() fails with EMFILE; tpud must back off (log lines and
            CPU over 3 s stay small), count it in tpud_accept_errors_total, and serve the clients
            waiting in the backlog once descriptors are free again.
  buffered  --max-buffered-bytes: clients that send big MatMuls and never read hold at most the
            budget (RSS, tpud_buffered_bytes), new big calls get RESOURCE_EXHAUSTED (framed, gRPC)
            or 503 (HTTP) while cheap calls are still answered, and all of it comes back when the
            clients go; a MatMul whose answer would exceed --max-message-bytes is refused before
            it is computed.

Each part starts its own tpud (free ports, a private repository). Prints "ok:"/"FAIL:" lines;
exits 1 when anything failed. Reuses abuse.py's wire helpers (python3-h2's hpack, hyperframe).
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abuse as A  # noqa: E402  (its helpers: frames, H2, /proc, /metrics, ok/fail/check)

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PARTS = sys.argv[3:] or ["fds", "accept", "buffered"]
WORK = tempfile.mkdtemp(prefix="tpud_limits.")
TPUD = os.path.join(BUILD, "server/tpud")
PROCS = []


class Tpud:
    """A tpud on free ports: .pid, .port, .hport, .log (path), .text() (the log so far)."""

    def __init__(self, name, args, nofile=None, env=None, wait=True):
        self.name = name
        self.log = os.path.join(WORK, "tpud.%s.log" % name)
        self.repo = os.path.join(WORK, "repo.%s" % name)
        os.makedirs(self.repo, exist_ok=True)
        if not os.path.exists(os.path.join(self.repo, "digits")):
            shutil.copytree(os.path.join(SRC, "models/digits"), os.path.join(self.repo, "digits"))
        cmd = ([] if nofile is None else ["prlimit", "--nofile=%s" % nofile]) + [
            TPUD, "--models", self.repo, "--port", "0", "--http-port", "0", "--poll-seconds", "0",
            "--io-threads", "1", "--threads", "2"] + args
        e = dict(os.environ)
        e.update(env or {})
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(cmd, stderr=self.f, stdout=self.f, env=e)
        PROCS.append(self.p)
        self.pid = self.p.pid  # prlimit execs tpud: the same process
        self.port = self.hport = None
        if wait:
            for _ in range(300):
                t = self.text()
                n = re.search(r"listening on 127\.0\.0\.1:(\d+) \(native", t)
                h = re.search(r"listening on 127\.0\.0\.1:(\d+) \(http", t)
                if (n and h) or self.p.poll() is not None:
                    break
                time.sleep(0.1)
            if not (n and h):
                raise RuntimeError("tpud %s did not start:\n%s" % (name, self.text()))
            self.port, self.hport = int(n.group(1)), int(h.group(1))

    def text(self):
        with open(self.log) as f:
            return f.read()

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def get(self, path, timeout=5):
        """(status, parsed JSON or text) of GET on the HTTP port."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.hport, path),
                                        timeout=timeout) as r:
                body = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            body, status = e.read().decode(), e.code
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def metrics(self):
        return A.metrics(self.hport)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                rc = self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                rc = None
            A.check(rc == 0 and "tpud stopped" in self.text(),
                    "tpud %s: SIGTERM, exit 0" % self.name,
                    "tpud %s: exit %s after SIGTERM: %s" % (self.name, rc, self.text()[-400:]))
        self.f.close()


def frame(rid, method, payload=b""):
    return A.prefix(A.envelope(rid, method, payload))


def framed_call(port, rid, method, payload=b"", timeout=10):
    """One framed request on a new connection: (code, message) or (None, why)."""
    s = A.connect(port)
    s.sendall(frame(rid, method, payload))
    got, eof = read_responses_n(s, 1, timeout)
    s.close()
    return (got[0][1], got[0][2]) if got else (None, "no answer (eof %s)" % eof)


def read_responses_n(sock, n, timeout):
    """Framed responses until n have come, EOF, or timeout: ([(id, code, msg)], eof)."""
    end = time.time() + timeout
    buf, eof, out = b"", False, []
    sock.settimeout(0.2)
    while time.time() < end and len(out) < n:
        try:
            d = sock.recv(1 << 20)
        except socket.timeout:
            continue
        except OSError:
            d = b""
        if not d:
            eof = True
            break
        buf += d
        while len(buf) >= 5:
            ln = struct.unpack(">I", buf[1:5])[0]
            if len(buf) < 5 + ln:
                break
            out.append(A.decode_response(buf[5:5 + ln]))
            buf = buf[5 + ln:]
    return out, eof



def grpc_call(port, path, msg, timeout=10):
    """One unary call on a new h2c connection that grants all the window an answer needs."""
    h = A.H2(port, settings={A.hf.SettingsFrame.INITIAL_WINDOW_SIZE: (1 << 31) - 1})
    h.send(A.hf.WindowUpdateFrame(0, window_increment=1 << 30).serialize())
    h.call(1, path, msg)
    st = h.status(1, timeout)
    h.close()
    return st


def infer_json(rows):
    """An HTTP infer body for digits: rows x 64 zeros (the answer is rows x 10 probabilities)."""
    return ('{"inputs":[{"name":"x","shape":[%d,64],"datatype":"FP32","data":[%s]}]}'
            % (rows, ",".join(["0"] * (rows * 64)))).encode()


def http_post(hport, path, body, timeout=30):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (hport, path), data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


def wait_until(pred, limit_s, every=0.1):
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if pred():
            return True
        time.sleep(every)
    return pred()


# ---- item 1: --max-connections under RLIMIT_NOFILE ----

def part_fds():
    NOFILE = 128
    audit = os.path.join(WORK, "audit.log")
    t = Tpud("fds", ["--audit-log", audit], nofile="%d:%d" % (NOFILE, NOFILE))
    text = t.text()
    m = re.search(r"max-connections lowered from 1024 to (\d+): the descriptor limit "
                  r"\(RLIMIT_NOFILE\) is %d and tpud needs (\d+)" % NOFILE, text)
    _, cfg = t.get("/v2/debug/config")
    eff = cfg.get("max-connections") if isinstance(cfg, dict) else None
    A.check(m is not None and eff == int(m.group(1)) and eff + int(m.group(2)) == NOFILE,
            "nofile %d, default --max-connections: lowered to %s with a warning (%s descriptors "
            "kept for the rest), /v2/debug/config says %s" % (
                NOFILE, m and m.group(1), m and m.group(2), eff),
            "nofile %d, default --max-connections: no 'max-connections lowered' warning with "
            "the numbers (log: %r), /v2/debug/config max_connections %s" % (
                NOFILE, [l for l in text.splitlines() if "max-conn" in l or "RLIMIT" in l][:2],
                eff))
    if not isinstance(eff, int) or eff >= NOFILE:
        eff = NOFILE  # main: fill what we can and see what breaks
    # Every slot taken, half native, half HTTP, and more clients knocking.
    fd0 = t.fds()
    socks = []
    for i in range(eff):
        try:
            socks.append(A.connect(t.port if i % 2 == 0 else t.hport))
        except OSError:
            break
    wait_until(lambda: t.fds() >= fd0 + len(socks), 3)
    held = t.fds()
    extra = {}
    for i in range(8):
        port = t.port if i % 2 == 0 else t.hport
        s = A.connect(port)
        if port == t.hport:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        extra["%s #%d" % ("native" if port == t.port else "http", i)] = s
    closed = A.watch_close(extra, 3)
    late = [k for k, v in closed.items() if v is None]
    A.check(not late, "%d connections past the limit (%d open, tpud holds %d of %d descriptors) "
            "were refused at once" % (len(extra), len(socks), held, NOFILE),
            "connections past the limit left waiting (not accepted, not refused) for 3 s: %s "
            "(tpud holds %d of %d descriptors)" % (", ".join(sorted(late)), held, NOFILE))
    # The server must still open files: a rescan finds a new model, the audit log rotates.
    shutil.copytree(os.path.join(SRC, "models/digits"), os.path.join(t.repo, "digits2"))
    os.kill(t.pid, signal.SIGHUP)
    time.sleep(1.5)
    for s in socks:
        s.close()
    wait_until(lambda: t.fds() <= fd0 + 2, 5)
    st, body = t.get("/v2/models/digits2/ready")
    rotated = [f for f in os.listdir(WORK) if f.startswith("audit.log.0")]
    text = t.text()
    A.check(st == 200 and rotated and "Too many open files" not in text,
            "with every connection slot taken, SIGHUP loaded a new model and rotated the audit "
            "log (%s); no 'Too many open files' in the log" % rotated[0] if rotated else "",
            "with every connection slot taken (%d): digits2 ready: %s %s; audit log rotated: %s; "
            "log: %s" % (len(socks), st, body, rotated,
                         [l for l in text.splitlines() if "open files" in l or "cannot" in l][:3]))
    t.stop()

    # An explicit --max-connections that cannot fit: refuse to start, saying why.
    t = Tpud("fds-explicit", ["--max-connections", "1000"], nofile="%d:%d" % (NOFILE, NOFILE),
             wait=False)
    try:
        rc = t.p.wait(5)
    except subprocess.TimeoutExpired:
        rc = None
        t.p.kill()
        t.p.wait()
    text = t.text()
    A.check(rc == 1 and "--max-connections 1000 does not fit the descriptor limit" in text and
            "RLIMIT_NOFILE is %d" % NOFILE in text,
            "nofile %d, --max-connections 1000: refuses to start (exit 1): %s" % (
                NOFILE, text.strip().splitlines()[-1][:160]),
            "nofile %d, --max-connections 1000: exit %s, expected 1 with 'does not fit the "
            "descriptor limit' (log tail: %r)" % (NOFILE, rc, text[-300:]))
    t.f.close()

    # A soft limit under the hard one is raised: the default then fits.
    t = Tpud("fds-soft", [], nofile="%d:4096" % NOFILE)
    with open("/proc/%d/limits" % t.pid) as f:
        soft = [l.split()[3] for l in f if l.startswith("Max open files")][0]
    _, cfg = t.get("/v2/debug/config")
    A.check(soft == "4096" and cfg.get("max-connections") == 1024 and
            "lowered" not in t.text(),
            "nofile %d:4096: the soft limit is raised to the hard one (%s), max-connections "
            "stays 1024" % (NOFILE, soft),
            "nofile %d:4096: soft limit %s (expected raised to 4096), max_connections %s" % (
                NOFILE, soft, cfg.get("max-connections")))
    t.stop()


# ---- item 2: accept errors back off ----

def part_accept():
    t = Tpud("accept", ["--max-connections", "200"], nofile="1024:1024")
    fd0 = t.fds()
    # Leave room for a few connections, then let 30 clients knock on each port.
    subprocess.run(["prlimit", "--pid", str(t.pid), "--nofile=%d:1024" % (fd0 + 6)], check=True)
    clients = []
    for i in range(60):
        native = i % 2 == 0
        s = A.connect(t.port if native else t.hport)
        s.sendall(frame(1, A.SERVER_LIVE) if native else
                  b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        clients.append((native, s))
    time.sleep(0.5)

    def accept_lines():
        return sum(1 for l in t.text().splitlines() if "accept" in l)
    l0, c0 = accept_lines(), A.cpu_s(t.pid)
    time.sleep(3)
    l1, c1 = accept_lines(), A.cpu_s(t.pid)
    A.check(l1 - l0 <= 5 and c1 - c0 <= 0.6,
            "out of descriptors with 60 clients in the backlogs: %d accept log lines and %.2f s "
            "of CPU in 3 s" % (l1 - l0, c1 - c0),
            "out of descriptors with 60 clients in the backlogs: %d accept log lines and %.2f s "
            "of CPU in 3 s (expected at most 5 lines, 0.6 s: back off, log once a second)"
            % (l1 - l0, c1 - c0))
    sample = [l for l in t.text().splitlines() if "accept" in l][-1:] or ["(none)"]
    A.check("ERROR" not in sample[0] and "not accepting for" in sample[0],
            "the accept error line: %s" % sample[0][24:200],
            "the accept error line says nothing of a pause, or is an ERROR: %s" % sample[0][:200])
    # Descriptors back: every client in the backlog is served (the backoff is at most 1 s).
    subprocess.run(["prlimit", "--pid", str(t.pid), "--nofile=1024:1024"], check=True)
    served = 0
    t0 = time.time()
    for native, s in clients:
        left = max(0.5, 4 - (time.time() - t0))
        if native:
            got, _ = read_responses_n(s, 1, left)
            served += bool(got) and got[0][1] == 0
        else:
            s.settimeout(left)
            try:
                served += s.recv(4096).startswith(b"HTTP/1.1 200")
            except OSError:
                pass
        s.close()
    A.check(served == len(clients),
            "descriptors free again: all %d clients waiting in the backlogs were served within "
            "%.1f s" % (served, time.time() - t0),
            "descriptors free again: only %d of %d clients in the backlogs were served in 4 s"
            % (served, len(clients)))
    m = t.metrics()
    nat = m.get('tpud_accept_errors_total{protocol="native",reason="EMFILE"}', 0)
    htp = m.get('tpud_accept_errors_total{protocol="http",reason="EMFILE"}', 0)
    A.check(nat >= 1 and htp >= 1,
            "tpud_accept_errors_total{reason=\"EMFILE\"}: native %d, http %d" % (nat, htp),
            "tpud_accept_errors_total{reason=\"EMFILE\"}: native %d, http %d (expected both >= 1)"
            % (nat, htp))
    t.stop()


# ---- item 8: the buffered-answer budget ----

def part_buffered():
    BUDGET, MAXMSG = 32 << 20, 4 << 20
    t = Tpud("buffered", ["--max-buffered-bytes", str(BUDGET), "--max-message-bytes",
                          str(MAXMSG), "--queue-rows", "16384", "--idle-timeout-s", "60"],
             env={"MALLOC_MMAP_THRESHOLD_": "131072"})  # freed answers leave RSS at once

    def matmul_total():
        return t.metrics().get("tpud_matmul_total", 0)
    # A MatMul whose answer cannot fit max-message-bytes is refused before computing.
    big = A.matmul_req(1024, 1, 1024)  # a 4 MiB INT32 result: with its envelope, over 4 MiB
    n0 = matmul_total()
    code, msg = framed_call(t.port, 7, A.MATMUL, big)
    st, gmsg = grpc_call(t.port, A.MATMUL_PATH, big)
    n1 = matmul_total()
    A.check(code == 8 and st == 8 and "not computed" in msg and n1 == n0,
            "MatMul with a 4 MiB result under --max-message-bytes 4 MiB: RESOURCE_EXHAUSTED "
            "before computing (framed and gRPC): %s" % msg,
            "MatMul with a 4 MiB result: framed %s %r, gRPC %s %r, tpud_matmul_total %+d "
            "(expected RESOURCE_EXHAUSTED before computing: +0)" % (code, msg, st, gmsg, n1 - n0))
    code, msg = framed_call(t.port, 8, A.MATMUL, A.matmul_req(1023, 1, 1024))
    A.check(code == 0, "a MatMul whose answer just fits is computed",
            "a MatMul whose answer just fits: %s %s" % (code, msg))

    # Clients that send big MatMuls and never read.
    conns, nreq, m, n = 16, 16, 512, 512  # 1 MiB answers; 256 MiB asked for a wave
    time.sleep(0.5)
    r0 = A.rss_mib(t.pid)
    socks = [A.connect(t.port) for c in range(conns)]
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    peak = r0

    def wave(k, settle=True):
        """nreq more MatMuls on every connection; then waits until RSS is flat (the peak)."""
        nonlocal peak
        for s in socks:
            s.sendall(b"".join(frame(k * nreq + i + 1, A.MATMUL, A.matmul_req(m, 1, n))
                               for i in range(nreq)))
        last, flat, t0 = A.rss_mib(t.pid), 0, time.time()
        while time.time() - t0 < (15 if settle else 0.5) and flat < 6:
            time.sleep(0.25)
            r = A.rss_mib(t.pid)
            peak = max(peak, r)
            flat = flat + 1 if abs(r - last) < 0.5 else 0
            last = r
    # Two waves: the kernel's socket buffers take a MiB or so of each connection's answers
    # (not tpud's memory, and not counted); the second wave spends what that freed.
    wave(0)
    wave(1)
    mt = t.metrics()
    held = mt.get("tpud_buffered_bytes", -1)
    refused = mt.get("tpud_buffered_refused_total", 0)
    bound = BUDGET / 2 ** 20 + 16
    A.check(peak - r0 <= bound and BUDGET - (2 << 20) <= held <= BUDGET and refused > 0,
            "%d framed clients x 2 x %d MatMuls of 1 MiB answers, never reading: RSS %+.0f MiB "
            "(bound %.0f), tpud_buffered_bytes %.1f MiB of --max-buffered-bytes %d MiB, %d calls "
            "refused" % (conns, nreq, peak - r0, bound, held / 2 ** 20, BUDGET >> 20, refused),
            "%d framed clients x 2 x %d MatMuls of 1 MiB answers, never reading: RSS %+.0f MiB "
            "(bound %.0f: --max-buffered-bytes %d MiB + 16), tpud_buffered_bytes %s, %d refused" % (
                conns, nreq, peak - r0, bound, BUDGET >> 20, held, refused))
    # Meanwhile: cheap calls are answered, new big work is refused on every protocol (a third
    # wave first spends whatever the kernel may have taken since).
    wave(2, settle=False)
    code, msg = framed_call(t.port, 1, A.SERVER_LIVE)
    A.check(code == 0, "while the budget is spent: ServerLive answers",
            "while the budget is spent: ServerLive: %s %s" % (code, msg))
    code, msg = framed_call(t.port, 2, A.MATMUL, A.matmul_req(m, 1, n))
    st, gmsg = grpc_call(t.port, A.MATMUL_PATH, A.matmul_req(m, 1, n))
    rows = 6600  # a JSON answer of over 1 MiB: more than the budget can have left
    hst, hbody = http_post(t.hport, "/v2/models/digits/infer", infer_json(rows))
    A.check(code == 8 and "server busy" in msg and st == 8 and "server busy" in gmsg and
            hst == 503 and "server busy" in hbody,
            "while the budget is spent: new big calls refused: framed and gRPC "
            "RESOURCE_EXHAUSTED, HTTP 503: %s" % msg[:150],
            "while the budget is spent: framed %s %r, gRPC %s %r, HTTP %s %r (expected "
            "RESOURCE_EXHAUSTED, RESOURCE_EXHAUSTED, 503, each 'server busy')" % (
                code, msg[:120], st, gmsg[:120], hst, hbody[:120]))
    # The clients go: memory and the gauge come back, big work is served again.
    for s in socks:
        s.close()
    ok = wait_until(lambda: A.rss_mib(t.pid) - r0 <= 8 and
                    t.metrics().get("tpud_buffered_bytes", -1) == 0, 6, 0.25)
    A.check(ok, "non-reading clients gone: RSS back to %+.1f MiB of where it was, "
            "tpud_buffered_bytes 0" % (A.rss_mib(t.pid) - r0),
            "non-reading clients gone: RSS %+.1f MiB, tpud_buffered_bytes %s after 6 s" % (
                A.rss_mib(t.pid) - r0, t.metrics().get("tpud_buffered_bytes")))
    code, msg = framed_call(t.port, 3, A.MATMUL, A.matmul_req(m, 1, n))
    st, gmsg = grpc_call(t.port, A.MATMUL_PATH, A.matmul_req(m, 1, n))
    hst, hbody = http_post(t.hport, "/v2/models/digits/infer", infer_json(rows))
    A.check(code == 0 and st == 0 and hst == 200,
            "afterwards the same calls are served (framed, gRPC, HTTP %d rows)" % rows,
            "afterwards: framed %s %r, gRPC %s %r, HTTP %s %r" % (code, msg[:100], st, gmsg[:100],
                                                                   hst, hbody[:100]))
    # The gauge is an exact account: with every answer sent it is 0 again, not drifting.
    ok = wait_until(lambda: t.metrics().get("tpud_buffered_bytes", -1) == 0, 3, 0.2)
    A.check(ok, "every answer sent: tpud_buffered_bytes 0 again",
            "every answer sent: tpud_buffered_bytes %s (expected 0: the account drifts)"
            % t.metrics().get("tpud_buffered_bytes"))
    t.stop()

    # An answer larger than the whole budget can never be buffered: a permanent 413 with the
    # reason, not 503 "server busy; try again later" forever.
    t = Tpud("too-big", ["--max-buffered-bytes", str(1 << 20), "--max-message-bytes",
                         str(1 << 20), "--queue-rows", "16384"])
    hst, hbody = http_post(t.hport, "/v2/models/digits/infer", infer_json(7000))
    A.check(hst == 413 and "more than max-buffered-bytes" in hbody and "busy" not in hbody,
            "an HTTP answer larger than the whole budget: 413, not busy: %s" % hbody[:120],
            "an HTTP answer larger than the whole budget: %s %s (expected 413 without "
            "'server busy')" % (hst, hbody[:200]))
    hst, hbody = http_post(t.hport, "/v2/models/digits/infer", infer_json(100))
    A.check(hst == 200, "a smaller one is served", "a smaller one: %s %s" % (hst, hbody[:200]))
    t.stop()


def main():
    t0 = time.time()
    try:
        for p in PARTS:
            {"fds": part_fds, "accept": part_accept, "buffered": part_buffered}[p]()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
        if os.environ.get("TPUD_LIMITS_KEEP"):
            print("kept %s" % WORK)
        else:
            shutil.rmtree(WORK, ignore_errors=True)
    print("limits.py: %.0f s" % (time.time() - t0))
    return 1 if A.FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

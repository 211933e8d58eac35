#!/usr/bin/python3
# conn_edges.py - the native port's connection handling (server/sock.c, io.c) from raw sockets:
# back-pressure (pipelining past max-inflight-per-conn, a reader slower than max-unsent-bytes),
# a fatal frame (answer id 0, then the close), the framed idle timeout, the HTTP/2 idle timeout
# (GOAWAY, then the close) and the SETTINGS-acknowledgement timeout; then a clean SIGTERM exit
# with no crash or ERROR line in the log. Starts its own tpud; run by test_conn.sh.
# usage: conn_edges.py BUILD_DIR SRC_DIR   (TPUD_WRAP, e.g. "valgrind -q", wraps tpud)
import os, re, shutil, signal, socket, struct, subprocess, sys, tempfile, time
import h2.connection, h2.config, h2.events

BUILD, SRC = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp()
shutil.copytree(os.path.join(SRC, "models/digits/1"), os.path.join(WORK, "repo/digits/1"))
LOG = open(os.path.join(WORK, "tpud.log"), "w+")
TPUD = subprocess.Popen(os.environ.get("TPUD_WRAP", "").split() + [
    os.path.join(BUILD, "server/tpud"), "--models", os.path.join(WORK, "repo"), "--port", "0",
    "--http-port", "0", "--io-threads", "1", "--poll-seconds", "0", "--idle-timeout-s", "2",
    "--tls-handshake-timeout-s", "2", "--max-inflight-per-conn", "2", "--max-unsent-bytes",
    "4096"], stderr=LOG)
PORT = None
for _ in range(300):
    LOG.seek(0)
    m = re.search(r"tpud listening on 127\.0\.0\.1:(\d+) \(native\)", LOG.read())
    if m or TPUD.poll() is not None:
        break
    time.sleep(0.1)
if not m:
    LOG.seek(0)
    print("tpud did not start:\n" + LOG.read())
    TPUD.kill()
    sys.exit(1)
PORT = int(m.group(1))
FAILS = 0


def check(cond, what):
    global FAILS
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        FAILS += 1


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def frame(id_, method):
    env = b"\x08" + varint(id_) + b"\x10" + varint(method)
    return b"\x00" + struct.pack(">I", len(env)) + env


def conn():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.settimeout(10)
    return s


def read_until_eof(s, limit=10.0):
    data = b""
    t0 = time.monotonic()
    while True:
        try:
            d = s.recv(65536)
        except socket.timeout:
            return data, None
        except ConnectionResetError:
            return data, time.monotonic() - t0
        if not d:
            return data, time.monotonic() - t0
        data += d


def frames(data):
    out = []
    while len(data) >= 5:
        n = struct.unpack(">I", data[1:5])[0]
        if len(data) < 5 + n:
            break
        out.append(data[5:5 + n])
        data = data[5 + n:]
    return out


def env_id(body):
    # field 1 varint
    if not body or body[0] != 0x08:
        return 0
    v, sh, i = 0, 0, 1
    while True:
        b = body[i]
        v |= (b & 0x7F) << sh
        i += 1
        sh += 7
        if not b & 0x80:
            return v


# 1. framed: pipelined requests beyond max-inflight-per-conn, all answered in order
s = conn()
s.sendall(b"".join(frame(i, 1) for i in range(1, 201)))
data = b""
while len(frames(data)) < 200:
    d = s.recv(65536)
    if not d:
        break
    data += d
ids = [env_id(f) for f in frames(data)]
check(ids == list(range(1, 201)), "200 pipelined ServerLive answered in order (got %d)" % len(ids))

# 2. framed: a client that does not read (max-unsent-bytes 4096): server pauses, then resumes
s2 = conn()
s2.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
N = 3000
s2.sendall(b"".join(frame(i, 4) for i in range(1, N + 1)))  # ServerMetadata: bigger answers
time.sleep(0.5)
data = b""
while len(frames(data)) < N:
    d = s2.recv(65536)
    if not d:
        break
    data += d
ids = [env_id(f) for f in frames(data)]
check(ids == list(range(1, N + 1)), "%d ServerMetadata to a slow reader all answered (%d)" % (N, len(ids)))
s2.close()

# 3. fatal frame: bad flag byte -> error with id 0, then EOF
s3 = conn()
s3.sendall(b"\x07\x00\x00\x00\x01x")
data, t = read_until_eof(s3)
fs = frames(data)
check(len(fs) == 1 and env_id(fs[0]) == 0 and t is not None,
      "fatal frame: one answer with id 0, then the close (%d frames, eof %s)" % (len(fs), t))

# 4. framed idle timeout (2 s; sweep once a second)
s4 = conn()
t0 = time.monotonic()
data, t = read_until_eof(s4)
check(t is not None and 1.5 <= t <= 6, "framed idle connection closed after %s s" % t)

# 5. h2 with SETTINGS acknowledged: GOAWAY at the idle timeout, then close
s5 = conn()
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
s5.sendall(c.data_to_send())
goaway = False
t0 = time.monotonic()
eof = None
while True:
    try:
        d = s5.recv(65536)
    except socket.timeout:
        break
    except ConnectionResetError:
        eof = "reset"
        break
    if not d:
        eof = time.monotonic() - t0
        break
    for ev in c.receive_data(d):
        if isinstance(ev, h2.events.ConnectionTerminated):
            goaway = True
    out = c.data_to_send()
    if out:
        s5.sendall(out)
check(goaway and eof is not None and eof != "reset" and 1.5 <= eof <= 6,
      "h2 idle: GOAWAY then close after %s s (goaway %s)" % (eof, goaway))

# 6. h2 preface without acknowledging the server's SETTINGS: closed at the handshake timeout
s6 = conn()
s6.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
data, t = read_until_eof(s6)
check(t is not None and 1.5 <= t <= 6, "h2 SETTINGS never acknowledged: closed after %s s" % t)

# the same process served it all; a clean SIGTERM exit, no crash or ERROR line
TPUD.send_signal(signal.SIGTERM)
try:
    rc = TPUD.wait(timeout=30)
except subprocess.TimeoutExpired:
    TPUD.kill()
    rc = "none (killed after 30 s)"
check(rc == 0, "tpud exited %s after SIGTERM" % rc)
LOG.seek(0)
log = LOG.read()
check("tpud stopped" in log, "'tpud stopped' in the log")
bad = [l for l in log.splitlines()
       if re.search(r"Sanitizer|runtime error:|Segmentation|SIGSEGV|SIGABRT|double free| ERROR ", l)]
check(not bad, "no crash signature or ERROR line in the log %s" % bad[:3])
shutil.rmtree(WORK, ignore_errors=True)
print("conn_edges: %s" % ("all passed" if FAILS == 0 else "%d FAILED" % FAILS))
sys.exit(1 if FAILS else 0)

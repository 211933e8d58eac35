#!/usr/bin/python3
"""catalogue.py - the bad-input catalogue: malformed requests over every protocol tpud speaks,
each with the status and message it must get, and the server alive after every one.

Protocols (the `proto` of a case):
  framed  tpud's framed protocol on the native port: 5-byte prefix + tpud.RequestEnvelope, built
          here byte by byte (bad flags, lengths, varints, wire types, truncations are the point)
  grpc    gRPC over HTTP/2 on the native port with a stock grpcio client (generic unary calls
          whose request and response are raw bytes, so malformed protobuf goes out as is)
  h2      gRPC over HTTP/2 with hand-made headers and message prefixes (python3-h2), for what
          grpcio will not send: bad content-type, :method, grpc-timeout, grpc-encoding, prefixes
  http    HTTP/1.1 JSON (Open Inference Protocol v2 REST) on the HTTP port, as raw bytes

Each case names the status it must get (a gRPC code name, or an HTTP status) and substrings the
message must hold (gRPC status message, ResponseEnvelope.message, or the JSON body's "error").
Framed cases share one connection, which must keep answering after each non-fatal error; a fatal
frame error (bad flag, oversized prefix, an envelope whose id cannot be read) must be answered
with id 0 and then the connection closed. After every case the server must answer health on both
ports, with the same PID.

Cases marked `bug` expect the right answer and document a known server bug: they print
"KNOWN BUG" and do not fail the run unless CATALOGUE_STRICT=1 (when the server is fixed they
print "ok" and a note to drop the mark).

The server under test serves the bundled model digits (version 1 only) with --queue-rows 256
and no authentication (test_catalogue.sh starts it so).

Usage: catalogue.py --native-port N --http-port N --pid PID [--only ID,...] [--show]
Prints one line per case (ok / FAIL / KNOWN BUG / skip) and a summary; exits 1 on a failure.
"""
import argparse
import json
import os
import socket
import struct
import sys
import time
import urllib.parse

try:
    import grpc
except ImportError:  # reported per case
    grpc = None
try:
    import h2.config
    import h2.connection
    import h2.events
    import hpack
    from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, SettingsFrame
except ImportError:
    h2 = None

CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
         "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
         "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
         "UNAUTHENTICATED"]
TIMEOUT = 5.0  # seconds for any one answer

# tpud.Method numbers
SERVER_LIVE, SERVER_READY, MODEL_READY, SERVER_METADATA, MODEL_METADATA = 1, 2, 3, 4, 5
MODEL_INFER, MODEL_LOAD, MODEL_UNLOAD, MATMUL, REPOSITORY_INDEX = 6, 7, 8, 9, 10
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"
MATMUL_PATH = "/tpud.TpudService/MatMul"

# ---- raw protobuf, by hand ----


def varint(v):
    """Base-128 varint; negative numbers as 64-bit two's complement (10 bytes), as protobuf."""
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wt):
    return varint(field << 3 | wt)


def fv(field, v):
    """A varint field."""
    return key(field, 0) + varint(v)


def fb(field, b):
    """A length-delimited field (bytes, string or message)."""
    if isinstance(b, str):
        b = b.encode()
    return key(field, 2) + varint(len(b)) + b


def packed_varints(field, vals):
    return fb(field, b"".join(varint(v) for v in vals))


def packed_floats(field, vals):
    return fb(field, struct.pack("<%df" % len(vals), *vals))


def envelope(rid=None, method=None, payload=None, timeout_us=None, metadata=None):
    b = b""
    if rid is not None:
        b += fv(1, rid)
    if method is not None:
        b += fv(2, method)
    if timeout_us is not None:
        b += fv(3, timeout_us)
    # a dict, or a list of (key, value) pairs: the wire may repeat a map key
    for k, v in (metadata.items() if isinstance(metadata, dict) else metadata or ()):
        b += fb(4, fb(1, k) + fb(2, v))
    if payload is not None:
        b += fb(5, payload)
    return b


def nested_unknown(levels):
    """An unknown field (15) holding itself `levels` deep: opaque bytes to a parser that skips
    unknown fields, a recursion bomb to one that descends into them."""
    b = b"leaf"
    for _ in range(levels):
        b = fb(15, b)
    return b


def frame(body, flag=0, length=None):
    return bytes([flag]) + struct.pack(">I", len(body) if length is None else length) + body


def infer_input(name="x", dt="FP32", shape=(1, 64), fp32=None, ints=None, extra=b""):
    b = b""
    if name is not None:
        b += fb(1, name)
    if dt is not None:
        b += fb(2, dt)
    if shape is not None:
        b += packed_varints(3, shape)
    contents = b""
    if fp32 is not None:
        contents += packed_floats(6, fp32)
    if ints is not None:
        contents += packed_varints(2, ints)
    if contents:
        b += fb(5, contents)
    return b + extra


def ROW(n=1):
    """n rows of a valid digits input as raw FP32 bytes."""
    return struct.pack("<%df" % (64 * n), *([1.0] * (64 * n)))


def infer_req(model="digits", version=None, inputs=None, outputs=(), raw=None, rid=None):
    """A ModelInferRequest. inputs: encoded InferInputTensor bodies (default: one valid x);
    raw: raw_input_contents entries (default: one valid row when inputs is default)."""
    if inputs is None:
        inputs = [infer_input()]
        if raw is None:
            raw = [ROW()]
    b = b""
    if model is not None:
        b += fb(1, model)
    if version is not None:
        b += fb(2, version)
    if rid is not None:
        b += fb(3, rid)
    for i in inputs:
        b += fb(5, i)
    for o in outputs:
        b += fb(6, fb(1, o))
    for r in raw or []:
        b += fb(7, r)
    return b


def tensor(shape, dt="FP32", data=None):
    n = 1
    for d in shape:
        n *= d
    size = {"FP32": 4, "BF16": 2, "INT8": 1}.get(dt, 4)
    if data is None:
        data = b"\0" * (n * size)
    return packed_varints(1, shape) + fb(2, dt) + fb(3, data)


def matmul_req(a=None, b=None):
    out = b""
    if a is not None:
        out += fb(1, a)
    if b is not None:
        out += fb(2, b)
    return out


def parse_pb(b):
    """Decodes a protobuf message into {field: [values]} (varints as ints, LEN as bytes)."""
    out, i = {}, 0
    while i < len(b):
        k, i = read_varint(b, i)
        field, wt = k >> 3, k & 7
        if wt == 0:
            v, i = read_varint(b, i)
        elif wt == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(field, []).append(v)
    return out


def read_varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, i


# ---- the framed protocol ----


class Closed(Exception):
    pass


class Framed:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _need(self, n):
        while len(self.buf) < n:
            try:
                d = self.s.recv(65536)
            except ConnectionResetError:
                d = b""
            if not d:
                raise Closed("connection closed with %d bytes of a frame" % len(self.buf))
            self.buf += d

    def recv(self):
        """One ResponseEnvelope: (id, code name, message str, payload, message_utf8_ok)."""
        self._need(5)
        n = struct.unpack(">I", self.buf[1:5])[0]
        self._need(5 + n)
        body, self.buf = self.buf[5:5 + n], self.buf[5 + n:]
        f = parse_pb(body)
        raw_msg = f.get(3, [b""])[-1]
        try:
            msg, utf8 = raw_msg.decode("utf-8"), True
        except UnicodeDecodeError:
            msg, utf8 = raw_msg.decode("utf-8", "replace"), False
        code = f.get(2, [0])[-1]
        return (f.get(1, [0])[-1], CODES[code] if code < len(CODES) else str(code), msg,
                f.get(4, [b""])[-1], utf8)

    def recv_id(self, rid):
        while True:
            r = self.recv()
            if r[0] == rid:
                return r

    def closed_soon(self, timeout=TIMEOUT):
        """True when the server closes the connection (EOF or reset) within timeout."""
        self.s.settimeout(timeout)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False
        finally:
            self.s.settimeout(TIMEOUT)

    def close(self):
        self.s.close()


# ---- HTTP/1.1 ----


def http_raw(port, data, shut=False):
    """Sends raw bytes, reads one response: (status, headers dict, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                raise Closed("no HTTP response (%d bytes)" % len(buf))
            buf += d
        head, body = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "0"))
        while len(body) < n:
            d = s.recv(65536)
            if not d:
                break
            body += d
        return status, hdrs, body[:n]
    finally:
        s.close()


def post(path, body, ctype="application/json", extra="", cl=None):
    if isinstance(body, str):
        body = body.encode()
    n = len(body) if cl is None else cl
    head = "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\n%sContent-Length: %s\r\n\r\n" % (
        path, ctype, extra, n)
    return head.encode() + body


def get(path, method="GET", version="HTTP/1.1", extra=""):
    return ("%s %s %s\r\nHost: x\r\n%s\r\n" % (method, path, version, extra)).encode()


def INFER(model="digits"):
    return "/v2/models/%s/infer" % model


def jinput(name="x", dt="FP32", shape=(1, 64), data=None, **kw):
    d = {"name": name, "shape": list(shape) if isinstance(shape, tuple) else shape, "datatype": dt,
         "data": [1.0] * 64 if data is None else data}
    d.update(kw)
    return d


def jbody(inputs=None, **kw):
    d = {"inputs": [jinput()] if inputs is None else inputs}
    d.update(kw)
    return json.dumps(d)


# ---- gRPC ----


def grpc_call(port, path, data, timeout=10.0, metadata=None):
    """(code name, details) of a unary call whose request and response are raw bytes."""
    ch = CTX.channel(port)
    call = ch.unary_unary(path)
    try:
        call(data, timeout=timeout, metadata=metadata)
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""


def h2_call(port, headers, data=None, chunks=None):
    """A hand-made gRPC call: returns (:status, grpc-status name, grpc-message, reset)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                 header_encoding="utf-8",
                                                                 validate_outbound_headers=False))
        c.initiate_connection()
        sid = c.get_next_available_stream_id()
        parts = chunks if chunks is not None else ([data] if data is not None else [])
        c.send_headers(sid, headers, end_stream=not parts)
        for i, p in enumerate(parts):
            c.send_data(sid, p, end_stream=i == len(parts) - 1)
        s.sendall(c.data_to_send())
        hdrs, done, reset = {}, False, None
        while not done:
            d = s.recv(65536)
            if not d:
                break
            for ev in c.receive_data(d):
                if isinstance(ev, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    hdrs.update(dict(ev.headers))
                elif isinstance(ev, h2.events.DataReceived):
                    c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    done = True
                elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                    reset, done = ev.error_code, True
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    reset, done = "GOAWAY %s" % ev.error_code, True
            out = c.data_to_send()
            if out:
                s.sendall(out)
        st = hdrs.get("grpc-status")
        name = CODES[int(st)] if st is not None and st.isdigit() and int(st) < len(CODES) else st
        return (hdrs.get(":status"), name, urllib.parse.unquote(hdrs.get("grpc-message", "")),
                reset)
    finally:
        s.close()


def gheaders(path=INFER_PATH, method="POST", ctype="application/grpc", extra=()):
    """Request headers; ctype None leaves content-type out."""
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", "127.0.0.1")] + ([("content-type", ctype)] if ctype else []) + \
        [("te", "trailers")] + list(extra)


H2_ERRORS = ["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
             "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
             "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
             "HTTP_1_1_REQUIRED"]


def h2_stream_ids(port, steps):
    """ServerLive calls on the stream ids of `steps`, in order, as raw frames (hyperframe and
    hpack, no h2 state machine: it would refuse to send an id lower than one already used).
    Each step is (stream id, wait): wait for that call's answer before the next step. Returns
    (outcome, detail): "OK" when every call was answered grpc-status 0 and the connection then
    stayed open, else "GOAWAY <error>" (or what else ended it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    enc, dec, buf = hpack.Encoder(), hpack.Decoder(), b""
    status = {}  # stream id -> grpc-status

    def frame():
        nonlocal buf
        while True:
            if len(buf) >= 9:
                f, n = Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) >= 9 + n:
                    f.parse_body(memoryview(buf[9:9 + n]))
                    buf = buf[9 + n:]
                    return f
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                d = b""
            if not d:
                return None
            buf += d

    def read_until(sid):
        """None when stream sid's call ended (sid 0: when the connection stays quiet), else
        what ended the connection."""
        while sid not in status:
            try:
                f = frame()
            except socket.timeout:
                return None if sid == 0 else "no answer for stream %d" % sid
            if f is None:
                return "EOF"
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                ack = SettingsFrame(0)
                ack.flags.add("ACK")
                s.sendall(ack.serialize())
            elif isinstance(f, HeadersFrame):
                h = dict(dec.decode(f.data))
                if "END_STREAM" in f.flags:
                    status[f.stream_id] = h.get("grpc-status", h.get(":status"))
            elif isinstance(f, GoAwayFrame):
                e = f.error_code
                return "GOAWAY " + (H2_ERRORS[e] if e < len(H2_ERRORS) else str(e))
        return None

    try:
        settings = SettingsFrame(0)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings.serialize())
        for sid, wait in steps:
            hf = HeadersFrame(sid)
            hf.data = enc.encode(gheaders("/inference.GRPCInferenceService/ServerLive"))
            hf.flags.add("END_HEADERS")
            df = DataFrame(sid)
            df.data = gmsg(b"")
            df.flags.add("END_STREAM")
            s.sendall(hf.serialize() + df.serialize())
            if wait:
                end = read_until(sid)
                if end:
                    return end, "after stream %d" % sid
        s.settimeout(0.5)  # then: does the connection end, or stay open and quiet?
        end = read_until(0)
        if end:
            return end, "after the last step"
        bad = dict((k, v) for k, v in status.items() if v != "0")
        if bad or len(status) != len(steps):
            return "answers %r" % status, "expected grpc-status 0 for streams %s" % (
                [sid for sid, _ in steps],)
        return "OK", ""
    finally:
        s.close()


def gmsg(payload, flag=0, length=None):
    """A gRPC length-prefixed message: the same 5-byte prefix as a framed frame."""
    return frame(payload, flag, length)


# ---- the catalogue ----

CASES = []


def case(cid, cat, proto, send, want, msg=(), **kw):
    """send: what to send (protocol-specific, see run_*); want: gRPC code name or HTTP status;
    msg: substrings the message must contain. kw: rid (the framed request id to wait for),
    fatal (id-0 answer, then the connection closes), eof_only (closed without an answer), dup,
    burst, skip_first (framed variants), http (:status of an h2 answer), ids (an h2 case whose
    send is a list of (stream id, wait) steps, see h2_stream_ids), close (HTTP framing error:
    Connection: close), absent (substrings the message must not contain), bug."""
    if isinstance(msg, str):
        msg = (msg,)
    CASES.append(dict(id=cid, cat=cat, proto=proto, send=send, want=want, msg=tuple(msg), **kw))


BIG = 1 << 62

# -- framing (framed): fatal, answered with id 0, then the connection closes --
case("frame-flag-2", "framing", "framed", frame(envelope(1, SERVER_LIVE), flag=2),
     "INVALID_ARGUMENT", ("bad frame flag byte 0x02", "expected 0x00"), fatal=True)
case("frame-flag-ff", "framing", "framed", b"\xff\xff\xff\xff\xff",
     "INVALID_ARGUMENT", "bad frame flag byte 0xff", fatal=True)
case("frame-compressed", "framing", "framed", frame(envelope(1, SERVER_LIVE), flag=1),
     "UNIMPLEMENTED", ("compressed", "flag byte 0"), fatal=True)
case("frame-len-4g", "framing", "framed", frame(b"", length=0xFFFFFFFF),
     "RESOURCE_EXHAUSTED", ("4294967295-byte message", "maximum message size of 67108864"),
     fatal=True)
case("frame-len-max+1", "framing", "framed", frame(b"", length=(64 << 20) + 1),
     "RESOURCE_EXHAUSTED", "67108865-byte message", fatal=True)
case("frame-http-on-native", "framing", "framed", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
     "INVALID_ARGUMENT", "bad frame flag byte 0x47", fatal=True)
case("frame-truncated-eof", "framing", "framed", frame(envelope(1, SERVER_LIVE) + b"x" * 90,
                                                      length=100)[:20],
     "closed", (), eof_only=True)
case("frame-empty", "framing", "framed", frame(b""),
     "INVALID_ARGUMENT", ("no id", "non-zero id"), fatal=True)
case("frame-not-protobuf", "framing", "framed", frame(b"\xff" * 16),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)

# -- request ids (envelope id) --
case("id-missing", "ids", "framed", frame(envelope(None, SERVER_LIVE)),
     "INVALID_ARGUMENT", ("no id", "non-zero id (field 1)"), fatal=True)
case("id-zero", "ids", "framed", frame(envelope(0, SERVER_LIVE)),
     "INVALID_ARGUMENT", "non-zero id", fatal=True)
case("id-varint-11-bytes", "varints", "framed",
     frame(key(1, 0) + b"\xff" * 10 + b"\x01" + fv(2, SERVER_LIVE)),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("id-varint-truncated", "varints", "framed", frame(key(1, 0) + b"\xff\xff"),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("id-max-u64-unknown-method", "ids", "framed", frame(envelope((1 << 64) - 1, 77)),
     "UNIMPLEMENTED", "request 18446744073709551615 names unknown method 77", rid=(1 << 64) - 1)
case("id-duplicate-in-flight", "ids", "framed",
     frame(envelope(4242, MODEL_INFER, infer_req())) * 2,
     "INVALID_ARGUMENT", "request id 4242 is already in flight on this connection", dup=4242)

# -- envelope wire format --
case("env-id-wrong-wiretype", "varints", "framed", frame(fb(1, b"\x05") + fv(2, SERVER_LIVE)),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("env-payload-truncated", "nesting", "framed",
     frame(fv(1, 7) + fv(2, MODEL_INFER) + key(5, 2) + varint(1000) + b"abc"),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("env-payload-len-2^63", "varints", "framed",
     frame(fv(1, 7) + fv(2, MODEL_INFER) + key(5, 2) + varint(1 << 63)),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("env-metadata-truncated", "nesting", "framed",
     frame(fv(1, 7) + fv(2, SERVER_LIVE) + key(4, 2) + varint(10) + fb(1, "authorization")[:6]),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)
case("env-field-0", "varints", "framed", frame(fv(1, 7) + fv(2, SERVER_LIVE) + b"\x00\x01"),
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True)

# -- unknown methods --
case("method-unspecified", "methods", "framed", frame(envelope(11, 0)),
     "UNIMPLEMENTED", ("unknown method 0", "expected a tpud.Method from 1 to 16"), rid=11)
case("method-99", "methods", "framed", frame(envelope(12, 99)),
     "UNIMPLEMENTED", "unknown method 99", rid=12)
case("method-negative", "methods", "framed", frame(envelope(13, -1)),
     "UNIMPLEMENTED", "unknown method -1", rid=13)
case("method-missing", "methods", "framed", frame(envelope(14, None, b"")),
     "UNIMPLEMENTED", "unknown method 0", rid=14)
case("method-99-burst-50", "methods", "framed",
     b"".join(frame(envelope(i, 99)) for i in range(100, 150)),
     "UNIMPLEMENTED", "names unknown method 99", burst=list(range(100, 150)))
case("grpc-unknown-method", "methods", "grpc", ("/inference.GRPCInferenceService/ModelInferX", b""),
     "UNIMPLEMENTED", ("unknown method /inference.GRPCInferenceService/ModelInferX",
                       "tpud serves /inference.GRPCInferenceService/"))
case("grpc-health-check", "methods", "grpc", ("/grpc.health.v1.Health/Check", b""), "OK", "")
case("grpc-health-watch-garbage", "methods", "grpc", ("/grpc.health.v1.Health/Watch", b"\xff" * 4),
     "INVALID_ARGUMENT", "expected one grpc.health.v1.HealthCheckRequest")
case("grpc-reflection-garbage", "methods", "grpc",
     ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", b"\xff" * 4),
     "INVALID_ARGUMENT", "not a grpc.reflection ServerReflectionRequest")
case("grpc-health-check-garbage", "methods", "grpc", ("/grpc.health.v1.Health/Check", b"\xff" * 4),
     "INVALID_ARGUMENT", "")
case("grpc-unknown-tpud-method", "methods", "grpc", ("/tpud.TpudService/Shutdown", b""),
     "UNIMPLEMENTED", "unknown method /tpud.TpudService/Shutdown")

# -- method payloads: protobuf varints, wire types, truncation, nesting --
case("pb-infer-not-protobuf", "varints", "framed", frame(envelope(21, MODEL_INFER, b"\xff" * 8)),
     "INVALID_ARGUMENT", ("ModelInfer: payload of 8 bytes",
                          "not a valid inference.ModelInferRequest"), rid=21)
case("pb-infer-truncated-len", "nesting", "framed",
     frame(envelope(22, MODEL_INFER, key(1, 2) + varint(50) + b"digits")),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=22)
case("pb-infer-varint-11-bytes", "varints", "framed",
     frame(envelope(23, MODEL_INFER, fb(1, "digits") + key(5, 2) + b"\xff" * 10 + b"\x01")),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=23)
case("pb-infer-wrong-wiretype", "varints", "framed",
     frame(envelope(24, MODEL_INFER, fv(1, 5) + fb(5, infer_input()) + fb(7, ROW()))),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=24)
case("pb-shape-packed-truncated", "varints", "framed",
     frame(envelope(25, MODEL_INFER, fb(1, "digits") +
                    fb(5, fb(1, "x") + fb(2, "FP32") + fb(3, b"\x01\xc0")) + fb(7, ROW()))),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=25)
case("pb-input-nested-truncated", "nesting", "framed",
     frame(envelope(26, MODEL_INFER, fb(1, "digits") + fb(5, fb(1, "x") + key(5, 2) + varint(40)
                                                              + b"\x35\x00"))),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=26)
case("pb-deep-groups", "nesting", "framed",
     frame(envelope(27, MODEL_INFER, fb(1, "digits") + key(15, 3) * 100000)),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest", rid=27)
case("pb-deep-unknown-len", "nesting", "framed",
     frame(envelope(28, MODEL_INFER, infer_req() + nested_unknown(2000))),
     "OK", (), rid=28)
case("grpc-infer-not-protobuf", "varints", "grpc", (INFER_PATH, b"\x0a\xff\xff\xff\xff\x0f"),
     "INVALID_ARGUMENT",
     ("ModelInfer: payload of 6 bytes", "not a valid inference.ModelInferRequest"))
case("grpc-infer-wrong-wiretype", "varints", "grpc",
     (INFER_PATH, fv(1, 5) + fb(5, infer_input()) + fb(7, ROW())),
     "INVALID_ARGUMENT", "not a valid inference.ModelInferRequest")
case("grpc-matmul-truncated", "nesting", "grpc", (MATMUL_PATH, fb(1, tensor([2, 2]))[:-3]),
     "INVALID_ARGUMENT", "MatMul: payload of")
case("grpc-live-garbage", "varints", "grpc",
     ("/inference.GRPCInferenceService/ServerLive", b"\xff"),
     "INVALID_ARGUMENT", "not a valid inference.ServerLiveRequest")

# -- unknown models and versions --
case("model-unknown", "models", "framed", frame(envelope(31, MODEL_INFER, infer_req("nope"))),
     "NOT_FOUND", "model 'nope' is not in the repository", rid=31)
case("model-version-absent", "models", "framed",
     frame(envelope(32, MODEL_INFER, infer_req(version="7"))),
     "NOT_FOUND", "model 'digits' has no ready version 7", rid=32)
case("model-version-not-number", "models", "framed",
     frame(envelope(33, MODEL_INFER, infer_req(version="v1"))),
     "NOT_FOUND", "version 'v1' is not a positive integer", rid=33)
case("model-version-zero", "models", "grpc", (INFER_PATH, infer_req(version="0")),
     "NOT_FOUND", "version '0' is not a positive integer")
case("model-name-empty", "models", "framed",
     frame(envelope(34, MODEL_INFER, infer_req(model=None))),
     "INVALID_ARGUMENT", "no model name given", rid=34)
case("model-name-nul", "models", "framed",
     frame(envelope(39, MODEL_INFER, infer_req(model=b"digits\x00evil"))),
     "INVALID_ARGUMENT", "model_name holds a NUL byte", rid=39)
case("model-version-19-digits", "models", "framed",
     frame(envelope(30, MODEL_INFER, infer_req(version="1000000000000000000"))),
     "NOT_FOUND", "version '1000000000000000000'", rid=30)
case("model-ready-bad-version", "models", "framed",
     frame(envelope(29, MODEL_READY, fb(1, "digits") + fb(2, "abc"))),
     "NOT_FOUND", "version 'abc' is not a positive integer", rid=29)
case("model-ready-absent-version", "models", "grpc",
     ("/inference.GRPCInferenceService/ModelReady", fb(1, "digits") + fb(2, "7")),
     "NOT_FOUND", "model 'digits' has no ready version 7")
case("model-metadata-unknown", "models", "grpc",
     ("/inference.GRPCInferenceService/ModelMetadata", fb(1, "nope")),
     "NOT_FOUND", "model 'nope' is not in the repository")
case("model-ready-unknown", "models", "framed", frame(envelope(35, MODEL_READY, fb(1, "nope"))),
     "NOT_FOUND", "model 'nope' is not in the repository", rid=35)
case("model-name-bad-utf8", "models", "framed",
     frame(envelope(36, MODEL_INFER, infer_req(model=b"\xff\xfe"))),
     "INVALID_ARGUMENT", "model_name is not valid UTF-8", rid=36)
case("load-name-traversal", "models", "framed",
     frame(envelope(37, MODEL_LOAD, fb(1, "../etc"))),
     "INVALID_ARGUMENT", ("model name '../etc' is not valid", "no '/'"), rid=37)
case("load-version-not-number", "models", "grpc",
     ("/tpud.TpudService/ModelLoad", fb(1, "digits") + fb(2, "x")),
     "INVALID_ARGUMENT", "version 'x' is not a positive integer")
case("unload-no-name", "models", "framed", frame(envelope(38, MODEL_UNLOAD, b"")),
     "INVALID_ARGUMENT", "no model name given", rid=38)
case("load-unknown-model", "models", "grpc", ("/tpud.TpudService/ModelLoad", fb(1, "nope")),
     "NOT_FOUND", "model 'nope' is not in the repository")

# -- tensor names --
case("name-unknown-input", "names", "framed",
     frame(envelope(41, MODEL_INFER, infer_req(inputs=[infer_input("y")], raw=[ROW()]))),
     "INVALID_ARGUMENT", ("input 'y'", "has no such input; expected 'x'"), rid=41)
case("name-empty-input", "names", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input("")], raw=[ROW()])),
     "INVALID_ARGUMENT", ("input ''", "has no such input; expected 'x'"))
case("name-duplicate-input", "names", "framed",
     frame(envelope(42, MODEL_INFER, infer_req(inputs=[infer_input(), infer_input()],
                                               raw=[ROW(), ROW()]))),
     "INVALID_ARGUMENT", "input 'x': appears more than once in the request", rid=42)
case("name-no-inputs", "names", "grpc", (INFER_PATH, infer_req(inputs=[], raw=[])),
     "INVALID_ARGUMENT", "request has no inputs; expected 'x'")
case("name-unknown-output", "names", "framed",
     frame(envelope(43, MODEL_INFER, infer_req(outputs=["nope"]))),
     "INVALID_ARGUMENT", ("output 'nope'", "has no such output; expected 'probs'"), rid=43)
case("name-output-twice", "names", "grpc", (INFER_PATH, infer_req(outputs=["probs", "probs"])),
     "INVALID_ARGUMENT", "output 'probs': requested more than once")
case("name-65-inputs", "names", "framed",
     frame(envelope(44, MODEL_INFER, infer_req(inputs=[infer_input()] * 65, raw=[ROW()] * 65))),
     "INVALID_ARGUMENT", "request names 65 inputs", rid=44)
case("name-10k-bytes", "names", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input("n" * 10000)], raw=[ROW()])),
     "INVALID_ARGUMENT", ("input 'nnnn", "has no such input"))
case("model-name-1k-bytes", "names", "grpc", (INFER_PATH, infer_req(model="m" * 1000)),
     "NOT_FOUND", ("model 'mmmm", "is not in the repository"))

# -- tensor shapes --
case("shape-rank-1", "shapes", "framed",
     frame(envelope(51, MODEL_INFER, infer_req(inputs=[infer_input(shape=[64])], raw=[ROW()]))),
     "INVALID_ARGUMENT", "input 'x': shape [64] has rank 1, expected rank 2 (model shape [-1,64])",
     rid=51)
case("shape-inner-dim", "shapes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(shape=[4, 16])], raw=[ROW()])),
     "INVALID_ARGUMENT", ("shape [4,16] does not match the model shape [-1,64]",
                          "dimension 1 must be 64"))
case("shape-negative-dim", "shapes", "framed",
     frame(envelope(52, MODEL_INFER, infer_req(inputs=[infer_input(shape=[-1, 64])], raw=[ROW()]))),
     "INVALID_ARGUMENT", ("shape [-1,64]: dimension 0 is -1", "must be >= 0"), rid=52)
case("shape-product-overflow", "shapes", "framed",
     frame(envelope(53, MODEL_INFER, infer_req(inputs=[infer_input(shape=[BIG, BIG])],
                                               raw=[ROW()]))),
     "INVALID_ARGUMENT", "has too many elements (the product overflows 64 bits)", rid=53)
case("shape-bytes-overflow", "shapes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(shape=[1 << 57, 64])], raw=[ROW()])),
     "INVALID_ARGUMENT", "the byte size overflows")
case("shape-rank-9", "shapes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(shape=[1] * 9)], raw=[ROW()])),
     "INVALID_ARGUMENT", "rank 9 exceeds the maximum of 8 dimensions")
case("shape-missing", "shapes", "framed",
     frame(envelope(54, MODEL_INFER, infer_req(inputs=[infer_input(shape=None)], raw=[ROW()]))),
     "INVALID_ARGUMENT", "shape [] has rank 0, expected rank 2", rid=54)
case("shape-rows-over-queue", "shapes", "framed",
     frame(envelope(55, MODEL_INFER, infer_req(inputs=[infer_input(shape=[300, 64])],
                                               raw=[ROW(300)]))),
     "RESOURCE_EXHAUSTED", ("300", "limit 256 rows"), rid=55, absent=("queue full",))
case("http-rows-over-queue", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[300, 64], data=[1.0] * (300 * 64))])),
     413, "limit 256 rows")
case("matmul-rank-3", "shapes", "framed",
     frame(envelope(56, MATMUL, matmul_req(tensor([2, 2, 2]), tensor([2, 2])))),
     "INVALID_ARGUMENT", "matmul: tensor 'a': shape [2,2,2] has rank 3, expected rank 2 ([M,K])",
     rid=56)
case("matmul-k-mismatch", "shapes", "grpc",
     (MATMUL_PATH, matmul_req(tensor([2, 3]), tensor([2, 2]))),
     "INVALID_ARGUMENT", ("K must match", "a's columns 3 != b's rows 2"))
case("matmul-zero-dim", "shapes", "framed",
     frame(envelope(57, MATMUL, matmul_req(tensor([0, 2]), tensor([2, 2])))),
     "INVALID_ARGUMENT", "shape [0,2]: every dimension must be >= 1", rid=57)
case("matmul-too-large", "shapes", "grpc",
     (MATMUL_PATH, matmul_req(packed_varints(1, [5000, 5000]) + fb(2, "FP32"), tensor([2, 2]))),
     "RESOURCE_EXHAUSTED", "shape [5000,5000] has 25000000 elements; the limit is")
case("matmul-missing-b", "shapes", "framed",
     frame(envelope(58, MATMUL, matmul_req(tensor([2, 2])))),
     "INVALID_ARGUMENT", "matmul: tensor 'b' is missing", rid=58)

# -- datatypes --
case("dtype-fp16", "dtypes", "framed",
     frame(envelope(61, MODEL_INFER, infer_req(inputs=[infer_input(dt="FP16")], raw=[ROW()]))),
     "INVALID_ARGUMENT", "input 'x': datatype FP16, expected FP32", rid=61)
case("dtype-unknown", "dtypes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(dt="FLOAT")], raw=[ROW()])),
     "INVALID_ARGUMENT", "unknown or unsupported datatype 'FLOAT'; expected FP32")
case("dtype-empty", "dtypes", "framed",
     frame(envelope(62, MODEL_INFER, infer_req(inputs=[infer_input(dt=None)], raw=[ROW()]))),
     "INVALID_ARGUMENT", "unknown or unsupported datatype ''; expected FP32", rid=62)
case("dtype-bytes", "dtypes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(dt="BYTES")], raw=[ROW()])),
     "INVALID_ARGUMENT", "datatype 'BYTES'")
case("dtype-typed-int-contents", "dtypes", "framed",
     frame(envelope(63, MODEL_INFER, infer_req(inputs=[infer_input(ints=[1] * 64)], raw=[]))),
     "INVALID_ARGUMENT", "datatype FP32 takes contents.fp32_contents or raw_input_contents; got "
     "contents.int_contents", rid=63)
case("dtype-raw-and-typed", "dtypes", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(fp32=[1.0] * 64)], raw=[ROW()])),
     "INVALID_ARGUMENT", "has typed contents but the request uses raw_input_contents")
case("dtype-matmul-int32", "dtypes", "framed",
     frame(envelope(64, MATMUL, matmul_req(tensor([2, 2], "INT32"), tensor([2, 2], "INT32")))),
     "INVALID_ARGUMENT", "matmul: tensor 'a': datatype 'INT32', expected FP32, BF16 or INT8",
     rid=64)
case("dtype-matmul-mixed", "dtypes", "grpc",
     (MATMUL_PATH, matmul_req(tensor([2, 2], "FP32"), tensor([2, 2], "INT8"))),
     "INVALID_ARGUMENT", "a is FP32 but b is INT8; both must have the same datatype")

# -- byte lengths --
case("len-raw-short", "lengths", "framed",
     frame(envelope(71, MODEL_INFER, infer_req(inputs=[infer_input()], raw=[ROW()[:-1]]))),
     "INVALID_ARGUMENT", "input 'x': shape [1,64] needs 256 bytes of FP32 data, got 255", rid=71)
case("len-raw-long", "lengths", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input()], raw=[ROW() + b"\0"])),
     "INVALID_ARGUMENT", "needs 256 bytes of FP32 data, got 257")
case("len-typed-short", "lengths", "framed",
     frame(envelope(72, MODEL_INFER, infer_req(inputs=[infer_input(fp32=[1.0] * 63)], raw=[]))),
     "INVALID_ARGUMENT", "needs 64 FP32 values in contents.fp32_contents, got 63", rid=72)
case("len-raw-count", "lengths", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input()], raw=[ROW(), ROW()])),
     "INVALID_ARGUMENT", "raw_input_contents has 2 entries for 1 inputs; expected one per input")
case("len-no-data", "lengths", "framed",
     frame(envelope(73, MODEL_INFER, infer_req(inputs=[infer_input()], raw=[]))),
     "INVALID_ARGUMENT", "needs 64 FP32 values in contents.fp32_contents, got 0", rid=73)
case("len-matmul-data", "lengths", "grpc",
     (MATMUL_PATH, matmul_req(tensor([2, 2], data=b"\0" * 15), tensor([2, 2]))),
     "INVALID_ARGUMENT", "matmul: tensor 'a': shape [2,2] needs 16 bytes of FP32 data, got 15")
case("len-frame-trailing-garbage", "lengths", "framed",
     frame(envelope(74, SERVER_LIVE)) + b"\x00\x00\x00\x00\x03\xff\xff\xff",
     "INVALID_ARGUMENT", "not a valid tpud.RequestEnvelope", fatal=True, skip_first=74)

# -- deadlines --
case("deadline-infer-1us", "deadlines", "framed",
     frame(envelope(81, MODEL_INFER, infer_req(), timeout_us=1)),
     "DEADLINE_EXCEEDED", "deadline expired while queued; request not computed", rid=81)
case("deadline-matmul-1us", "deadlines", "framed",
     frame(envelope(82, MATMUL, matmul_req(tensor([2, 2]), tensor([2, 2])), timeout_us=1)),
     "DEADLINE_EXCEEDED", "matmul: deadline expired while queued; not computed", rid=82)
case("deadline-max-u64", "deadlines", "framed",
     frame(envelope(83, MODEL_INFER, infer_req(), timeout_us=(1 << 64) - 1)),
     "OK", (), rid=83)
case("grpc-timeout-1u", "deadlines", "h2",
     (gheaders(extra=[("grpc-timeout", "1u")]), gmsg(infer_req())),
     "DEADLINE_EXCEEDED", "deadline expired while queued")
case("grpc-timeout-garbage", "deadlines", "h2",
     (gheaders(extra=[("grpc-timeout", "soon")]), gmsg(infer_req())),
     "INVALID_ARGUMENT", ("grpc-timeout 'soon' is not valid", "1 to 8 digits and a unit"))
case("grpc-timeout-9-digits", "deadlines", "h2",
     (gheaders(extra=[("grpc-timeout", "123456789S")]), gmsg(infer_req())),
     "INVALID_ARGUMENT", "grpc-timeout '123456789S' is not valid")
case("grpc-timeout-no-unit", "deadlines", "h2",
     (gheaders(extra=[("grpc-timeout", "100")]), gmsg(infer_req())),
     "INVALID_ARGUMENT", "grpc-timeout '100' is not valid")

# -- NaN and infinity: refused in every floating-point input; a result that overflows FP32 is
# refused too (INVALID_ARGUMENT / HTTP 400), never answered (JSON would have no text for it) --
NAN, INF = float("nan"), float("inf")


def fp32_rows(rows):
    return struct.pack("<%df" % sum(len(r) for r in rows), *[v for r in rows for v in r])


ONE = [1.0] * 64
case("nonfinite-input-nan", "nonfinite", "framed",
     frame(envelope(101, MODEL_INFER, infer_req(raw=[fp32_rows([ONE[:5] + [NAN] + ONE[6:]])]))),
     "INVALID_ARGUMENT", "input 'x': element [0,5] is NaN; expected finite FP32 values", rid=101)
case("nonfinite-input-inf-row-1", "nonfinite", "framed",
     frame(envelope(102, MODEL_INFER, infer_req(inputs=[infer_input(shape=(2, 64))],
                                                raw=[fp32_rows([ONE, ONE[:63] + [INF]])]))),
     "INVALID_ARGUMENT", "input 'x': element [1,63] is infinity", rid=102)
case("nonfinite-input-typed-neg-inf", "nonfinite", "grpc",
     (INFER_PATH, infer_req(inputs=[infer_input(fp32=[-INF] + ONE[1:])], raw=[])),
     "INVALID_ARGUMENT", "input 'x': element [0,0] is -infinity")
case("nonfinite-output-3e38", "nonfinite", "framed",
     frame(envelope(103, MODEL_INFER, infer_req(raw=[fp32_rows([[3e38] * 64])]))),
     "INVALID_ARGUMENT", ("model 'digits' version 1: output 'probs' element [0,0] is NaN",
                          "the input overflows FP32 inside the model"), rid=103)
case("nonfinite-output-3e38-grpc", "nonfinite", "grpc",
     (INFER_PATH, infer_req(raw=[fp32_rows([[3e38] * 64])])),
     "INVALID_ARGUMENT", "output 'probs' element [0,0] is NaN")
case("nonfinite-output-3e38-http", "nonfinite", "http",
     post(INFER(), jbody([jinput(shape=(2, 64), data=[ONE, [3e38] * 64])])),
     400, ("output 'probs' element [1,0] is NaN", "the input overflows FP32 inside the model"))
case("nonfinite-http-fp64-beyond-fp32", "nonfinite", "http",
     post(INFER(), jbody([jinput(dt="FP64", data=[1.0] * 9 + [1e300] + [1.0] * 54)])),
     400, "input 'x': element 9 (1e+300) is out of range for FP32, the model's datatype")
case("nonfinite-matmul-input-nan", "nonfinite", "framed",
     frame(envelope(104, MATMUL, matmul_req(tensor([2, 2], data=fp32_rows([[1, 2, NAN, 4]])),
                                            tensor([2, 2])))),
     "INVALID_ARGUMENT", "matmul: tensor 'a': element [1,0] is NaN", rid=104)
case("nonfinite-matmul-input-bf16-inf", "nonfinite", "grpc",
     (MATMUL_PATH, matmul_req(tensor([2, 2], "BF16"),
                              tensor([2, 2], "BF16", data=b"\0\0\0\0\0\0\x80\x7f"))),
     "INVALID_ARGUMENT", "matmul: tensor 'b': element [1,1] is infinity")
case("nonfinite-matmul-overflow", "nonfinite", "framed",
     frame(envelope(105, MATMUL, matmul_req(tensor([1, 2], data=fp32_rows([[3e38, 3e38]])),
                                            tensor([2, 1], data=fp32_rows([[2, 2]]))))),
     "INVALID_ARGUMENT", ("matmul: result element [0,0] is infinity", "overflows FP32"), rid=105)
case("nonfinite-matmul-overflow-grpc", "nonfinite", "grpc",
     (MATMUL_PATH, matmul_req(tensor([1, 1], data=fp32_rows([[-3e38]])),
                              tensor([1, 2], data=fp32_rows([[1, 10]])))),
     "INVALID_ARGUMENT", "matmul: result element [0,1] is -infinity")

# -- credentials: more than one authorization value is refused on every protocol, whatever the
# policy (this server has none) and on open endpoints too: which one counts is ambiguous --
TWO_AUTHZ = [("authorization", "Bearer first"), ("authorization", "Bearer second")]
case("authz-twice-framed", "auth", "framed", frame(envelope(91, SERVER_LIVE, metadata=TWO_AUTHZ)),
     "INVALID_ARGUMENT", ("carries 2 authorization values", "send exactly one"), rid=91)
case("authz-twice-framed-infer", "auth", "framed",
     frame(envelope(92, MODEL_INFER, infer_req(), metadata=TWO_AUTHZ)),
     "INVALID_ARGUMENT", "carries 2 authorization values", rid=92)
case("authz-three-framed", "auth", "framed",
     frame(envelope(93, SERVER_LIVE, metadata=TWO_AUTHZ + [("authorization", "Bearer x")])),
     "INVALID_ARGUMENT", "carries 3 authorization values", rid=93)
case("authz-twice-grpc", "auth", "grpc", (INFER_PATH, infer_req(), TWO_AUTHZ),
     "INVALID_ARGUMENT", ("carries 2 authorization values", "send exactly one"))
case("authz-twice-h2", "auth", "h2", (gheaders(extra=TWO_AUTHZ), gmsg(infer_req())),
     "INVALID_ARGUMENT", "carries 2 authorization values")
case("authz-twice-http", "auth", "http",
     post(INFER(), jbody(), extra="Authorization: Bearer first\r\nauthorization: Bearer b\r\n"),
     400, ("carries 2 authorization values", "send exactly one"))
case("authz-twice-http-health", "auth", "http",
     get("/v2/health/ready", extra="Authorization: Bearer a\r\nAuthorization: Bearer a\r\n"),
     400, "carries 2 authorization values")

# -- gRPC over HTTP/2 framing and headers --
case("h2-content-type-json", "framing", "h2",
     (gheaders(ctype="application/json"), gmsg(infer_req())),
     "INVALID_ARGUMENT", "content-type must be application/grpc", http="415")
case("h2-content-type-missing", "framing", "h2", (gheaders(ctype=None), gmsg(infer_req())),
     "INVALID_ARGUMENT", ("content-type must be application/grpc", "the request has none"),
     http="415")
case("h2-content-type-missing-no-body", "framing", "h2", (gheaders(ctype=None), None),
     "INVALID_ARGUMENT", "the request has none", http="415")
case("h2-method-get", "framing", "h2", (gheaders(method="GET"), None),
     "UNIMPLEMENTED", "gRPC calls are POST requests", http="405")
case("h2-grpc-encoding-gzip", "framing", "h2",
     (gheaders(extra=[("grpc-encoding", "gzip")]), gmsg(infer_req())),
     "UNIMPLEMENTED", "grpc-encoding other than identity")
case("h2-compressed-flag", "framing", "h2", (gheaders(), gmsg(infer_req(), flag=1)),
     "UNIMPLEMENTED", "compressed")
case("h2-bad-flag", "framing", "h2", (gheaders(), gmsg(infer_req(), flag=7)),
     "INVALID_ARGUMENT", "bad frame flag byte 0x07")
case("h2-prefix-longer", "lengths", "h2", (gheaders(), gmsg(b"0123456789", length=100)),
     "INVALID_ARGUMENT", "request body holds 10 bytes after the prefix, which announces 100")
case("h2-prefix-over-max", "lengths", "h2", (gheaders(), gmsg(b"", length=0xFFFFFFFF)),
     "RESOURCE_EXHAUSTED", "4294967295-byte message")
case("h2-body-3-bytes", "lengths", "h2", (gheaders(), b"\x00\x00\x00"),
     "INVALID_ARGUMENT", "request has 3 bytes of body")
case("h2-two-messages", "lengths", "h2", (gheaders(), gmsg(infer_req()) * 2),
     "INVALID_ARGUMENT", "expected exactly one message (tpud's methods are unary)")
case("h2-headers-20k", "lengths", "h2",
     (gheaders(extra=[("x-big", "a" * 20000)]), gmsg(infer_req())),
     "RESOURCE_EXHAUSTED", "request headers exceed grpc-max-header-bytes (16384 bytes)")
case("h2-no-body", "lengths", "h2", (gheaders(), None),
     "INVALID_ARGUMENT", "request has 0 bytes of body")
# Stream ids (RFC 9113 section 5.1.1): each new stream's id is above every id the client used
# before; an id it skipped is closed, and a HEADERS on it is a connection error PROTOCOL_ERROR.
case("h2-stream-id-lower", "ids", "h2", [(5, False), (3, False)],
     "GOAWAY PROTOCOL_ERROR", (), ids=True)
case("h2-stream-id-lower-after-answer", "ids", "h2", [(1, True), (7, True), (5, False)],
     "GOAWAY PROTOCOL_ERROR", (), ids=True)
case("h2-stream-id-first-skips", "ids", "h2", [(9, True), (1, False)],
     "GOAWAY PROTOCOL_ERROR", (), ids=True)
case("h2-stream-id-reused", "ids", "h2", [(1, True), (1, False)],
     "GOAWAY STREAM_CLOSED", (), ids=True)
case("h2-stream-id-skipping-is-fine", "ids", "h2", [(1, True), (7, True), (9, False)],
     "OK", (), ids=True)
case("h2-stream-id-lower-after-20-skips", "ids", "h2",
     [(4 * i + 1, True) for i in range(21)] + [(79, False)],
     "GOAWAY PROTOCOL_ERROR", (), ids=True)

# -- HTTP/1.1 JSON: syntax and depth --
case("json-truncated", "json", "http", post(INFER(), jbody()[:-7]),
     400, ("malformed JSON", "line 1"))
case("json-empty-body", "json", "http", post(INFER(), ""),
     400, "malformed JSON")
case("json-depth-33", "json-depth", "http", post(INFER(), "[" * 33 + "]" * 33),
     400, "JSON nested deeper than 32 levels")
case("json-depth-100k", "json-depth", "http", post(INFER(), "[" * 100000),
     400, "JSON nested deeper than 32 levels (at byte 32)")
case("json-depth-in-data", "json-depth", "http",
     post(INFER(), '{"inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":' +
          "[" * 40 + "1" + "]" * 40 + "}]}"),
     400, "JSON nested deeper than 32 levels")
case("json-depth-exactly-32", "json-depth", "http",
     post(INFER(), '{"inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":' +
          "[" * 29 + "1" + "]" * 29 + "}]}"),
     400, "inputs[0].data")
case("json-nan", "json", "http", post(INFER(), jbody().replace("1.0", "NaN", 1)),
     400, "malformed JSON")
case("json-infinity", "json", "http", post(INFER(), jbody().replace("1.0", "Infinity", 1)),
     400, "malformed JSON")
case("json-1e400", "json", "http", post(INFER(), jbody().replace("1.0", "1e400", 1)),
     400, ("malformed JSON", "overflow"))
case("json-1e39-fp32", "json", "http", post(INFER(), jbody().replace("1.0", "1e39", 1)),
     400, "inputs[0].data[0]: 1e+39 is out of range for FP32")
case("json-int-over-int64", "json", "http",
     post(INFER(), jbody([jinput(dt="INT64", data=[99999999999999999999] + [1] * 63)])),
     400, "malformed JSON")
case("json-int8-range", "json", "http",
     post(INFER(), jbody([jinput(dt="INT8", data=[300] + [1] * 63)])),
     400, "inputs[0].data[0]: 300 is out of range for INT8 [-128, 127]")
case("json-bad-utf8", "json", "http", post(INFER(), b'{"id": "\xff", "inputs": []}'),
     400, "malformed JSON")
case("json-nul-in-name", "json", "http",
     post(INFER(), jbody([jinput(name="x\u0000y")])),
     400, ("malformed JSON", "\\u0000 is not allowed"))
case("json-duplicate-key", "json", "http",
     post(INFER(), '{"inputs": [], "inputs": [%s]}' % json.dumps(jinput())),
     400, ("malformed JSON", "duplicate object key"))

# -- HTTP/1.1 JSON: shapes of the body --
case("json-not-object", "json", "http", post(INFER(), "[1, 2]"),
     400, "request: expected a JSON object, got an array")
case("json-inputs-missing", "json", "http", post(INFER(), '{"id": "1"}'),
     400, "inputs: missing")
case("json-inputs-object", "json", "http", post(INFER(), '{"inputs": {}}'),
     400, "inputs: expected a non-empty array of tensors, got an object")
case("json-inputs-empty", "json", "http", post(INFER(), '{"inputs": []}'),
     400, "got an empty array")
case("json-input-number", "json", "http", post(INFER(), '{"inputs": [5]}'),
     400, "inputs[0]: expected an object, got an integer")
case("json-name-missing", "names", "http",
     post(INFER(), json.dumps({"inputs": [{"shape": [1, 64], "datatype": "FP32",
                                           "data": [1] * 64}]})),
     400, "inputs[0].name: missing")
case("json-name-number", "names", "http", post(INFER(), jbody([jinput(name=42)])),
     400, "inputs[0].name: expected a non-empty string, got an integer")
case("json-name-unknown", "names", "http", post(INFER(), jbody([jinput(name="y")])),
     400, ("input 'y'", "has no such input; expected 'x'"))
case("json-name-duplicate", "names", "http", post(INFER(), jbody([jinput(), jinput()])),
     400, "input 'x': appears more than once in the request")
case("json-output-unknown", "names", "http", post(INFER(), jbody(outputs=[{"name": "nope"}])),
     400, ("output 'nope'", "expected 'probs'"))
case("json-output-name-missing", "names", "http", post(INFER(), jbody(outputs=[{}])),
     400, "outputs[0].name: missing")
case("json-outputs-object", "json", "http", post(INFER(), jbody(outputs={})),
     400, "outputs: expected an array, got an object")
case("json-id-number", "ids", "http", post(INFER(), jbody(id=5)),
     400, "id: expected a string, got an integer")
case("json-parameters-array", "json", "http", post(INFER(), jbody(parameters=[])),
     400, "parameters: expected an object, got an array")
case("json-parameter-null", "json", "http", post(INFER(), jbody(parameters={"p": None})),
     400, "parameters.p: expected a boolean, number or string, got null")

# -- HTTP/1.1 JSON: datatypes --
case("json-dtype-missing", "dtypes", "http",
     post(INFER(), json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "data": [1] * 64}]})),
     400, "inputs[0].datatype: missing")
case("json-dtype-unknown", "dtypes", "http", post(INFER(), jbody([jinput(dt="FLOAT32")])),
     400, ('unknown datatype "FLOAT32"', "expected BOOL, UINT8"))
case("json-dtype-number", "dtypes", "http", post(INFER(), jbody([jinput(dt=32)])),
     400, "inputs[0].datatype: expected a string, got an integer")
case("json-dtype-fp16", "dtypes", "http", post(INFER(), jbody([jinput(dt="FP16")])),
     400, "input 'x': datatype FP16, expected FP32")
case("json-dtype-bool", "dtypes", "http",
     post(INFER(), jbody([jinput(dt="BOOL", data=[True] * 64)])),
     400, "input 'x': datatype BOOL, expected FP32")
case("json-data-string-elem", "dtypes", "http",
     post(INFER(), jbody([jinput(data=[1.0] * 3 + ["4"] + [1.0] * 60)])),
     400, "inputs[0].data[3]: expected a number, got a string")
case("json-data-null-elem", "dtypes", "http", post(INFER(), jbody([jinput(data=[None] * 64)])),
     400, "inputs[0].data[0]: expected a number, got null")

# -- HTTP/1.1 JSON: shapes and data lengths --
case("json-shape-missing", "shapes", "http",
     post(INFER(), json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "data": [1] * 64}]})),
     400, "inputs[0].shape: missing")
case("json-shape-string", "shapes", "http", post(INFER(), jbody([jinput(shape="1,64")])),
     400, "inputs[0].shape: expected an array of non-negative integers, got a string")
case("json-shape-negative", "shapes", "http", post(INFER(), jbody([jinput(shape=[-1, 64])])),
     400, "inputs[0].shape[0]: expected a non-negative integer, got -1")
case("json-shape-real", "shapes", "http", post(INFER(), jbody([jinput(shape=[1.5, 64])])),
     400, "inputs[0].shape[0]: expected a non-negative integer, got a real number")
case("json-shape-overflow", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[1 << 62, 1 << 62])])),
     400, "inputs[0].shape: element count of [4611686018427387904,4611686018427387904] overflows")
case("json-shape-rank-17", "shapes", "http", post(INFER(), jbody([jinput(shape=[1] * 17)])),
     400, "inputs[0].shape: 17 dimensions, at most 16 are supported")
case("json-shape-rank-1", "shapes", "http", post(INFER(), jbody([jinput(shape=[64])])),
     400, "shape [64] has rank 1, expected rank 2")
case("json-shape-inner-dim", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[1, 63], data=[1.0] * 63)])),
     400, "dimension 1 must be 64")
case("json-data-missing", "lengths", "http",
     post(INFER(), json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32"}]})),
     400, "inputs[0].data: missing")
case("json-data-string", "lengths", "http", post(INFER(), jbody([jinput(data="1,2,3")])),
     400, "inputs[0].data: expected an array of 64 numbers for shape [1,64], got a string")
case("json-data-63", "lengths", "http", post(INFER(), jbody([jinput(data=[1.0] * 63)])),
     400, "inputs[0].data: expected 64 numbers for shape [1,64], got 63")
case("json-data-nested-short", "lengths", "http",
     post(INFER(), jbody([jinput(shape=[2, 64], data=[[1.0] * 64, [1.0] * 63])])),
     400, "inputs[0].data[1]: expected 64 elements for dimension 1 of shape [2,64], got 63")
case("json-data-mixed-nesting", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[2, 64], data=[[1.0] * 64] + [1.0] * 64)])),
     400, ("inputs[0].data: expected 2 elements for dimension 0 of shape [2,64], got 65",))
case("json-data-too-deep", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[1, 2], data=[[[1.0], [2.0]]])])),
     400, "inputs[0].data[0][0]: expected a number, got an array")
case("json-data-huge-shape", "shapes", "http",
     post(INFER(), jbody([jinput(shape=[1 << 40, 64], data=[1.0] * 64)])),
     400, "inputs[0].data: expected 70368744177664 numbers for shape [1099511627776,64], got 64")

# -- HTTP/1.1: models and versions --
case("http-model-nul", "models", "http", post(INFER("digits%00evil"), jbody()),
     400, "percent-encoded NUL byte")
case("http-model-unknown", "models", "http", post(INFER("nope"), jbody()),
     404, "model 'nope' is not in the repository")
case("http-version-absent", "models", "http", post("/v2/models/digits/versions/7/infer", jbody()),
     404, "model 'digits' has no ready version 7")
case("http-version-not-number", "models", "http",
     post("/v2/models/digits/versions/abc/infer", jbody()),
     404, "version 'abc' is not a positive integer")
case("http-model-bad-utf8", "models", "http", get("/v2/models/%FF%FE"),
     400, "not UTF-8")
case("http-infer-bad-utf8-model", "models", "http", post(INFER("%C3%28"), jbody()),
     400, "not UTF-8")

# -- HTTP/1.1: framing, methods, paths --
case("http-cl-short", "lengths", "http", post(INFER(), jbody(), cl=20),
     400, "malformed JSON")
case("http-cl-not-number", "lengths", "http", post(INFER(), jbody(), cl="12x"),
     400, "Content-Length: expected a decimal byte count", close=True)
case("http-cl-huge", "lengths", "http", post(INFER(), b"", cl=99999999999),
     413, "request body of 99999999999 bytes exceeds the limit of 16777216 bytes", close=True)
case("http-cl-twice", "lengths", "http",
     post(INFER(), jbody(), extra="Content-Length: 3\r\n"),
     400, "Content-Length given twice with different values", close=True)
# Chunked bodies are decoded (test_bodies.sh has the rest): this one reaches the JSON decoder.
case("http-chunked", "lengths", "http",
     b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2\r\n{}\r\n0\r\n\r\n",
     400, "invalid request: inputs: missing")
case("http-chunked-bad-size", "lengths", "http",
     b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"2x\r\n{}\r\n0\r\n\r\n",
     400, "chunked body: chunk size is not hexadecimal", close=True)
case("http-te-gzip", "lengths", "http",
     b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
     501, "Transfer-Encoding: only chunked is supported", close=True)
case("http-ce-unknown", "lengths", "http",
     post(INFER(), jbody(), extra="Content-Encoding: br\r\n"),
     415, "Content-Encoding 'br' is not supported")
case("http-ce-gzip-corrupt", "lengths", "http",
     post(INFER(), jbody(), extra="Content-Encoding: gzip\r\n"),
     400, "gzip request body is not valid gzip data")
case("http-cl-longer-eof", "lengths", "http", (post(INFER(), jbody(), cl=5000), "shut"),
     "closed", (), eof_only=True)
case("http-header-too-big", "lengths", "http", get("/v2", extra="X-Big: " + "a" * 20000 + "\r\n"),
     431, "request line and headers exceed the server's limit", close=True)
case("http-expect-unknown", "framing", "http",
     post(INFER(), jbody(), extra="Expect: 200-ok\r\n"),
     417, "Expect: only 100-continue is supported", close=True)
case("http-version-2", "framing", "http", get("/v2", version="HTTP/2.0"),
     505, "HTTP version not supported", close=True)
case("http-get-infer", "methods", "http", get(INFER()),
     405, "method not allowed here; use POST")
case("http-delete", "methods", "http", get(INFER(), method="DELETE"),
     501, "method not implemented; use GET, HEAD or POST")
case("http-unknown-path", "methods", "http", post("/v2/models/digits/predict", jbody()),
     404, "no endpoint /v2/models/digits/predict")
case("http-path-10k", "names", "http", post(INFER("m" * 10000), jbody()),
     404, "path too long")
case("http-garbage-line", "framing", "http", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\r\n\r\n",
     400, "malformed request line", close=True)


# ---- running ----


class Ctx:
    def __init__(self, args):
        self.args = args
        self.framed = None
        self._channel = None
        self.next_id = 1 << 40  # ids of the liveness probes on the shared connection

    def channel(self, port):
        if self._channel is None:
            self._channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        return self._channel

    def shared(self):
        if self.framed is None:
            self.framed = Framed(self.args.native_port)
        return self.framed

    def probe_id(self):
        self.next_id += 1
        return self.next_id


CTX = None


def check_msg(c, code, msg):
    """'' when (code, msg) is what case c wants, else what is wrong."""
    if str(code) != str(c["want"]):
        return "expected %s got %s (%s)" % (c["want"], code, msg[:300])
    missing = [m for m in c["msg"] if m not in msg]
    if missing:
        return "expected %s with %r in the message, got %r" % (c["want"], missing[0], msg[:400])
    wrong = [m for m in c.get("absent", ()) if m in msg]
    if wrong:
        return "expected %s without %r in the message, got %r" % (c["want"], wrong[0], msg[:400])
    return ""


def run_framed(c):
    a = CTX.args
    if c.get("fatal") or c.get("eof_only"):
        f = Framed(a.native_port)
        try:
            f.send(c["send"])
            if c.get("eof_only"):
                f.s.shutdown(socket.SHUT_WR)
                try:
                    r = f.recv()
                    return "closed", "", "expected the connection closed with no answer, " \
                        "got %r" % (r,)
                except Closed:
                    return "closed", "", ""
            if c.get("skip_first"):
                r = f.recv()
                if r[0] != c["skip_first"] or r[1] != "OK":
                    return r[1], r[2], "the valid frame before the bad one got %r" % (r[:3],)
            r = f.recv()
            if r[0] != 0:
                return r[1], r[2], "a fatal frame error must be answered with id 0, " \
                    "got id %d" % r[0]
            if not f.closed_soon():
                return r[1], r[2], "the connection stayed open after a fatal frame error"
            return r[1], r[2], ""
        finally:
            f.close()
    f = CTX.shared()
    f.send(c["send"])
    if c.get("burst"):
        rs = sorted((f.recv() for _ in c["burst"]), key=lambda r: r[0])
        if [r[0] for r in rs] != sorted(c["burst"]):
            return rs[0][1], rs[0][2], "expected answers for ids %s, got %s" % (
                c["burst"], [r[0] for r in rs])
        bad = [r for r in rs if check_msg(c, r[1], r[2])]
        r = bad[0] if bad else rs[0]
    elif c.get("dup"):
        rs = [f.recv_id(c["dup"]), f.recv_id(c["dup"])]
        codes = sorted(r[1] for r in rs)
        if codes != ["INVALID_ARGUMENT", "OK"]:
            return codes, "", "expected one OK and one INVALID_ARGUMENT for id %d, got %s" % (
                c["dup"], [r[:3] for r in rs])
        r = [x for x in rs if x[1] != "OK"][0]
    else:
        r = f.recv_id(c["rid"])
    extra = ""
    if not r[4]:
        extra = "ResponseEnvelope.message is not valid UTF-8: %r" % r[2][:120]
    # the same connection must go on serving
    pid = CTX.probe_id()
    f.send(frame(envelope(pid, SERVER_LIVE)))
    p = f.recv_id(pid)
    if p[1] != "OK":
        extra = extra or "ServerLive on the same connection afterwards: %r" % (p[:3],)
    return r[1], r[2], extra


def run_grpc(c):
    if grpc is None:
        return None, "", "skip: python3-grpcio missing"
    path, data = c["send"][:2]
    code, msg = grpc_call(CTX.args.native_port, path, data,
                          metadata=c["send"][2] if len(c["send"]) > 2 else None)
    return code, msg, ""


def run_h2(c):
    if h2 is None:
        return None, "", "skip: python3-h2 missing"
    if c.get("ids"):
        code, detail = h2_stream_ids(CTX.args.native_port, c["send"])
        return code, detail, ""
    headers, data = c["send"]
    status, code, msg, reset = h2_call(CTX.args.native_port, headers, data)
    extra = ""
    if reset is not None:
        extra = "stream reset (%s) instead of a gRPC status" % reset
    elif c.get("http") and status != c["http"]:
        extra = "HTTP :status %s, expected %s" % (status, c["http"])
    return code, msg, extra


def run_http(c):
    data = c["send"]
    shut = False
    if isinstance(data, tuple):
        data, shut = data[0], True
    if c.get("eof_only"):
        try:
            st, _, body = http_raw(CTX.args.http_port, data, shut=True)
            return st, "", "expected the connection closed with no answer, got %d %r" % (st, body)
        except Closed:
            return "closed", "", ""
    st, hdrs, body = http_raw(CTX.args.http_port, data, shut=shut)
    try:
        msg = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return st, body.decode("latin-1")[:200], "body is not {\"error\": ...}: %r" % body[:200]
    extra = ""
    if c.get("close") and hdrs.get("connection", "").lower() != "close":
        extra = "a framing error must close the connection (Connection: close), got %r" % hdrs
    return st, msg, extra


RUNNERS = {"framed": run_framed, "grpc": run_grpc, "h2": run_h2, "http": run_http}


def health():
    """'' when both ports answer health and the PID is alive, else what failed."""
    a = CTX.args
    try:
        os.kill(a.pid, 0)
    except OSError:
        return "tpud (pid %d) is gone" % a.pid
    try:
        st, _, body = http_raw(a.http_port, get("/v2/health/ready"))
        if st != 200:
            return "HTTP /v2/health/ready: %d %r" % (st, body)
        f = Framed(a.native_port)
        try:
            f.send(frame(envelope(1, SERVER_READY)))
            r = f.recv()
            if r[1] != "OK" or parse_pb(r[3]).get(1) != [1]:
                return "native ServerReady: %r" % (r[:3],)
        finally:
            f.close()
    except (OSError, Closed) as e:
        return "health check failed: %s" % e
    return ""


def main():
    global CTX
    ap = argparse.ArgumentParser()
    ap.add_argument("--native-port", type=int, required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--only", default="", help="comma-separated case ids")
    ap.add_argument("--show", action="store_true", help="print every answer's message")
    a = ap.parse_args()
    CTX = Ctx(a)
    strict = os.environ.get("CATALOGUE_STRICT") == "1"
    only = set(x for x in a.only.split(",") if x)
    ids = [c["id"] for c in CASES]
    dups = set(i for i in ids if ids.count(i) > 1)
    if dups:
        print("FAIL: duplicate case ids %s" % sorted(dups))
        return 1
    counts, fails, bugs, skips = {}, [], [], []
    t0 = time.time()
    for c in CASES:
        if only and c["id"] not in only:
            continue
        try:
            code, msg, extra = RUNNERS[c["proto"]](c)
        except (OSError, Closed, ValueError, IndexError) as e:
            code, msg, extra = None, "", "%s: %s" % (type(e).__name__, e)
        if extra.startswith("skip:"):
            skips.append(c["id"])
            print("skip: %s (%s)" % (c["id"], extra[6:]))
            continue
        key_ = (c["proto"], c["cat"])
        counts[key_] = counts.get(key_, 0) + 1
        err = check_msg(c, code, msg) or extra
        h = health()
        if h:
            err = (err + "; " if err else "") + "after the case: " + h
        shown = (" -> %s" % msg[:160]) if a.show else ""
        if not err:
            note = "  (marked as a known bug but passes now: drop the mark)" if c.get("bug") else ""
            print("ok: %s [%s %s] %s%s%s" % (c["id"], c["proto"], c["cat"], c["want"], shown, note))
        elif c.get("bug") and not h and not strict:
            bugs.append(c["id"])
            print("KNOWN BUG: %s [%s %s] %s -- %s" % (c["id"], c["proto"], c["cat"], err, c["bug"]))
        else:
            fails.append(c["id"])
            print("FAIL: %s [%s %s] %s" % (c["id"], c["proto"], c["cat"], err))
        if h and "is gone" in h:
            break
    if CTX.framed:
        CTX.framed.close()
    n = sum(counts.values())
    print("per protocol: " + ", ".join(
        "%s %d" % (p, sum(v for (pp, _), v in counts.items() if pp == p))
        for p in ("framed", "grpc", "h2", "http")))
    cats = {}
    for (_, cat), v in counts.items():
        cats[cat] = cats.get(cat, 0) + v
    print("per category: " + ", ".join("%s %d" % kv for kv in sorted(cats.items())))
    print("catalogue: %d cases, %d ok, %d failed, %d known bugs, %d skipped, %.1f s" % (
        n, n - len(fails) - len(bugs), len(fails), len(bugs), len(skips), time.time() - t0))
    if fails:
        print("failed: " + " ".join(fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

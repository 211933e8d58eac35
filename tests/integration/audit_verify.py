#!/usr/bin/python3
"""Independent check of a tpud audit log (the canonical-bytes rule of server/audit.h).

usage: audit_verify.py [--key FILE] [--head FILE] LOG...   (oldest file first)
Exit 0 and "OK <records> <last seq> <last hash>", or 1 and the first fault. Torn tails vouched
for by a "recovered" record are accepted; anything else that is not a record is a fault.
"""
import hashlib, hmac, json, sys

def main(argv):
    key = head = None
    while argv and argv[0] in ("--key", "--head"):
        if argv[0] == "--key":
            key = open(argv[1], "rb").read().rstrip(b"\r\n")
        else:
            head = json.load(open(argv[1]))
        argv = argv[2:]
    mac = lambda b: (hmac.new(key, b, hashlib.sha256) if key else hashlib.sha256(b)).hexdigest()
    last_seq, last_hash, count, torn = None, "0" * 64, 0, []
    for path in argv:
        data = open(path, "rb").read()
        if data and not data.endswith(b"\n"):
            return f"TORN {path}: last line has no newline"
        for no, line in enumerate(data.split(b"\n")[:-1], 1):
            cut = line.rfind(b',"hash":"')
            rec = None
            try:
                rec = json.loads(line)
            except ValueError:
                pass
            if cut < 0 or not isinstance(rec, dict) or line != line[:cut] + b',"hash":"' + \
                    rec.get("hash", "").encode() + b'"}':
                torn.append(line)  # must be vouched for by the next record
                continue
            if mac(line[:cut] + b"}") != rec["hash"]:
                return f"FAULT {path}:{no}: hash mismatch (seq {rec.get('seq')})"
            if torn:
                blob = b"\n".join(torn)
                want = f"torn tail: {len(blob)} bytes, sha256 {hashlib.sha256(blob).hexdigest()}"
                if rec["kind"] != "recovered" or rec["message"] != want:
                    return f"FAULT {path}:{no - len(torn)}: not a record"
                torn = []
            first_ok = rec["seq"] == 1 or rec["kind"] == "rotate"
            if (last_seq is None and not first_ok) or \
                    (last_seq is not None and rec["seq"] != last_seq + 1) or \
                    (rec["seq"] == 1 and rec["prev"] != "0" * 64) or \
                    (last_seq is not None and rec["prev"] != last_hash):
                return f"FAULT {path}:{no}: seq {rec['seq']} does not follow seq {last_seq}"
            if head and rec["seq"] == head["seq"] and rec["hash"] != head["hash"]:
                return f"FAULT {path}:{no}: seq {rec['seq']} differs from the head file"
            last_seq, last_hash, count = rec["seq"], rec["hash"], count + 1
        if torn:
            return f"FAULT {path}: lines that are not records at the end"
    if head and (last_seq or 0) < head["seq"]:
        return f"FAULT: log ends at seq {last_seq}, head file says {head['seq']}"
    print(f"OK {count} {last_seq} {last_hash}")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

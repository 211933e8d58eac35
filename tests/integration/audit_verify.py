#!/usr/bin/python3
"""Independent check of a tpud audit log (the canonical-bytes rule of server/audit.h).

usage: audit_verify.py [--key FILE] [--head FILE] [--partial] LOG...   (oldest file first)
Exit 0 and "OK <records> <last seq> <last hash>", or 1 and the first fault. Torn tails vouched
for by a "recovered" record are accepted; anything else that is not a record is a fault. The
log must start at seq 1 (with --partial: a rotate or gap record may come first). The one break
of the chain accepted is a "gap" record, seq B+1, message "seq A..B are not in the log: ...",
right after seq A-1; it and every "lost" and "rollback" record is printed to stderr as WARNING.
"""
import hashlib, hmac, json, re, sys

GAP = re.compile(r"seq ([1-9][0-9]*)\.\.([1-9][0-9]*) are not in the log: ")

def main(argv):
    key = head = None
    partial = False
    while argv and argv[0] in ("--key", "--head", "--partial"):
        if argv[0] == "--partial":
            partial, argv = True, argv[1:]
            continue
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
            seq, m = rec["seq"], GAP.match(rec["message"])
            gap = rec["kind"] == "gap" and m and int(m[2]) + 1 == seq and int(m[1]) <= int(m[2])
            gap_from = int(m[1]) if gap else None
            if seq == 1 and rec["prev"] != "0" * 64 or seq != 1 and rec["prev"] == "0" * 64:
                return f"FAULT {path}:{no}: seq {seq}: wrong prev for its seq"
            if last_seq is None:
                if seq != 1 and not (gap and gap_from == 1) and \
                        not (partial and (gap or rec["kind"] == "rotate")):
                    return f"FAULT {path}:{no}: the log starts at seq {seq}, not seq 1"
            elif seq == last_seq + 1:
                if rec["prev"] != last_hash:
                    return f"FAULT {path}:{no}: seq {seq}: prev is not the hash of seq {last_seq}"
            elif not (gap and seq > last_seq + 1 and gap_from <= last_seq + 1):
                return f"FAULT {path}:{no}: seq {seq} does not follow seq {last_seq}"
            if head and seq == head["seq"] and rec["hash"] != head["hash"]:
                return f"FAULT {path}:{no}: seq {seq} differs from the head file"
            if rec["kind"] in ("gap", "lost", "rollback"):
                print(f"WARNING {path}:{no}: {rec['kind']}: {rec['message']}", file=sys.stderr)
            last_seq, last_hash, count = seq, rec["hash"], count + 1
        if torn:
            return f"FAULT {path}: lines that are not records at the end"
    if head and (last_seq or 0) < head["seq"]:
        return f"FAULT: log ends at seq {last_seq}, head file says {head['seq']}"
    print(f"OK {count} {last_seq} {last_hash}")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

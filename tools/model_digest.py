#!/usr/bin/python3
"""Recompute the SHA-256 digests a model.json names, so nobody edits them by hand.

For each VERSION_DIR, reads model.json, hashes the file "checkpoint.file" names (and
"reference.file", "calibration.file" and each "labels.OUTPUT.file" when given) and writes the
digests into the "sha256" beside each. For an ONNX model, also the digest of each external data file in
"checkpoint.external" (file -> sha256), adding the files the .onnx names that the list lacks
when python3-onnx is installed (tpud refuses external data without a digest there). Only the digest strings change: every other byte of model.json (key order,
layout, spacing) stays as it was. With --check nothing is written; each stale digest is reported
with the file it belongs to, and the exit status is 1 when any is.

    /usr/bin/python3 tools/model_digest.py models/digits/1 tests/data/onnx/*/1
    /usr/bin/python3 tools/model_digest.py --check models/*/*

Needs only the Python standard library.
"""

import argparse
import hashlib
import json
import os
import sys

# The objects of model.json whose "file" is hashed into their "sha256".
SECTIONS = ("checkpoint", "reference", "calibration")


class _Scanner:
    """Just enough of a JSON parser to find where each value of a top-level object's member
    lies in the text: spans[(key, member)] = (start, end) of that member's value."""

    def __init__(self, text):
        self.s, self.i, self.spans = text, 0, {}

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self, path):
        self.ws()
        start = self.i
        c = self.s[self.i:self.i + 1]
        if c == "{":
            self.i += 1
            self.ws()
            if self.s[self.i:self.i + 1] == "}":
                self.i += 1
            else:
                while True:
                    self.ws()
                    kstart = self.i
                    key = json.loads(self.s[kstart:self.string_end()])
                    self.ws()
                    self.expect(":")
                    self.value(path + (key,))
                    self.ws()
                    if self.s[self.i:self.i + 1] == ",":
                        self.i += 1
                        continue
                    self.expect("}")
                    break
        elif c == "[":
            self.i += 1
            self.ws()
            if self.s[self.i:self.i + 1] == "]":
                self.i += 1
            else:
                while True:
                    self.value(path + (None,))
                    self.ws()
                    if self.s[self.i:self.i + 1] == ",":
                        self.i += 1
                        continue
                    self.expect("]")
                    break
        elif c == '"':
            self.string_end()
        else:
            while self.i < len(self.s) and self.s[self.i] not in ",]} \t\r\n":
                self.i += 1
            if self.i == start:
                raise ValueError(f"unexpected {c!r} at offset {start}")
        if len(path) == 2 or (len(path) == 3 and (path[:2] == ("checkpoint", "external") or
                                                  path[0] == "labels")):
            self.spans[path] = (start, self.i)

    def string_end(self):
        """Moves past the string at self.i and returns the offset just after it."""
        if self.s[self.i:self.i + 1] != '"':
            raise ValueError(f"expected a string at offset {self.i}")
        j = self.i + 1
        while j < len(self.s) and self.s[j] != '"':
            j += 2 if self.s[j] == "\\" else 1
        if j >= len(self.s):
            raise ValueError("unterminated string")
        self.i = j + 1
        return self.i

    def expect(self, c):
        if self.s[self.i:self.i + 1] != c:
            raise ValueError(f"expected {c!r} at offset {self.i}")
        self.i += 1


def sha256_file(path):
    """The file's SHA-256; for a directory (an ONNX test_data_set_N/ reference), that of its
    input_K.pb then output_K.pb files, each as its size (8 bytes little-endian) and its bytes,
    as tpud computes it."""
    h = hashlib.sha256()
    if os.path.isdir(path):
        for kind in ("input", "output"):
            k = 0
            while os.path.exists(os.path.join(path, f"{kind}_{k}.pb")):
                with open(os.path.join(path, f"{kind}_{k}.pb"), "rb") as f:
                    b = f.read()
                h.update(len(b).to_bytes(8, "little") + b)
                k += 1
        return h.hexdigest()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def onnx_external_locations(onnx_path):
    """The external data files an .onnx file names, when python3-onnx is there (else None)."""
    try:
        import onnx  # only for listing the files; digests need nothing but hashlib
    except ImportError:
        return None
    if not hasattr(onnx, "load"):
        # Only a namespace package: libonnx-testdata installs its data under
        # dist-packages/onnx/backend/ without python3-onnx.
        return None
    m = onnx.load(onnx_path, load_external_data=False)
    locs = []
    for t in m.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location" and e.value not in locs:
                    locs.append(e.value)
    return locs


def external_digests(version_dir, path, config, scanner, check):
    """checkpoint.external of an ONNX model: each listed file's digest recomputed, and (with
    python3-onnx) the files the .onnx names but the list lacks added. Returns (problems, edits)."""
    ck = config.get("checkpoint")
    if config.get("format") != "onnx" or not isinstance(ck, dict):
        return [], []
    ext = ck.get("external", {})
    if not isinstance(ext, dict):
        return [f"{path}: checkpoint.external must be an object"], []
    problems, edits, add = [], [], []
    onnx_file = os.path.join(version_dir, ck.get("file", "model.onnx"))
    locs = onnx_external_locations(onnx_file) if os.path.exists(onnx_file) else None
    for loc in locs or []:
        if loc not in ext:
            add.append(loc)
    for name in list(ext) + add:
        fp = os.path.join(version_dir, name)
        try:
            actual = sha256_file(fp)
        except OSError as e:
            problems.append(f"{fp}: cannot read ({e.strerror})")
            continue
        if ext.get(name) == actual:
            continue
        if check and name not in ext:
            problems.append(f"{fp}: {onnx_file} reads it, but {path} has no digest for it in "
                            "checkpoint.external")
            continue
        if check:
            problems.append(f"{fp}: sha256 is {actual}, {path} says checkpoint.external"
                            f"[{name!r}] {ext.get(name)!r}")
            continue
        print(f"{path}: checkpoint.external[{name!r}] {actual}")
        if name in ext:
            s0, s1 = scanner.spans[("checkpoint", "external", name)]
            edits.append((s0, s1, json.dumps(actual)))
    if add and not check and not problems:
        entries = ", ".join(f"{json.dumps(n)}: {json.dumps(sha256_file(os.path.join(version_dir, n)))}"
                            for n in add)
        span = scanner.spans.get(("checkpoint", "external"))
        if span is not None:  # insert before the object's closing brace
            inner = scanner.s[span[0] + 1:span[1] - 1].strip()
            edits.append((span[1] - 1, span[1] - 1, (", " if inner else "") + entries))
        else:
            anchor = scanner.spans.get(("checkpoint", "sha256")) or scanner.spans[("checkpoint", "file")]
            edits.append((anchor[1], anchor[1], f', "external": {{{entries}}}'))
    return problems, edits


def digest_version(version_dir, check=False):
    """Recomputes the digests of one version directory. Returns a list of problems (strings);
    in check mode a stale digest is a problem, otherwise it is rewritten."""
    path = os.path.join(version_dir, "model.json")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    config = json.loads(text)  # the real parser decides validity; the scanner only locates
    if not isinstance(config, dict):
        return [f"{path}: expected a JSON object"]
    scanner = _Scanner(text)
    scanner.value(())
    problems, edits = [], []
    # (what the messages call it, its object, the scanner's path to it)
    objects = [(section, config.get(section), (section,)) for section in SECTIONS]
    labels = config.get("labels")
    if isinstance(labels, dict):
        objects += [(f"labels.{out}", obj, ("labels", out)) for out, obj in labels.items()]
    for section, obj, at in objects:
        if obj is None:
            if section == "checkpoint":
                problems.append(f"{path}: no \"checkpoint\" object")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("file"), str):
            problems.append(f"{path}: \"{section}\" needs a \"file\" string")
            continue
        file_path = os.path.join(version_dir, obj["file"])
        try:
            actual = sha256_file(file_path)
        except OSError as e:
            problems.append(f"{file_path}: cannot read ({e.strerror})")
            continue
        if obj.get("sha256") == actual:
            continue
        if check:
            problems.append(f"{file_path}: sha256 is {actual}, {path} says {section}.sha256 "
                            f"{obj.get('sha256')!r}")
            continue
        span = scanner.spans.get(at + ("sha256",))
        if span is None:
            # No digest yet: add one after "file", keeping the object's own separator.
            fstart, fend = scanner.spans[at + ("file",)]
            edits.append((fend, fend, f', "sha256": "{actual}"'))
        else:
            edits.append((span[0], span[1], json.dumps(actual)))
        print(f"{path}: {section}.sha256 {actual} ({obj['file']})")
    ext_problems, ext_edits = external_digests(version_dir, path, config, scanner, check)
    problems += ext_problems
    edits += ext_edits
    if edits and not problems:
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        check_config = json.loads(text)
        for section in SECTIONS:
            assert section not in config or check_config[section]["sha256"] == sha256_file(
                os.path.join(version_dir, config[section]["file"]))
        for out, obj in (check_config.get("labels") or {}).items():
            assert obj["sha256"] == sha256_file(os.path.join(version_dir, obj["file"]))
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Recompute checkpoint.sha256 (and reference.sha256) in each VERSION_DIR's "
                    "model.json from the files they name; only the digests change.")
    p.add_argument("version_dirs", nargs="+", metavar="VERSION_DIR",
                   help="a model version directory holding model.json")
    p.add_argument("--check", action="store_true",
                   help="only verify: name each file whose digest differs and exit 1")
    args = p.parse_args(argv)
    failed = False
    for d in args.version_dirs:
        try:
            problems = digest_version(d, check=args.check)
        except (OSError, ValueError) as e:
            problems = [f"{os.path.join(d, 'model.json')}: {e}"]
        for msg in problems:
            print(f"model_digest: {msg}", file=sys.stderr)
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

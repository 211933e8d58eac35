#!/bin/bash
# test_limits.sh - tpud's process-wide limits (issue #15 items 1, 2, 8) against the real binary:
# --max-connections fitted under RLIMIT_NOFILE, accept() errors backing off instead of spinning,
# and the --max-buffered-bytes budget for answers clients do not take. The cases live in
# limits.py, which starts its own tpud for each. $1 = build directory, $2 = source directory.
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import h2, hpack, hyperframe' 2>/dev/null ||
  { echo "python3-h2 missing (deploy/deps.sh installs it)"; exit 1; }
command -v prlimit >/dev/null || { echo "prlimit missing (util-linux)"; exit 1; }
$PY "$2/tests/integration/limits.py" "$1" "$2" && echo "test_limits: all passed"

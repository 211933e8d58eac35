#!/bin/bash
# test_conn.sh - the native port's connection handling against the real tpud (conn_edges.py,
# which starts and stops its own tpud). $1 = build directory, $2 = source directory.
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import h2' 2>/dev/null || { echo "python3-h2 missing (deploy/deps.sh installs it)"; exit 1; }
$PY "$2/tests/integration/conn_edges.py" "$1" "$2" && echo "test_conn: ok"

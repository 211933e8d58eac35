#!/bin/bash
# test_layers.sh - the server's modules call only the modules below them (server/LAYERS), and no
# files call each other in a circle: read from the built object files' symbols (nm).
# usage: test_layers.sh BUILD_DIR SRC_DIR
set -euo pipefail
BUILD=${1:?build dir}
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
exec /usr/bin/python3 "$SRC/tests/integration/layers.py" "$SRC" "$BUILD"

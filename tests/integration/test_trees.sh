#!/bin/bash
# test_trees.sh - tree ensembles served by the real tpud, checked against the libraries' own
# predictions stored with the fixtures: XGBoost JSON models ("format": "xgboost",
# tests/data/xgboost/*/1/, written by models/export_xgboost_examples.py) and scikit-learn
# forests and gradient boosting exported to ONNX TreeEnsembleClassifier / Regressor ("format":
# "onnx", tests/data/sklearn/*/1/, models/export_sklearn_trees.py). The assertions on outputs
# live in trees_serving.py (numpy and grpcio only):
#   1. the ten fixtures load with the reference check passed (the library's outputs on 1000
#      rows, NaN and ±Inf among them where the model takes them); beside them, malformed models
#      are refused with a message naming the tree and node (the file and the field) while the
#      good ones serve: XGBoost JSON broken, a child id out of range, a cycle, a tree with no
#      nodes, a feature beyond num_feature, model.json pinning a wrong input width; ONNX a child
#      its tree lacks, a cycle, a tree with no leaves, feature 40 of 10, a weight on a branch,
#      a truncated file. model.json pinning the input's name works.
#   2. every reference row over HTTP (JSON), gRPC (raw, typed) and the framed protocol
#      (tpuctl): probabilities within 1e-6, margins and predictions within 1e-5, labels equal
#      (`serve`); 10,000 fresh rows per model against the library itself (`fresh`: XGBoost with
#      python3-xgboost installed, scikit-learn with python3-sklearn and python3-onnx).
#   3. with python3-xgboost: larger boosters trained here (depth 3 x 50 trees binary with NaN,
#      depth 6 x 100 rounds of 3-class softprob = 300 trees, depth 10 x 500 trees regression),
#      10,000 fresh rows each against inplace_predict, every bucket's strategy as tpud chose it.
#   4. a second tpud with TPUD_TREE_STRATEGY=gemm (the path products on the engine's INT8
#      plans): every fixture's reference rows over every protocol again, and /v2/debug/models
#      saying each bucket runs it.
# $1 = build directory, $2 = source directory.
set -u
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # tpud_ports, grpc_stubs
TPUD=$BUILD/server/tpud
TPUCTL=$BUILD/client/tpuctl
HELPER=$SRC/tests/integration/trees_serving.py
DATA=$SRC/tests/data/xgboost
SKDATA=$SRC/tests/data/sklearn
for b in "$TPUD" "$TPUCTL"; do [ -x "$b" ] || { echo "$b not built"; exit 1; }; done
for c in protoc grpc_python_plugin; do
  command -v $c >/dev/null || { echo "$c missing (deploy/deps.sh installs it)"; exit 1; }
done
PY=/usr/bin/python3
[ -x $PY ] || PY=python3
$PY -c 'import grpc, google.protobuf, numpy' 2>/dev/null ||
  { echo "python3-grpcio, -protobuf or -numpy missing (deploy/deps.sh installs them)"; exit 1; }

WORK=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
FAIL=0
fail() { echo "FAIL: $*"; FAIL=1; }
ok() { echo "ok: $*"; }
stop_tpud() { # NAME: SIGTERM must end the running tpud cleanly, its log free of crashes
  kill -TERM "$PID" 2>/dev/null
  wait "$PID"
  local rc=$?
  PID=
  [ $rc = 0 ] || fail "$1 exited $rc after SIGTERM: $(tail -5 "$LOG")"
  grep -E "AddressSanitizer|runtime error|Segmentation|assert" "$LOG" && fail "$1 log: see above"
}
T0=$SECONDS

GEN=$WORK/gen
mkdir -p "$GEN"
grpc_stubs "$SRC" "$GEN" grpc_service.proto || exit 1

# ---- the repository: the fixtures, malformed variants of fraud_d6, a pinned input name ----
REPO=$WORK/repo
mkdir -p "$REPO"
for d in "$DATA"/*/ "$SKDATA"/*/; do [ "$(basename "$d")" = malformed ] || cp -r "$d" "$REPO/"; done
for f in "$SKDATA"/malformed/*.onnx; do # each broken ONNX file as a model of its own
  m=onnx_$(basename "$f" .onnx)
  mkdir -p "$REPO/$m/1"
  cp "$f" "$REPO/$m/1/model.onnx"
  printf '{"format": "onnx", "checkpoint": {"file": "model.onnx", "sha256": "%s"}}\n' \
    "$(sha256sum "$f" | cut -d' ' -f1)" > "$REPO/$m/1/model.json"
done
$PY - "$DATA/fraud_d6/1" "$REPO" <<'EOF' || { echo "FAIL: could not write the variants"; exit 1; }
import hashlib, json, os, sys
src, repo = sys.argv[1], sys.argv[2]
text = open(os.path.join(src, "xgboost.json")).read()

def variant(name, body, inputs=None, reference=False):
    d = os.path.join(repo, name, "1")
    os.makedirs(d)
    raw = body.encode()
    open(os.path.join(d, "xgboost.json"), "wb").write(raw)
    cfg = {"format": "xgboost",
           "checkpoint": {"file": "xgboost.json", "sha256": hashlib.sha256(raw).hexdigest()},
           "batching": {"max_batch_size": 8, "buckets": [1, 8]}}
    if inputs:
        cfg["inputs"] = inputs
    open(os.path.join(d, "model.json"), "w").write(json.dumps(cfg))

def edit(fn):
    j = json.loads(text)
    fn(j["learner"]["gradient_booster"]["model"]["trees"])
    return json.dumps(j)

def no_nodes(t):
    for k in ("left_children", "right_children", "split_indices", "split_conditions",
              "default_left"):
        t[3][k] = []

variant("bad_json", text[: len(text) // 2])
variant("bad_child", edit(lambda t: t[2]["left_children"].__setitem__(1, 999)))
variant("bad_cycle", edit(lambda t: t[1]["right_children"].__setitem__(1, 0)))
variant("bad_noleaf", edit(no_nodes))
variant("bad_feature", edit(lambda t: t[5]["split_indices"].__setitem__(0, 40)))
variant("bad_width", text, inputs=[{"name": "input", "datatype": "FP32", "shape": [-1, 13]}])
variant("named", text, inputs=[{"name": "features", "datatype": "FP32", "shape": [-1, 12]}])
EOF

BIG=
if $PY -c 'import xgboost' 2>/dev/null; then
  BIG=big_d3_t50,big_d6_t300,big_d10_t500
  $PY - "$REPO" <<'EOF' || { echo "FAIL: could not train the larger boosters"; exit 1; }
import hashlib, json, os, sys
import numpy as np
import xgboost as xgb
repo = sys.argv[1]
rng = np.random.default_rng(77)
x = (rng.normal(size=(4000, 16)) * np.linspace(0.5, 3, 16)).astype(np.float32)
z = np.nan_to_num(x)
x[rng.random(size=x.shape) < 0.1] = np.nan
s = 1.3 * z[:, 0] - 0.8 * z[:, 1] + 0.5 * z[:, 2] * z[:, 3] + rng.normal(size=len(z)) * 0.7
for name, params, y, rounds in [
        ("big_d3_t50", {"objective": "binary:logistic", "max_depth": 3, "base_score": 0.1},
         (s > np.quantile(s, 0.9)).astype(np.float32), 50),
        ("big_d6_t300", {"objective": "multi:softprob", "num_class": 3, "max_depth": 6},
         np.digitize(s, np.quantile(s, [0.5, 0.9])).astype(np.float32), 100),
        ("big_d10_t500", {"objective": "reg:squarederror", "max_depth": 10}, s.astype(np.float32),
         500)]:
    b = xgb.train(dict(params, eta=0.1, nthread=2, seed=5), xgb.DMatrix(x, label=y), rounds)
    d = os.path.join(repo, name, "1")
    os.makedirs(d)
    b.save_model(os.path.join(d, "xgboost.json"))
    sha = hashlib.sha256(open(os.path.join(d, "xgboost.json"), "rb").read()).hexdigest()
    json.dump({"format": "xgboost", "checkpoint": {"file": "xgboost.json", "sha256": sha},
               "batching": {"max_batch_size": 64, "buckets": [1, 8, 64]}},
              open(os.path.join(d, "model.json"), "w"))
EOF
  ok "trained $BIG with python3-xgboost ($((SECONDS - T0)) s)"
fi

LOG=$WORK/tpud.log
"$TPUD" --models "$REPO" --port 0 --http-port 0 --poll-seconds 0 2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1

echo "-- 1. loading: the fixtures with the reference check, the malformed models refused"
n=$(grep -c "ready in .*(xgboost.*reference check passed: 1000 rows" "$LOG")
[ "$n" = 4 ] && ok "log: four xgboost fixtures ready with 'reference check passed: 1000 rows'" ||
  fail "log: $n ready lines: $(grep -E "ready|failed" "$LOG")"
n=$(grep -c "ready in .*(onnx.*reference check passed: 1000 rows" "$LOG")
[ "$n" = 6 ] && ok "log: six scikit-learn ONNX fixtures ready with the reference check passed" ||
  fail "log: $n onnx ready lines: $(grep -E "ready|failed" "$LOG")"
expect_refusal() { # MODEL PATTERN
  local line
  line=$(grep "model '$1' version 1: load failed" "$LOG")
  if [ -n "$line" ] && echo "$line" | grep -q -- "$2"; then
    ok "$1 refused: ${line#*load failed: }"
  else
    fail "$1: expected a load failure matching '$2', log: ${line:-$(grep "'$1'" "$LOG")}"
  fi
}
expect_refusal bad_json "not valid JSON: .*(line 1, column"
expect_refusal bad_child "tree 2 node 1: left child 999 is out of range \[0, "
expect_refusal bad_cycle "tree 1 node 1: right child 0 is reached twice (a cycle"
expect_refusal bad_noleaf "tree 3: has no nodes, so no leaf"
expect_refusal bad_feature "tree 5 node 0: splits on feature 40, beyond the model's 12 input"
expect_refusal bad_width \
  "model.json inputs\[0\] 'input' is FP32 \[-1,13\]; the graph says FP32 \[-1,12\]"
expect_refusal onnx_bad_child "tree 2 node [0-9]*: true branch names node 99, which tree 2 does not"
expect_refusal onnx_bad_cycle "tree 1 node [0-9]*: true branch goes to tree 1 node 0, which is alr"
expect_refusal onnx_bad_noleaf "tree 3 has no leaves (all its [0-9]* nodes are branches)"
expect_refusal onnx_bad_feature "tree 1 node 0: feature 40 is outside the input's 10 columns"
expect_refusal onnx_bad_weight "weight 0 names tree 0 node 0, which is a branch, not a leaf"
expect_refusal onnx_truncated "model.onnx"
grep -q "model 'named' version 1: ready in .*input 'features' FP32 \[-1,12\]" "$LOG" &&
  ok "named: model.json's input name pinned ('features')" ||
  fail "named: $(grep "'named'" "$LOG")"
ZEROS='0,0,0,0,0,0,0,0,0,0'
code=$(curl -s -o "$WORK/named.json" -w '%{http_code}' -X POST \
  "http://127.0.0.1:$HPORT/v2/models/named/infer" -H 'Content-Type: application/json' \
  -d '{"inputs":[{"name":"features","shape":[1,12],"datatype":"FP32","data":[0,1,'$ZEROS']}]}')
[ "$code" = 200 ] && grep -q '"probabilities"' "$WORK/named.json" &&
  ok "named: HTTP infer by the pinned input name" ||
  fail "named: HTTP $code $(cat "$WORK/named.json")"
code=$(curl -s -o "$WORK/badreq.json" -w '%{http_code}' -X POST \
  "http://127.0.0.1:$HPORT/v2/models/fraud_d6/infer" -H 'Content-Type: application/json' \
  -d '{"inputs":[{"name":"input","shape":[1,11],"datatype":"FP32","data":[0,'$ZEROS']}]}')
[ "$code" = 400 ] && ok "11 features for a 12-feature model: HTTP 400 $(cat "$WORK/badreq.json")" ||
  fail "wrong width: HTTP $code $(cat "$WORK/badreq.json")"

echo "-- 2. every reference row over every protocol ($((SECONDS - T0)) s)"
for kind in xgboost sklearn; do
  for suite in serve fresh; do
    $PY "$HELPER" $suite --kind $kind --http "http://127.0.0.1:$HPORT" --target \
      "127.0.0.1:$NPORT" --gen "$GEN" --tpuctl "$TPUCTL" --data "$SRC/tests/data/$kind" \
      --src "$SRC" || FAIL=1
  done
done

if [ -n "$BIG" ]; then
  echo "-- 3. larger boosters, 10,000 fresh rows each ($((SECONDS - T0)) s)"
  grep -E "model 'big_[^']*' version 1: (ready|load failed)" "$LOG" | sed 's/.*model /  model /;s/ from .*//'
  $PY "$HELPER" fresh --kind xgboost --http "http://127.0.0.1:$HPORT" --target \
    "127.0.0.1:$NPORT" --gen "$GEN" --tpuctl "$TPUCTL" --data "$REPO" --src "$SRC" \
    --models "$BIG" || FAIL=1
  code=$(curl -s -o "$WORK/debug.json" -w '%{http_code}' "http://127.0.0.1:$HPORT/v2/debug/models")
  n=$(grep -o 'exact, \(levels\|node walk\|gemm\)' "$WORK/debug.json" | sort | uniq -c | tr '\n' ' ')
  [ "$code" = 200 ] && [ -n "$n" ] && ok "/v2/debug/models reports each bucket's strategy: $n" ||
    fail "/v2/debug/models: HTTP $code, no strategy in it"
else
  echo "note: python3-xgboost is not installed: part 3 (larger boosters) is skipped"
fi

stop_tpud "tpud"

echo "-- 4. the GEMM strategy forced: the fixtures' reference rows again ($((SECONDS - T0)) s)"
REPO4=$WORK/repo4
mkdir -p "$REPO4"
for d in "$DATA"/*/ "$SKDATA"/*/; do [ "$(basename "$d")" = malformed ] || cp -r "$d" "$REPO4/"; done
LOG=$WORK/tpud4.log
TPUD_TREE_STRATEGY=gemm "$TPUD" --models "$REPO4" --port 0 --http-port 0 --poll-seconds 0 \
  2>"$LOG" &
PID=$!
tpud_ports "$LOG" $PID || exit 1
n=$(grep -c "ready in .*reference check passed: 1000 rows" "$LOG")
[ "$n" = 10 ] && ok "gemm: the ten fixtures ready with the reference check passed" ||
  fail "gemm: $n ready lines: $(grep -E "ready|failed" "$LOG")"
for kind in xgboost sklearn; do
  $PY "$HELPER" serve --kind $kind --http "http://127.0.0.1:$HPORT" --target \
    "127.0.0.1:$NPORT" --gen "$GEN" --tpuctl "$TPUCTL" --data "$SRC/tests/data/$kind" \
    --src "$SRC" || FAIL=1
done
curl -s -o "$WORK/debug4.json" "http://127.0.0.1:$HPORT/v2/debug/models"
n=$(grep -o 'exact, [a-z ]*' "$WORK/debug4.json" | sort | uniq -c | tr '\n' ' ')
case "$n" in
*"exact, gemm"*) case "$n" in *walk*|*levels*) fail "gemm forced, yet: $n" ;;
                 *) ok "/v2/debug/models: every bucket runs the GEMM strategy: $n" ;; esac ;;
*) fail "gemm forced, /v2/debug/models says: $n" ;;
esac
grep -q '"sim_cycles": *[1-9]' "$WORK/debug4.json" &&
  ok "gemm: the buckets report the systolic array's cycles" ||
  fail "gemm: no systolic cycles in /v2/debug/models"
stop_tpud "tpud (gemm)"

echo "test_trees: $((SECONDS - T0)) s"
[ $FAIL = 0 ] && echo "test_trees: all passed" || echo "test_trees: FAILED"
exit $FAIL

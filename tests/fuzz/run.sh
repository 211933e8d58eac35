#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS [TARGET...] - runs each libFuzzer target for SECONDS (make fuzz).
#
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>, read-only) plus a work
# corpus in BUILD_DIR/fuzz-corpus/<target> that keeps what earlier runs found. Crash, leak,
# timeout and OOM inputs go to tests/fuzz/crashes/<target>-*; the script exits 1 if any target
# found one, naming them, and prints each target's exec/s and coverage at the end. Targets run
# FUZZ_JOBS at a time (default: the number of CPUs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
seconds=$2
shift 2
all=(fuzz_frame fuzz_validate fuzz_oip_json fuzz_safetensors fuzz_model_config fuzz_audit_verify
     fuzz_http_parser fuzz_grpc fuzz_onnx fuzz_graph fuzz_payload)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}

max_len() {
  case $1 in
    fuzz_frame) echo 65536 ;;           # several pipelined frames of a few KiB
    fuzz_safetensors) echo 32768 ;;     # the digits checkpoint (19.6 KB) fits
    fuzz_onnx) echo 32768 ;;            # the node tests' models are a few hundred bytes
    fuzz_model_config | fuzz_http_parser) echo 8192 ;;
    fuzz_grpc) echo 1024 ;;             # one header value
    fuzz_graph) echo 4096 ;;            # a byte-code of a dozen nodes and their input bytes
    fuzz_payload) echo 4096 ;;          # one entry: a header and a few tensors
    *) echo 16384 ;;
  esac
}
dict() {
  case $1 in
    fuzz_oip_json | fuzz_model_config | fuzz_safetensors | fuzz_audit_verify | fuzz_payload) echo "-dict=$here/json.dict" ;;
    fuzz_http_parser) echo "-dict=$here/http.dict" ;;
  esac
}

mkdir -p "$here/crashes" "$build/fuzz-logs"
run_one() {
  local t=$1 bin=$build/tests/fuzz/$1
  if [ ! -x "$bin" ]; then
    echo "$t: not built (skipped)" >"$build/fuzz-logs/$t.log"
    return 0
  fi
  mkdir -p "$build/fuzz-corpus/$t"
  local extra=()
  # fuzz_onnx also seeds from ONNX's own test models (libonnx-testdata, deploy/deps.sh), those
  # that fit max_len; copied, so that the corpus directory holds only models.
  if [ "$t" = fuzz_onnx ] && [ -d /usr/share/libonnx-testdata/data ]; then
    mkdir -p "$build/fuzz-seeds/$t"
    find /usr/share/libonnx-testdata/data -name model.onnx -size -32k | while read -r f; do
      cp "$f" "$build/fuzz-seeds/$t/$(echo "$f" | md5sum | cut -c1-16).onnx"
    done
    extra=("$build/fuzz-seeds/$t")
  fi
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: allocations must be bounded.
  # detect_leaks: a leak on an error path is a finding too.
  ASAN_OPTIONS=detect_leaks=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$bin" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$here/crashes/$t-" $(dict "$t") \
    "$build/fuzz-corpus/$t" "$here/corpus/$t" "${extra[@]}" >"$build/fuzz-logs/$t.log" 2>&1
  echo $? >"$build/fuzz-logs/$t.rc"
}
export -f run_one max_len dict
export here build seconds
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'

fail=0
printf '%-20s %10s %8s %8s %s\n' target exec/s cov ft result
for t in "${targets[@]}"; do
  log=$build/fuzz-logs/$t.log
  rc=$(cat "$build/fuzz-logs/$t.rc" 2>/dev/null || echo skipped)
  execs=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  last=$(grep -E '#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
  cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<<"$last")
  res=ok
  if [ "$rc" = skipped ]; then res="not built"
  elif [ "$rc" != 0 ]; then
    res="FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|deadly signal' "$log")"
    fail=1
  fi
  printf '%-20s %10s %8s %8s %s\n' "$t" "${execs:--}" "${cov:--}" "${ft:--}" "$res"
done
if [ $fail != 0 ]; then
  echo "fuzz: crashes (inputs in tests/fuzz/crashes/, logs in $build/fuzz-logs/):" >&2
  ls -1 "$here/crashes" >&2
  exit 1
fi

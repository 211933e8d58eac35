// ort_bench.js - ONNX Runtime (onnxruntime-node, CPU execution provider) on the .onnx files
// bench/onnx_bench times in-process, for bench/onnx_vs_ort.sh.
//
// DESIGN
// usage: node ort_bench.js IO_DIR SLICES SLICE_MS BATCHES NAME=MODEL.onnx...
// IO_DIR holds onnx_bench --io's manifests (NAME.json) and raw tensors: the same 64 input rows
// tpud ran and tpud's outputs at batch 64 and at batch 1. Each session is created with
// intraOpNumThreads 1 and interOpNumThreads 1 (sequential execution, all graph optimizations:
// ORT's defaults otherwise), the comparison's one thread a side. Before timing, ORT's outputs
// are checked against tpud's on the same rows (worst absolute difference, "ok" at <= 1e-4).
// Timing mirrors onnx_bench: per batch size the models are timed in interleaved slices, a
// slice is SLICE_MS of groups of calls sized to about 1 ms, its value the median group time per
// call, the model's value the median of its slices. What is timed is `await session.run(feeds)`
// with the input tensors made once: the cost a Node program pays per call, the binding's and
// the promise's included.
// The spec floor=FILE (an Identity model of a [batch, 1] float, no manifest) is timed alike:
// the per-call cost of onnxruntime-node with (next to) no work.
// Output: one JSON object per line, like onnx_bench's, with "side":"ort".
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const TYPED = {
  FP32: [Float32Array, 'float32'], INT64: [BigInt64Array, 'int64'], INT32: [Int32Array, 'int32'],
};

function readTensor(ioDir, t, rows) {
  const [Ctor, type] = TYPED[t.datatype];
  const buf = fs.readFileSync(path.join(ioDir, t.file));
  const all = new Ctor(buf.buffer, buf.byteOffset, buf.byteLength / Ctor.BYTES_PER_ELEMENT);
  const perRow = all.length / t.shape[0];
  const data = all.slice(0, perRow * rows);
  return { name: t.name, type, data, dims: [rows, ...t.shape.slice(1)] };
}

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

async function timeCalls(session, feeds, n) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await session.run(feeds);
  return Number(process.hrtime.bigint() - t0) / n;
}

async function main() {
  const [ioDir, slicesArg, sliceMsArg, batchesArg, ...specs] = process.argv.slice(2);
  if (!specs.length) {
    console.error('usage: node ort_bench.js IO_DIR SLICES SLICE_MS BATCHES NAME=MODEL.onnx...');
    process.exit(2);
  }
  const slices = Number(slicesArg), sliceMs = Number(sliceMsArg);
  const batches = batchesArg.split(',').map(Number);
  const opts = {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', executionProviders: ['cpu'],
  };
  const models = [];
  let failed = false;
  for (const spec of specs) {
    const eq = spec.indexOf('=');
    const name = spec.slice(0, eq), file = spec.slice(eq + 1);
    const session = await ort.InferenceSession.create(file, opts);
    const feeds = {};
    if (name === 'floor') { // one Identity of a [batch, 1] float: the cost of a call alone
      for (const b of batches) {
        const x = new ort.Tensor('float32', new Float32Array(b), [b, 1]);
        feeds[b] = { [session.inputNames[0]]: x };
      }
      models.push({ name, session, feeds });
      continue;
    }
    const man = JSON.parse(fs.readFileSync(path.join(ioDir, name + '.json'), 'utf8'));
    for (const b of batches) {
      feeds[b] = {};
      for (const t of man.inputs) {
        const r = readTensor(ioDir, t, b);
        feeds[b][r.name] = new ort.Tensor(r.type, r.data, r.dims);
      }
    }
    // ORT's outputs against tpud's, at batch 64 and batch 1.
    let worst = 0;
    for (const [rows, outs] of [[64, man.outputs64], [1, man.outputs1]]) {
      if (!feeds[rows]) {
        feeds[rows] = {};
        for (const t of man.inputs) {
          const r = readTensor(ioDir, t, rows);
          feeds[rows][r.name] = new ort.Tensor(r.type, r.data, r.dims);
        }
      }
      const got = await session.run(feeds[rows]);
      for (const t of outs) {
        const want = readTensor(ioDir, t, rows).data;
        const have = got[t.name].data;
        if (have.length !== want.length) { worst = Infinity; continue; }
        for (let i = 0; i < want.length; i++) {
          const d = Math.abs(have[i] - want[i]);
          if (!(d <= worst)) worst = d;
        }
      }
    }
    const ok = worst <= 1e-4;
    failed = failed || !ok;
    console.log(JSON.stringify({ side: 'ort_check', model: name, max_abs_diff: worst, ok }));
    models.push({ name, session, feeds });
  }
  for (const b of batches) {
    const group = [];
    for (const m of models) { // warm up; size a group to about 1 ms
      let n = 1;
      while ((await timeCalls(m.session, m.feeds[b], n)) * n < 1e6 && n < (1 << 20)) n *= 2;
      group.push(n);
    }
    const sliceNs = models.map(() => []);
    for (let s = 0; s < slices; s++) {
      for (let i = 0; i < models.length; i++) {
        const samples = [];
        const end = process.hrtime.bigint() + BigInt(Math.round(sliceMs * 1e6));
        do {
          samples.push(await timeCalls(models[i].session, models[i].feeds[b], group[i]));
        } while (process.hrtime.bigint() < end);
        sliceNs[i].push(median(samples));
      }
    }
    models.forEach((m, i) => console.log(JSON.stringify({
      side: 'ort', model: m.name, batch: b, ns: median(sliceNs[i]),
      slices: sliceNs[i].map((x) => Math.round(x * 10) / 10), version: ort.env.versions,
    })));
  }
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error('ort_bench: ' + (e && e.stack || e)); process.exit(1); });

// server.js - the peer tpud is measured against: an Open Inference Protocol v2 REST server on
// ONNX Runtime (onnxruntime-node, CPU execution provider), for bench/server_vs_peer.sh.
//
// DESIGN
// usage: node server.js [--port P] [--workers N] [--intra-threads T] NAME=MODEL.onnx...
// A Node program as a team would write it to serve ONNX files over OIP v2 without a model
// server: node:http, the cluster module with one worker process per CPU (--workers, default
// os.availableParallelism()), each worker with its own InferenceSession per model (ORT's
// defaults: all graph optimizations, intra-op threads --intra-threads, default 1 so N workers
// use N cores, not N x N). Requests are JSON only, as onnxruntime-node users write them:
//   POST /v2/models/NAME[/versions/V]/infer   {"inputs":[{"name","shape","datatype","data"}],
//                                              "outputs":[{"name"}]?, "id"?}
//   GET  /v2/health/live, /v2/health/ready, /v2/models/NAME (metadata)
// FP32, FP64, INT64, INT32 and BOOL inputs; `data` flat or nested; the answer lists every output
// (or the requested ones) with its shape, ONNX Runtime's type and the values as JSON numbers.
// Errors are 400 {"error": ...} (404 for an unknown model or path), the connection kept.
// Nothing here batches requests together: each request is one session.run, as in the servers
// built this way; that is the comparison bench/server_vs_peer.sh makes.
'use strict';
const cluster = require('cluster');
const http = require('http');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const o = { port: 9501, workers: os.availableParallelism ? os.availableParallelism() : os.cpus().length,
    intra: 1, models: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') o.port = Number(argv[++i]);
    else if (a === '--workers') o.workers = Number(argv[++i]);
    else if (a === '--intra-threads') o.intra = Number(argv[++i]);
    else if (/^[A-Za-z0-9._-]+=/.test(a)) {
      const eq = a.indexOf('=');
      o.models.push([a.slice(0, eq), a.slice(eq + 1)]);
    } else {
      console.error(`server.js: unknown argument '${a}'`);
      process.exit(2);
    }
  }
  if (!o.models.length || !(o.workers >= 1) || !(o.port >= 0) || !(o.intra >= 1)) {
    console.error('usage: node server.js [--port P] [--workers N] [--intra-threads T] NAME=MODEL.onnx...');
    process.exit(2);
  }
  return o;
}

const opts = parseArgs(process.argv.slice(2));

if (cluster.isPrimary) {
  let ready = 0;
  for (let i = 0; i < opts.workers; i++) {
    const w = cluster.fork();
    w.on('message', (m) => {
      if (m === 'ready' && ++ready === opts.workers)
        console.log(`peer: listening on 127.0.0.1:${opts.port}, ${opts.workers} workers, ` +
                    `models ${opts.models.map((m) => m[0]).join(' ')}`);
    });
  }
  cluster.on('exit', (w, code, sig) => {
    console.error(`peer: worker ${w.process.pid} exited (${sig || code})`);
    process.exit(1);
  });
  const stop = () => {
    for (const id in cluster.workers) cluster.workers[id].process.kill('SIGTERM');
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
} else {
  worker().catch((e) => {
    console.error(`peer: ${e.stack || e}`);
    process.exit(1);
  });
}

const TYPES = {
  FP32: ['float32', Float32Array], FP64: ['float64', Float64Array], INT32: ['int32', Int32Array],
  INT64: ['int64', BigInt64Array], BOOL: ['bool', Uint8Array],
};
const OIP_TYPE = { float32: 'FP32', float64: 'FP64', int32: 'INT32', int64: 'INT64', bool: 'BOOL' };

class BadRequest extends Error {}

function flatten(data, out) {
  for (const v of data) {
    if (Array.isArray(v)) flatten(v, out);
    else out.push(v);
  }
  return out;
}

function toTensor(ort, t) {
  if (!t || typeof t.name !== 'string') throw new BadRequest('an input has no name');
  const ty = TYPES[t.datatype];
  if (!ty) throw new BadRequest(`input '${t.name}': datatype '${t.datatype}' is not supported`);
  if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isInteger(d) && d >= 0))
    throw new BadRequest(`input '${t.name}': shape must be an array of non-negative integers`);
  if (!Array.isArray(t.data)) throw new BadRequest(`input '${t.name}': data must be an array`);
  const flat = flatten(t.data, []);
  const n = t.shape.reduce((a, b) => a * b, 1);
  if (flat.length !== n)
    throw new BadRequest(`input '${t.name}': ${flat.length} values for shape [${t.shape}] (${n})`);
  let arr;
  if (t.datatype === 'INT64') arr = BigInt64Array.from(flat, (v) => BigInt(v));
  else if (t.datatype === 'BOOL') arr = Uint8Array.from(flat, (v) => (v ? 1 : 0));
  else arr = ty[1].from(flat);
  if (t.datatype === 'FP32' || t.datatype === 'FP64') {
    for (let i = 0; i < flat.length; i++)
      if (typeof flat[i] !== 'number') throw new BadRequest(`input '${t.name}': element ${i} is not a number`);
  }
  return new ort.Tensor(ty[0], t.datatype === 'BOOL' ? Array.from(arr, Boolean) : arr, t.shape);
}

function send(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

async function worker() {
  const ort = require('onnxruntime-node');
  const sessions = new Map();
  for (const [name, file] of opts.models) {
    const s = await ort.InferenceSession.create(path.resolve(file), {
      intraOpNumThreads: opts.intra, interOpNumThreads: 1, executionMode: 'sequential',
      graphOptimizationLevel: 'all', executionProviders: ['cpu'],
    });
    sessions.set(name, s);
  }

  async function infer(name, body, res) {
    const s = sessions.get(name);
    if (!s) return send(res, 404, { error: `model '${name}' is not served` });
    let req;
    try {
      req = JSON.parse(body);
    } catch (e) {
      return send(res, 400, { error: `bad JSON: ${e.message}` });
    }
    try {
      if (!req || !Array.isArray(req.inputs)) throw new BadRequest("the body needs an 'inputs' array");
      const feeds = {};
      for (const t of req.inputs) {
        if (!s.inputNames.includes(t && t.name)) throw new BadRequest(`unknown input '${t && t.name}'`);
        feeds[t.name] = toTensor(ort, t);
      }
      for (const n of s.inputNames) if (!feeds[n]) throw new BadRequest(`input '${n}' is missing`);
      let names = s.outputNames;
      if (Array.isArray(req.outputs)) {
        names = req.outputs.map((o) => o && o.name);
        for (const n of names) if (!s.outputNames.includes(n)) throw new BadRequest(`unknown output '${n}'`);
      }
      const r = await s.run(feeds, names);
      const outputs = names.map((n) => {
        const t = r[n];
        const data = t.type === 'int64' ? Array.from(t.data, Number) : Array.from(t.data);
        return { name: n, datatype: OIP_TYPE[t.type] || t.type, shape: t.dims, data };
      });
      const ans = { model_name: name, model_version: '1', outputs };
      if (req.id !== undefined) ans.id = req.id;
      send(res, 200, ans);
    } catch (e) {
      if (e instanceof BadRequest) send(res, 400, { error: e.message });
      else send(res, 400, { error: `onnxruntime: ${e.message}` });
    }
  }

  const server = http.createServer((req, res) => {
    const url = req.url.split('?')[0];
    let m;
    if (req.method === 'POST' && (m = /^\/v2\/models\/([^/]+)(?:\/versions\/[^/]+)?\/infer$/.exec(url))) {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => infer(decodeURIComponent(m[1]), Buffer.concat(chunks).toString('utf8'), res));
      return;
    }
    req.resume();
    if (req.method === 'GET' && (url === '/v2/health/live' || url === '/v2/health/ready'))
      return send(res, 200, { live: true, ready: true });
    if (req.method === 'GET' && (m = /^\/v2\/models\/([^/]+)$/.exec(url))) {
      const name = decodeURIComponent(m[1]);
      const s = sessions.get(name);
      if (!s) return send(res, 404, { error: `model '${name}' is not served` });
      return send(res, 200, { name, versions: ['1'], platform: 'onnxruntime_onnx',
        inputs: s.inputNames.map((n) => ({ name: n })), outputs: s.outputNames.map((n) => ({ name: n })) });
    }
    send(res, 404, { error: `no route for ${req.method} ${url}` });
  });
  server.keepAliveTimeout = 60000;
  server.listen(opts.port, '127.0.0.1', () => process.send('ready'));
}

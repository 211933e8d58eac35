#!/usr/bin/python3
"""Train small PyTorch models on synthetic data and export them as tpud ONNX test fixtures.

For each model below, at ONNX opsets 13 and 17, writes tests/data/onnx/<model>_op<opset>/1/
(model.onnx, reference.safetensors, model.json) through tools/export_onnx.py's write_version:

  mlp_bn    x FP32 [batch, 20] raw tabular features (columns from about 0.05 to 2500, not
            scaled) -> Linear 64 -> BatchNorm1d -> ReLU -> Dropout(0.2) -> Linear 32 -> ReLU ->
            Linear 2 -> softmax: "probs" [batch, 2]
  fraud     num FP32 [batch, 8], cat INT64 [batch] in [0, 50) -> Embedding(50, 6) ++ num ->
            LayerNorm(14) -> Linear 32 -> GELU (exact, erf) -> Linear 2: "logit" [batch, 2] and
            its softmax "score" [batch, 2]
  text      tokens INT64 [batch, 16] in [0, 200) -> Embedding(200, 16) -> mean over the sequence
            -> Linear 32 -> Tanh -> Linear 3: "logits" [batch, 3]
  mlp_bn_wrong (opset 13 only)
            mlp_bn's ONNX file with one element of its last Gemm's weight changed, beside the
            reference of the correct model: outputs far outside the tolerances and labels
            below min_agreement, so tpud must refuse to serve it.

The reference is PyTorch's own output in eval mode (BatchNorm on its running statistics, dropout
off) on 1000 fresh rows. Before writing, every graph is checked to use only the ops tpud's
importer accepts (ALLOWED_OPS), and run by a float64 numpy interpreter of the ONNX graph (below,
independent of PyTorch) whose outputs must lie within the reference tolerances of PyTorch's:
so a correct implementation can pass the check, and mlp_bn_wrong must fail it.

    /usr/bin/python3 models/export_onnx_examples.py

needs Debian's python3-torch (1.13), python3-onnx (1.12), python3-numpy and python3-scipy. Runs
single-threaded with fixed seeds; re-running reproduces every file byte for byte.
"""

import io
import os
import shutil
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from scipy.special import erf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no tools/__pycache__ in the work tree
sys.path.insert(0, os.path.join(ROOT, "tools"))
from export_onnx import write_version  # noqa: E402

OUT = os.path.join(ROOT, "tests", "data", "onnx")
OPSETS = (13, 17)
ROWS = 1000
# fp32 reference tolerances. PyTorch's fp32 outputs are within about 1e-6 (relative) of the
# float64 interpreter below, so 1e-4 / 1e-5 leaves a correct fp32 engine a wide margin whatever
# its summation order, while any real change of a weight is far outside it.
RTOL, ATOL = 1e-4, 1e-5
MIN_AGREEMENT = 0.99

ALLOWED_OPS = frozenset("""
    Gemm MatMul Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Max Min Relu LeakyRelu
    Sigmoid Tanh Erf Gelu Clip Softmax LogSoftmax LayerNormalization BatchNormalization ReduceSum
    ReduceMean ReduceMax ArgMax Gather Concat Flatten Reshape Squeeze Unsqueeze Transpose
    Identity Cast Constant Shape Where Dropout""".split())


# ---- models -------------------------------------------------------------------------------

class MlpBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 64)
        self.bn = torch.nn.BatchNorm1d(64)
        self.drop = torch.nn.Dropout(0.2)
        self.fc2 = torch.nn.Linear(64, 32)
        self.fc3 = torch.nn.Linear(32, 2)

    def logits(self, x):
        h = self.drop(torch.relu(self.bn(self.fc1(x))))
        return self.fc3(torch.relu(self.fc2(h)))

    def forward(self, x):
        return torch.softmax(self.logits(x), dim=-1)


class Fraud(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 6)
        self.norm = torch.nn.LayerNorm(14)
        self.fc1 = torch.nn.Linear(14, 32)
        self.act = torch.nn.GELU()  # approximate="none": the erf form
        self.fc2 = torch.nn.Linear(32, 2)

    def logits(self, num, cat):
        h = self.norm(torch.cat([num, self.emb(cat)], dim=1))
        return self.fc2(self.act(self.fc1(h)))

    def forward(self, num, cat):
        logit = self.logits(num, cat)
        return torch.softmax(logit, dim=-1), logit


class Text(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(200, 16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 3)

    def logits(self, tokens):
        return self.fc2(torch.tanh(self.fc1(torch.mean(self.emb(tokens), dim=1))))

    def forward(self, tokens):
        return self.logits(tokens)


# ---- synthetic data -----------------------------------------------------------------------

# mlp_bn's column scales: 0.05 .. 2500, as unscaled tabular data (ratios, counts, amounts).
MLP_SCALES = np.geomspace(0.05, 2500.0, 20)


def mlp_data(rng, n):
    x = rng.gamma(4.0, 0.25, (n, 20)) * MLP_SCALES  # positive, mean = the column's scale
    z = x / MLP_SCALES - 1.0  # what the label depends on: each column relative to its scale
    # The label lives in the larger columns (scale about 8 .. 2500): without feature scaling
    # the small ones are noise to the first layer, as they would be in practice.
    s = 1.5 * z[:, 19] - 1.2 * z[:, 12] + 2.0 * z[:, 15] * z[:, 17] + 0.8 * np.abs(z[:, 10])
    y = (s + 0.2 * rng.standard_normal(n) > 0.3).astype(np.int64)
    return x.astype(np.float32), y


def fraud_data(rng, n):
    cat = rng.integers(0, 50, n)
    amount = rng.lognormal(4.0, 1.2, n)          # about 1 .. 5000
    hour = rng.integers(0, 24, n).astype(np.float64)
    age_days = rng.exponential(400.0, n)
    tx_24h = rng.poisson(3.0, n).astype(np.float64)
    dist_km = rng.lognormal(2.0, 1.5, n)
    ratio = rng.uniform(0.05, 3.0, n)
    foreign = (rng.uniform(size=n) < 0.1).astype(np.float64)
    score = rng.normal(600.0, 80.0, n)
    num = np.stack([amount, hour, age_days, tx_24h, dist_km, ratio, foreign, score], axis=1)
    risk = np.sin(cat * 1.7)                      # each category has its own base risk
    s = (0.8 * np.log(amount) - 3.5 + 1.2 * risk + 1.5 * foreign + 0.9 * (hour < 5)
         - 0.002 * age_days + 0.3 * np.log1p(dist_km))
    y = (s + 0.5 * rng.standard_normal(n) > 0).astype(np.int64)
    return num.astype(np.float32), cat.astype(np.int64), y


def text_data(rng, n):
    tokens = rng.integers(0, 200, (n, 16))
    # three topics: tokens 0..59, 60..119, the rest; the label is the topic most present
    counts = np.stack([(tokens < 60).sum(1), ((tokens >= 60) & (tokens < 120)).sum(1),
                       (tokens >= 120).sum(1) * 0.75], axis=1)
    y = np.argmax(counts + 0.1 * rng.standard_normal(counts.shape), axis=1).astype(np.int64)
    return tokens.astype(np.int64), y


def train(model, inputs, y, steps, lr, seed):
    """Adam on cross-entropy over minibatches of 128, fixed order from seed."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    tensors = [torch.from_numpy(a) for a in inputs]
    target = torch.from_numpy(y)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(target), (128,), generator=g)
        loss = torch.nn.functional.cross_entropy(model.logits(*[t[idx] for t in tensors]),
                                                 target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model.logits(*tensors).argmax(dim=1).numpy()
    return float(np.mean(pred == y))


def build(name):
    """Returns (model in eval mode, {input name: reference rows}, output names, label output,
    training accuracy)."""
    torch.manual_seed({"mlp_bn": 1, "fraud": 2, "text": 3}[name])
    rng = np.random.default_rng({"mlp_bn": 11, "fraud": 12, "text": 13}[name])
    if name == "mlp_bn":
        model = MlpBn()
        x, y = mlp_data(rng, 8000)
        acc = train(model, [x], y, 3000, 3e-3, 21)
        xr, _ = mlp_data(rng, ROWS)
        return model, {"x": xr}, ["probs"], "probs", acc
    if name == "fraud":
        model = Fraud()
        num, cat, y = fraud_data(rng, 8000)
        acc = train(model, [num, cat], y, 1500, 3e-3, 22)
        numr, catr, _ = fraud_data(rng, ROWS)
        return model, {"num": numr, "cat": catr}, ["score", "logit"], "score", acc
    model = Text()
    tokens, y = text_data(rng, 8000)
    acc = train(model, [tokens], y, 600, 1e-2, 23)
    tokr, _ = text_data(rng, ROWS)
    return model, {"tokens": tokr}, ["logits"], "logits", acc


def export(model, inputs, output_names, opset):
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    f = io.BytesIO()
    names = list(inputs) + output_names
    torch.onnx.export(model, args, f, input_names=list(inputs), output_names=output_names,
                      dynamic_axes={n: {0: "batch"} for n in names}, opset_version=opset,
                      do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL)
    return f.getvalue()


# ---- float64 ONNX interpreter, only for the ops these graphs use --------------------------

def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _gemm(ins, at):
    a, b = ins[0], ins[1]
    a = a.T if at.get("transA", 0) else a
    b = b.T if at.get("transB", 0) else b
    y = at.get("alpha", 1.0) * (a @ b)
    return y + at.get("beta", 1.0) * ins[2] if len(ins) > 2 and ins[2] is not None else y


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _batchnorm(ins, at):
    x, scale, bias, mean, var = ins
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + at.get("epsilon", 1e-5))
            * scale.reshape(shape) + bias.reshape(shape))


def _layernorm(ins, at):
    x, scale = ins[0], ins[1]
    axes = tuple(range(at.get("axis", -1) % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + at.get("epsilon", 1e-5)) * scale
    return y + ins[2] if len(ins) > 2 and ins[2] is not None else y


def _reduce_mean(ins, at):
    axes = at.get("axes")
    if axes is None and len(ins) > 1 and ins[1] is not None:
        axes = ins[1]
    axes = None if axes is None else tuple(int(a) for a in np.ravel(axes))
    return ins[0].mean(axis=axes, keepdims=bool(at.get("keepdims", 1)))


def _unsqueeze(ins, at):
    axes = at.get("axes", ins[1] if len(ins) > 1 else None)
    y = ins[0]
    for a in sorted(int(v) % (y.ndim + len(np.ravel(axes))) for v in np.ravel(axes)):
        y = np.expand_dims(y, a)
    return y


def _reshape(ins, at):
    shape = [int(d) for d in ins[1]]
    shape = [ins[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return ins[0].reshape(shape)


_OPS = {
    "Gemm": _gemm,
    "MatMul": lambda i, a: i[0] @ i[1],
    "Add": lambda i, a: i[0] + i[1],
    "Sub": lambda i, a: i[0] - i[1],
    "Mul": lambda i, a: i[0] * i[1],
    "Div": lambda i, a: i[0] / i[1],
    "Pow": lambda i, a: np.power(i[0], i[1]),
    "Sqrt": lambda i, a: np.sqrt(i[0]),
    "Erf": lambda i, a: erf(i[0]),
    "Tanh": lambda i, a: np.tanh(i[0]),
    "Relu": lambda i, a: np.maximum(i[0], 0),
    "Softmax": lambda i, a: _softmax(i[0], a.get("axis", -1)),
    "BatchNormalization": _batchnorm,
    "LayerNormalization": _layernorm,
    "ReduceMean": _reduce_mean,
    "Gather": lambda i, a: np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0)),
    "Concat": lambda i, a: np.concatenate(i, axis=a["axis"]),
    "Identity": lambda i, a: i[0],
    "Dropout": lambda i, a: i[0],
    "Shape": lambda i, a: np.array(i[0].shape, dtype=np.int64),
    "Unsqueeze": _unsqueeze,
    "Reshape": _reshape,
    "Cast": lambda i, a: i[0].astype(np.float64 if a["to"] in (1, 11) else
                                     onnx.helper.tensor_dtype_to_np_dtype(a["to"])),
    "Constant": lambda i, a: numpy_helper.to_array(a["value"]),
}


def interpret(model_bytes, inputs):
    """Runs the graph in float64 (integer tensors stay integers). Returns {output: array}."""
    m = onnx.load_from_string(model_bytes)
    env = {}
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        env[t.name] = a.astype(np.float64) if a.dtype.kind == "f" else a
    for k, v in inputs.items():
        env[k] = v.astype(np.float64) if v.dtype.kind == "f" else v
    for node in m.graph.node:
        fn = _OPS.get(node.op_type)
        if fn is None:
            raise NotImplementedError(f"interpreter: op {node.op_type}")
        out = fn([env[n] if n else None for n in node.input], _attrs(node))
        if isinstance(out, np.ndarray) and out.dtype.kind == "f":
            out = out.astype(np.float64)
        env[node.output[0]] = out
    return {o.name: env[o.name] for o in m.graph.output}


def compare(got, ref):
    """(max of |got - ref| / (ATOL + RTOL |ref|) over all outputs: <= 1 passes, max |diff|)."""
    worst, diff = 0.0, 0.0
    for k, r in ref.items():
        d = np.abs(got[k] - r.astype(np.float64))
        worst = max(worst, float(np.max(d / (ATOL + RTOL * np.abs(r.astype(np.float64))))))
        diff = max(diff, float(d.max()))
    return worst, diff


def agreement(got, ref):
    return float(np.mean(np.argmax(got, axis=-1) == np.argmax(ref, axis=-1)))


def op_set(model_bytes):
    return sorted({n.op_type for n in onnx.load_from_string(model_bytes).graph.node})


# ---- main ---------------------------------------------------------------------------------

def perturb(model_bytes, inputs, outputs, label):
    """mlp_bn with one element of its last Gemm's weight sign-flipped and doubled: of those
    elements, the one whose change makes the most rows change their label, so that both the
    tolerance check and the label check fail."""
    m = onnx.load_from_string(model_bytes)
    wname = [n for n in m.graph.node if n.op_type == "Gemm"][-1].input[1]
    init = next(t for t in m.graph.initializer if t.name == wname)
    w0 = numpy_helper.to_array(init).copy()
    best = None
    for i in np.ndindex(w0.shape):
        w = w0.copy()
        w[i] = -2.0 * w[i]
        init.CopyFrom(numpy_helper.from_array(w, wname))
        b = m.SerializeToString()
        agree = agreement(interpret(b, inputs)[label], outputs[label])
        if best is None or agree < best[0]:
            best = (agree, b, f"{wname}{list(int(v) for v in i)}")
    return best[1], best[2]


def write(name, model_bytes, inputs, outputs, label, opset, note=""):
    d = os.path.join(OUT, f"{name}_op{opset}", "1")
    digests = write_version(d, model_bytes, inputs, outputs, RTOL, ATOL,
                            labels={"output": label, "min_agreement": MIN_AGREEMENT},
                            metadata={"producer": "models/export_onnx_examples.py",
                                      "model": name, "opset": opset})
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    assert size < 300_000, f"{d}: {size} bytes"
    print(f"{name}_op{opset}: {size} bytes, model {digests['model'][:12]}, "
          f"reference {digests['reference'][:12]}{note}")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if os.path.isdir(OUT):
        for e in os.listdir(OUT):
            if e not in ("README.md", "malformed"):  # malformed/: models/make_malformed_onnx.py
                shutil.rmtree(os.path.join(OUT, e))
    bad_ops = []
    for name in ("mlp_bn", "fraud", "text"):
        model, inputs, output_names, label, acc = build(name)
        with torch.no_grad():
            res = model(*[torch.from_numpy(a) for a in inputs.values()])
        res = res if isinstance(res, tuple) else (res,)
        outputs = {n: r.numpy() for n, r in zip(output_names, res)}
        print(f"{name}: training accuracy {acc:.3f}")
        for opset in OPSETS:
            b = export(model, inputs, output_names, opset)
            ops = op_set(b)
            extra = sorted(set(ops) - ALLOWED_OPS)
            print(f"  opset {opset} ops: {' '.join(ops)}")
            if extra:
                bad_ops.append(f"{name} opset {opset}: {' '.join(extra)}")
                continue
            got = interpret(b, inputs)
            worst, diff = compare(got, outputs)
            agree = agreement(got[label], outputs[label])
            assert worst <= 0.5, f"{name} op{opset}: float64 graph off by {worst} tolerances"
            assert agree >= MIN_AGREEMENT
            write(name, b, inputs, outputs, label, opset,
                  f"; float64 graph vs PyTorch: max diff {diff:.1e} = {worst:.3f} of the "
                  f"tolerance, labels agree {agree:.3f}")
            if name == "mlp_bn" and opset == 13:
                wrong, where = perturb(b, inputs, outputs, label)
                got = interpret(wrong, inputs)
                worst, diff = compare(got, outputs)
                assert worst > 100, f"mlp_bn_wrong: only {worst} tolerances off"
                assert agreement(got[label], outputs[label]) < MIN_AGREEMENT - 0.05
                write("mlp_bn_wrong", wrong, inputs, outputs, label, opset,
                      f"; {where} changed: max diff {diff:.2e} = {worst:.0f} tolerances, labels "
                      f"agree {agreement(got[label], outputs[label]):.3f}")
    if bad_ops:
        sys.exit("ops outside tpud's list: " + "; ".join(bad_ops))


if __name__ == "__main__":
    main()

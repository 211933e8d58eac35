// validate.mjs - offline check of the Kubernetes manifests in a directory (default: ..).
//
// 1. Every object is checked against the OpenAPI schema of its apiVersion/kind with the
//    kubernetes-models package (types, required fields, enums, formats). Its schemas allow
//    unknown fields, so a misspelt optional field is not caught here.
// 2. The objects are checked against each other, the way tpud needs them wired: selectors that
//    match the pod labels, ports and probes by name, the probes on tpud's health endpoints, every
//    volume's ConfigMap/Secret/claim present, CPU requests for the autoscaler, a non-root pod
//    with a read-only root filesystem, and a config.json whose keys are tpud's options (given
//    `tpud --help` output in $TPUD_HELP) and that listens on 0.0.0.0 with the probed HTTP port.
// Prints one line per object and exits 1 on the first class of failure found (all listed).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";

const require = createRequire(import.meta.url);
const dir = path.resolve(process.argv[2] || "..");
const errors = [];
const err = (where, msg) => errors.push(`${where}: ${msg}`);

// apiVersion -> kubernetes-models module ("v1" is the core group).
function modelClass(apiVersion, kind) {
  const mod = require(`kubernetes-models/${apiVersion}`);
  return mod[kind];
}

const objs = [];
for (const f of fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort()) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(dir, f), "utf8"));
  for (const d of docs) {
    if (d.errors.length) { err(f, `YAML: ${d.errors[0].message}`); continue; }
    const o = d.toJS();
    if (o == null) continue;
    const where = `${f} ${o.kind}/${o.metadata?.name}`;
    let Cls;
    try { Cls = modelClass(o.apiVersion, o.kind); } catch { Cls = undefined; }
    if (!Cls) { err(where, `unknown apiVersion/kind ${o.apiVersion} ${o.kind}`); continue; }
    try {
      new Cls(o).validate();
      console.log(`  ok  ${where} (${o.apiVersion})`);
    } catch (e) {
      err(where, `schema: ${e.message}`);
    }
    objs.push({ f, where, o });
  }
}

const find = (kind, name) => objs.find((x) => x.o.kind === kind && (!name || x.o.metadata.name === name));
const matches = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => labels?.[k] === v);

const dep = find("Deployment");
if (!dep) err(dir, "no Deployment");
else {
  const d = dep.o, w = dep.where, pod = d.spec.template, spec = pod.spec;
  if (!matches(d.spec.selector.matchLabels, pod.metadata.labels)) err(w, "selector does not match the pod labels");
  const c = spec.containers.find((x) => x.name === "tpud");
  if (!c) err(w, "no container named tpud");
  else {
    const ports = Object.fromEntries((c.ports || []).map((p) => [p.name, p.containerPort]));
    if (ports.native !== 8500 || ports.http !== 8501) err(w, `container ports must be native 8500 and http 8501, got ${JSON.stringify(ports)}`);
    const probe = (p, wantPath, what) => {
      if (!p?.httpGet) return err(w, `${what}: missing or not httpGet`);
      if (p.httpGet.path !== wantPath) err(w, `${what}: path ${p.httpGet.path}, expected ${wantPath}`);
      if (p.httpGet.port !== "http" && p.httpGet.port !== 8501) err(w, `${what}: port ${p.httpGet.port} is not the HTTP port`);
    };
    probe(c.readinessProbe, "/v2/health/ready", "readinessProbe");
    probe(c.livenessProbe, "/v2/health/live", "livenessProbe");
    if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory) err(w, "resource requests (cpu, memory) missing");
    if (!c.resources?.limits?.memory) err(w, "memory limit missing");
    const psc = spec.securityContext || {}, csc = c.securityContext || {};
    if (psc.runAsNonRoot !== true && csc.runAsNonRoot !== true) err(w, "runAsNonRoot is not set");
    if ((csc.runAsUser ?? psc.runAsUser) === 0) err(w, "runs as uid 0");
    if (csc.readOnlyRootFilesystem !== true) err(w, "readOnlyRootFilesystem is not set");
    if (csc.allowPrivilegeEscalation !== false) err(w, "allowPrivilegeEscalation is not false");
    const vols = Object.fromEntries((spec.volumes || []).map((v) => [v.name, v]));
    for (const m of c.volumeMounts || []) if (!vols[m.name]) err(w, `volumeMount ${m.name} names no volume`);
    if (!(c.volumeMounts || []).some((m) => m.mountPath === "/models")) err(w, "no volume at /models");
    for (const v of Object.values(vols)) {
      if (v.configMap && !find("ConfigMap", v.configMap.name)) err(w, `volume ${v.name}: no ConfigMap ${v.configMap.name}`);
      if (v.secret && !find("Secret", v.secret.secretName)) err(w, `volume ${v.name}: no Secret ${v.secret.secretName}`);
      if (v.persistentVolumeClaim && !find("PersistentVolumeClaim", v.persistentVolumeClaim.claimName))
        err(w, `volume ${v.name}: no PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}`);
    }
    // The config file tpud reads: /etc/tpud/config.json from a ConfigMap.
    const cfgMount = (c.volumeMounts || []).find((m) => m.mountPath === "/etc/tpud" || m.mountPath === "/etc/tpud/config.json");
    const cm = cfgMount && vols[cfgMount.name]?.configMap && find("ConfigMap", vols[cfgMount.name].configMap.name);
    if (!cm) err(w, "no ConfigMap mounted as /etc/tpud/config.json");
    else {
      let cfg;
      try { cfg = JSON.parse(cm.o.data["config.json"]); } catch (e) { err(cm.where, `config.json: ${e.message}`); }
      if (cfg) {
        if (cfg.listen !== "0.0.0.0" && !(c.args || []).includes("0.0.0.0")) err(cm.where, "tpud would listen on 127.0.0.1 only");
        if ((cfg["http-port"] ?? 8501) !== 8501 || (cfg.port ?? 8500) !== 8500) err(cm.where, "ports differ from the container's and the probes'");
        if (cfg.models !== "/models") err(cm.where, `models is ${cfg.models}, the volume is at /models`);
        // TLS on: the probes must speak HTTPS (tpud serves HTTPS on 8501 with tls-cert).
        if (cfg["tls-cert"] && cfg["http-tls"] !== false)
          for (const [what, p] of [["readinessProbe", c.readinessProbe], ["livenessProbe", c.livenessProbe],
                                   ["startupProbe", c.startupProbe]])
            if (p?.httpGet && p.httpGet.scheme !== "HTTPS") err(w, `${what}: tls-cert is set, so the probe needs scheme HTTPS`);
        if (cfg.tokens && cfg["auth-open-health"] === false) err(cm.where, "tokens without auth-open-health: the probes would get 401");
        // Every file option names a file inside a mounted Secret or ConfigMap, under a key it has.
        for (const k of ["tls-cert", "tls-key", "tls-client-ca", "tokens"]) {
          const file = cfg[k];
          if (!file) continue;
          const m = (c.volumeMounts || []).find((vm) => file.startsWith(vm.mountPath.replace(/\/?$/, "/")));
          const v = m && vols[m.name];
          const key = m && file.slice(m.mountPath.replace(/\/?$/, "/").length);
          const src = v?.secret ? find("Secret", v.secret.secretName) : v?.configMap ? find("ConfigMap", v.configMap.name) : null;
          const keys = src ? Object.keys({ ...(src.o.data || {}), ...(src.o.stringData || {}) }) : [];
          if (!src) err(cm.where, `${k}: ${file} is in no mounted Secret or ConfigMap`);
          else if (!keys.includes(key)) err(cm.where, `${k}: ${src.where} has no key ${key} (keys: ${keys.join(", ")})`);
          else if (v.secret?.optional) err(w, `volume ${v.name}: optional, but ${k} needs ${file}`);
          if (k === "tokens" && src) {
            const text = (src.o.stringData || {})[key] ?? Buffer.from((src.o.data || {})[key] || "", "base64").toString();
            text.split("\n").forEach((line, i) => {
              const l = line.trim();
              if (!l || l.startsWith("#")) return;
              if (!/^(token (REPLACE\S*|[0-9a-f]{64}) (infer|admin) \S+|cert \S+ (infer|admin))$/.test(l))
                err(src.where, `${key} line ${i + 1}: expected "token <sha256-hex> <infer|admin> <name>" or "cert <CN> <role>", got "${l}"`);
            });
          }
        }
        if (process.env.TPUD_HELP) {
          const help = fs.readFileSync(process.env.TPUD_HELP, "utf8");
          for (const k of Object.keys(cfg))
            if (!help.includes(`--${k} `)) err(cm.where, `config.json: '${k}' is not a tpud option (tpud --help)`);
        }
      }
    }
  }
  const svc = find("Service");
  if (!svc) err(dir, "no Service");
  else {
    if (!matches(svc.o.spec.selector, pod.metadata.labels) || !Object.keys(svc.o.spec.selector || {}).length) err(svc.where, "selector does not select the tpud pods");
    const names = new Set((c?.ports || []).map((p) => p.name)), nums = new Set((c?.ports || []).map((p) => p.containerPort));
    for (const p of svc.o.spec.ports) if (!names.has(p.targetPort) && !nums.has(p.targetPort)) err(svc.where, `targetPort ${p.targetPort} is no container port`);
    const sp = svc.o.spec.ports.map((p) => p.port).sort();
    if (JSON.stringify(sp) !== "[8500,8501]") err(svc.where, `ports ${sp}, expected 8500 and 8501`);
  }
  const hpa = find("HorizontalPodAutoscaler");
  if (!hpa) err(dir, "no HorizontalPodAutoscaler");
  else {
    const t = hpa.o.spec.scaleTargetRef;
    if (t.kind !== "Deployment" || t.name !== d.metadata.name) err(hpa.where, `scales ${t.kind}/${t.name}, not the Deployment`);
    if (!hpa.o.spec.metrics?.some((m) => m.resource?.name === "cpu")) err(hpa.where, "no CPU metric");
    if (hpa.o.spec.minReplicas < 2) err(hpa.where, "minReplicas below 2 leaves no replica during a disruption");
  }
  const pdb = find("PodDisruptionBudget");
  if (!pdb) err(dir, "no PodDisruptionBudget");
  else if (!matches(pdb.o.spec.selector.matchLabels, pod.metadata.labels)) err(pdb.where, "selector does not select the tpud pods");
}

// KServe (kserve/): CRDs the schema package does not know, checked for the wiring KServe and
// tpud need: the runtime's container, port and probes; tpud's args with the storage
// initializer's /mnt/models; an InferenceService naming the runtime and one of its formats.
const kdir = path.join(dir, "kserve");
if (fs.existsSync(kdir)) {
  const kobjs = [];
  for (const f of fs.readdirSync(kdir).filter((f) => /\.ya?ml$/.test(f)).sort())
    for (const d of YAML.parseAllDocuments(fs.readFileSync(path.join(kdir, f), "utf8"))) {
      if (d.errors.length) { err(`kserve/${f}`, `YAML: ${d.errors[0].message}`); continue; }
      const o = d.toJS();
      if (o) kobjs.push({ where: `kserve/${f} ${o.kind}/${o.metadata?.name}`, o });
    }
  const rt = kobjs.find((x) => x.o.kind === "ServingRuntime" && x.o.apiVersion === "serving.kserve.io/v1alpha1");
  if (!rt) err(kdir, "no serving.kserve.io/v1alpha1 ServingRuntime");
  else {
    const s2 = rt.o.spec, c2 = s2.containers?.find((x) => x.name === "kserve-container");
    if (!c2) err(rt.where, "no container named kserve-container (KServe injects into that one)");
    else {
      const args = c2.args || [];
      const arg = (flag) => args[args.indexOf(flag) + 1];
      if (arg("--models") !== "/mnt/models") err(rt.where, "args: --models must be /mnt/models (where KServe puts storageUri)");
      if (arg("--listen") !== "0.0.0.0") err(rt.where, "args: --listen 0.0.0.0 missing");
      const http1 = (c2.ports || []).find((p) => p.name === "http1");
      if (!http1 || String(http1.containerPort) !== String(arg("--http-port") ?? 8501)) err(rt.where, "port http1 must be tpud's --http-port");
      if (c2.readinessProbe?.httpGet?.path !== "/v2/health/ready") err(rt.where, "readinessProbe must be /v2/health/ready");
      if (c2.securityContext?.runAsNonRoot !== true) err(rt.where, "runAsNonRoot is not set");
      if (process.env.TPUD_HELP) {
        const help = fs.readFileSync(process.env.TPUD_HELP, "utf8");
        for (const a of args) if (a.startsWith("--") && !help.includes(`${a.split("=")[0]} `)) err(rt.where, `args: ${a} is not a tpud option`);
      }
    }
    if (!(s2.protocolVersions || []).includes("v2")) err(rt.where, "protocolVersions lacks v2");
    if (!(s2.supportedModelFormats || []).length) err(rt.where, "no supportedModelFormats");
    console.log(`  ok  ${rt.where}`);
    for (const isvc of kobjs.filter((x) => x.o.kind === "InferenceService")) {
      const m = isvc.o.spec?.predictor?.model;
      if (isvc.o.apiVersion !== "serving.kserve.io/v1beta1") err(isvc.where, "expected serving.kserve.io/v1beta1");
      if (!m) { err(isvc.where, "no spec.predictor.model"); continue; }
      if (m.runtime !== rt.o.metadata.name) err(isvc.where, `runtime ${m.runtime}, not ${rt.o.metadata.name}`);
      if (!(s2.supportedModelFormats || []).some((f) => f.name === m.modelFormat?.name)) err(isvc.where, `modelFormat ${m.modelFormat?.name} is not one the runtime supports`);
      if (!m.storageUri) err(isvc.where, "no storageUri");
      console.log(`  ok  ${isvc.where}`);
    }
  }
}

if (errors.length) {
  for (const e of errors) console.error(`FAIL: ${e}`);
  process.exit(1);
}
console.log(`validate: ${objs.length} objects in ${dir} valid and consistent`);

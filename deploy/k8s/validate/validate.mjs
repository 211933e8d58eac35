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

if (errors.length) {
  for (const e of errors) console.error(`FAIL: ${e}`);
  process.exit(1);
}
console.log(`validate: ${objs.length} objects in ${dir} valid and consistent`);

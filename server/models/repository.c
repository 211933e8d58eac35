/*
 * repository.c - the model repository manager: scanning, version policies, loading on the
 * repository thread, the reference-counted serving table, ModelLoad/ModelUnload.
 *
 * DESIGN
 * See repository.h for the layout, the policy format, change detection and the table. This
 * file owns:
 *   - the pure helpers (policy parsing and selection, version names, directory signatures,
 *     the scan), unit-tested in tests/server/test_repository.c;
 *   - serving instances: tpu__model_t with its model, batcher and engine-work measurements,
 *     created by instance_load and freed by bury once their last reference is gone;
 *   - the repository thread and its state (mstate_t/vstate_t), which nothing else touches.
 * Reconciling a model: the candidates are its versions on disk, minus those unloaded by
 * request and those whose last load failed on the same files; the policy picks among them,
 * and versions pinned by ModelLoad are added. Missing or changed targets are loaded highest
 * first, one at a time; every result is published at once (a new READY version serves
 * unversioned requests as soon as it is ready). When a load fails the targets are recomputed,
 * so a corrupt newest version leaves the previous one serving. Only when every target has
 * settled are ready versions outside the targets retired.
 *
 * Lock rules: `mu` guards table, ops, grave, live, rescan and stopping (see repository.h); it
 * is never held across a scan, a load, a batcher stop or a free. tpu__model_release must not be
 * called with `mu` held (it takes it). The ops queue is a tpu_qlist_t (fifo.h) under `mu`, not a
 * tpu_fifo_t with a lock of its own: the thread sleeps on one condition for ops, graves,
 * rescans and the poll timer alike.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "fifo.h"
#include "file.h"
#include "log.h"
#include "audit_wire.h"
#include "server_int.h"
#include "thread.h"
#include "tpu_text.h"

/* ---- policy ---- */

void tpu_repo_policy_default(tpu_repo_policy_t *p) {
  memset(p, 0, sizeof *p);
  p->kind = TPU_REPO_POLICY_LATEST;
  p->latest = 1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

int tpu_repo_policy_parse(const char *text, size_t len, tpu_repo_policy_t *out, char *err,
                          size_t errlen) {
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  int rc = -1;
  tpu_repo_policy_t p;
  tpu_repo_policy_default(&p);
  if (!root) {
    snprintf(err, errlen, "not valid JSON (line %d: %s); expected {\"latest\": N}, "
             "{\"specific\": [V, ...]} or {\"all\": true}", je.line, je.text);
    return -1;
  }
  if (!json_is_object(root) || json_object_size(root) != 1) {
    snprintf(err, errlen, "expected an object with exactly one key: {\"latest\": N}, "
             "{\"specific\": [V, ...]} or {\"all\": true}");
    goto out;
  }
  json_t *v;
  if ((v = json_object_get(root, "latest"))) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000) {
      snprintf(err, errlen, "\"latest\": expected an integer from 1 to 1000000");
      goto out;
    }
    p.kind = TPU_REPO_POLICY_LATEST;
    p.latest = (unsigned)json_integer_value(v);
  } else if ((v = json_object_get(root, "specific"))) {
    if (!json_is_array(v) || json_array_size(v) == 0 ||
        json_array_size(v) > TPU_REPO_MAX_SPECIFIC) {
      snprintf(err, errlen, "\"specific\": expected an array of 1 to %d versions",
               TPU_REPO_MAX_SPECIFIC);
      goto out;
    }
    p.kind = TPU_REPO_POLICY_SPECIFIC;
    for (size_t i = 0; i < json_array_size(v); i++) {
      json_t *e = json_array_get(v, i);
      if (!json_is_integer(e) || json_integer_value(e) < 1) {
        snprintf(err, errlen, "\"specific\"[%zu]: expected a positive integer version", i);
        goto out;
      }
      p.specific[p.nspecific++] = (uint64_t)json_integer_value(e);
    }
    qsort(p.specific, p.nspecific, sizeof p.specific[0], cmp_u64);
    for (size_t i = 1; i < p.nspecific; i++) {
      if (p.specific[i] == p.specific[i - 1]) {
        snprintf(err, errlen, "\"specific\": version %llu is listed twice",
                 (unsigned long long)p.specific[i]);
        goto out;
      }
    }
  } else if ((v = json_object_get(root, "all"))) {
    if (!json_is_true(v)) {
      snprintf(err, errlen, "\"all\": expected true");
      goto out;
    }
    p.kind = TPU_REPO_POLICY_ALL;
  } else {
    snprintf(err, errlen, "unknown key \"%s\"; expected \"latest\", \"specific\" or \"all\"",
             json_object_iter_key(json_object_iter(root)));
    goto out;
  }
  *out = p;
  rc = 0;
out:
  json_decref(root);
  return rc;
}

void tpu_repo_policy_format(const tpu_repo_policy_t *p, char *buf, size_t len) {
  if (p->kind == TPU_REPO_POLICY_ALL) {
    snprintf(buf, len, "{\"all\": true}");
  } else if (p->kind == TPU_REPO_POLICY_LATEST) {
    snprintf(buf, len, "{\"latest\": %u}", p->latest);
  } else {
    size_t o = (size_t)snprintf(buf, len, "{\"specific\": [");
    for (size_t i = 0; i < p->nspecific && o < len; i++)
      o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "",
                            (unsigned long long)p->specific[i]);
    if (o < len) snprintf(buf + o, len - o, "]}");
  }
}

size_t tpu_repo_policy_select(const tpu_repo_policy_t *p, const uint64_t *cands, size_t n,
                              uint64_t *out) {
  size_t k = 0;
  switch (p->kind) {
  case TPU_REPO_POLICY_ALL:
    for (size_t i = 0; i < n; i++) out[k++] = cands[i];
    break;
  case TPU_REPO_POLICY_LATEST:
    for (size_t i = n > p->latest ? n - p->latest : 0; i < n; i++) out[k++] = cands[i];
    break;
  case TPU_REPO_POLICY_SPECIFIC:
    for (size_t i = 0; i < n; i++)
      if (bsearch(&cands[i], p->specific, p->nspecific, sizeof p->specific[0], cmp_u64))
        out[k++] = cands[i];
    break;
  }
  return k;
}

int tpu_repo_parse_version(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '0' || strlen(s) > 18) return -1;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 0;
}

/* ---- scanning ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

typedef struct {
  char name[256];
  uint64_t h;
} entry_sig_t;

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry_sig_t *)a)->name, ((const entry_sig_t *)b)->name);
}

int tpu_repo_valid_name(const char *name) {
  size_t n = 0;
  if (!name || name[0] == '.') return 0;
  for (; name[n]; n++) {
    char c = name[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return n >= 1 && n <= TPU_REPO_MAX_NAME;
}

/* An errno that means "not there" rather than "there but unreadable". */
static int gone(int e) { return e == ENOENT || e == ENOTDIR; }

/* The next entry of d, or NULL at the end (*rc = 0) or on an error (*rc = errno: the listing
 * is incomplete, so nothing may be concluded from what it lacks). */
static struct dirent *next_entry(DIR *d, int *rc) {
  errno = 0;
  struct dirent *e = readdir(d);
  *rc = e ? 0 : errno;
  return e;
}

int tpu_repo_dir_sig(const char *dir, uint64_t *sig) {
  DIR *d = opendir(dir);
  if (!d) return errno ? errno : EIO;
  entry_sig_t *e = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  char path[8192];
  int rc = 0;
  while ((de = next_entry(d, &rc))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      entry_sig_t *g = realloc(e, cap * sizeof *e);
      if (!g) {
        rc = ENOMEM;
        break;
      }
      e = g;
    }
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    memset(&sb, 0, sizeof sb);
    if (stat(path, &sb) != 0) {
      if (errno == ENOENT) continue; /* vanished meanwhile: the next scan sees the change */
      if (errno != ELOOP) {          /* a looping symlink is an entry like any other */
        rc = errno;
        break;
      }
    }
    snprintf(e[n].name, sizeof e[n].name, "%s", de->d_name);
    uint64_t f[6] = {(uint64_t)sb.st_ino, (uint64_t)sb.st_size,
                     (uint64_t)sb.st_mtim.tv_sec, (uint64_t)sb.st_mtim.tv_nsec,
                     (uint64_t)sb.st_ctim.tv_sec, (uint64_t)sb.st_ctim.tv_nsec};
    e[n].h = fnv(0xcbf29ce484222325ULL, f, sizeof f);
    n++;
  }
  closedir(d);
  if (rc) {
    free(e);
    return gone(rc) ? EIO : rc; /* the directory itself was there: not "gone" */
  }
  if (n) qsort(e, n, sizeof *e, cmp_entry); /* readdir order is not stable across renames */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) {
    h = fnv(h, e[i].name, strlen(e[i].name) + 1);
    h = fnv(h, &e[i].h, sizeof e[i].h);
  }
  free(e);
  *sig = h ? h : 1;
  return 0;
}

static int cmp_vscan(const void *a, const void *b) {
  return cmp_u64(&((const tpu_repo_vscan_t *)a)->version, &((const tpu_repo_vscan_t *)b)->version);
}

static int cmp_mscan(const void *a, const void *b) {
  return strcmp(((const tpu_repo_mscan_t *)a)->name, ((const tpu_repo_mscan_t *)b)->name);
}

static void problem(tpu_repo_scan_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(tpu_repo_scan_t *s, const char *fmt, ...) {
  tpu_repo_problem_t *g = realloc(s->problems, (s->nproblems + 1) * sizeof *g);
  if (!g) return; /* out of memory: the problem goes unreported this scan, nothing else */
  s->problems = g;
  va_list ap;
  va_start(ap, fmt);
  tpu_verrf(g[s->nproblems].text, sizeof g[0].text, fmt, ap);
  va_end(ap);
  s->nproblems++;
}

#define POLICY_MAX_BYTES 8191

/* Reads <mdir>/policy.json into m (policy_sig, policy_ok, policy_unread, policy, policy_err). */
static void scan_policy(tpu_repo_scan_t *s, const char *mdir, tpu_repo_mscan_t *m) {
  char path[8192], q[200];
  struct stat sb;
  if ((size_t)snprintf(path, sizeof path, "%s/policy.json", mdir) >= sizeof path) return;
  if (stat(path, &sb) != 0) {
    if (!gone(errno)) {
      m->policy_unread = 1;
      problem(s, "model '%s': policy.json cannot be read (%s); keeping the version policy it "
              "had", tpu_log_escape(q, sizeof q, m->name), strerror(errno));
    }
    return;
  }
  uint64_t f[5] = {(uint64_t)sb.st_ino, (uint64_t)sb.st_size, (uint64_t)sb.st_mtim.tv_sec,
                   (uint64_t)sb.st_mtim.tv_nsec, (uint64_t)sb.st_ctim.tv_nsec};
  m->policy_sig = fnv(0xcbf29ce484222325ULL, f, sizeof f);
  if (!m->policy_sig) m->policy_sig = 1;
  void *buf;
  size_t len;
  char err[300];
  int e = tpu_file_read(path, POLICY_MAX_BYTES, NULL, &buf, &len, NULL, err, sizeof err);
  if (e && tpu_file_transient(e)) { /* descriptors or memory: not the file's fault */
    m->policy_sig = 0;
    m->policy_unread = 1;
    problem(s, "model '%s': policy.json cannot be read now (%s); keeping the version policy "
            "it had", tpu_log_escape(q, sizeof q, m->name), strerror(e));
    return;
  }
  if (e) { /* the log line names the model: keep the reason without the path */
    const char *why = strstr(err, ": ") ? strstr(err, ": ") + 2 : err;
    snprintf(m->policy_err, sizeof m->policy_err, "%.200s", why);
    return;
  }
  char perr[200];
  if (tpu_repo_policy_parse(buf, len, &m->policy, perr, sizeof perr) == 0)
    m->policy_ok = 1;
  else
    snprintf(m->policy_err, sizeof m->policy_err, "%s", perr);
  free(buf);
}

/* Lists the versions of model directory mdir into m. Returns 0, or the errno that kept the
 * directory from being listed whole. */
static int scan_model(tpu_repo_scan_t *s, const char *mdir, tpu_repo_mscan_t *m) {
  char vdir[8192 + 300], q[200];
  DIR *vd = opendir(mdir);
  if (!vd) return errno ? errno : EIO;
  size_t vcap = 0;
  struct dirent *ve;
  int rc = 0;
  while ((ve = next_entry(vd, &rc))) {
    uint64_t version;
    if (tpu_repo_parse_version(ve->d_name, &version) != 0) continue;
    snprintf(vdir, sizeof vdir, "%s/%s", mdir, ve->d_name);
    struct stat sb;
    uint64_t sig = 0;
    int e = stat(vdir, &sb) != 0 ? errno : !S_ISDIR(sb.st_mode) ? ENOTDIR : 0;
    if (gone(e)) continue;
    if (!e) e = tpu_repo_dir_sig(vdir, &sig);
    if (gone(e)) continue; /* vanished meanwhile */
    if (e)
      problem(s, "model '%s' version %s: its directory cannot be read (%s); it is kept as it "
              "is (a new version is not loaded) until it can",
              tpu_log_escape(q, sizeof q, m->name), ve->d_name, strerror(e));
    if (m->nv == vcap) {
      vcap = vcap ? vcap * 2 : 4;
      tpu_repo_vscan_t *g = realloc(m->v, vcap * sizeof *g);
      if (!g) {
        rc = ENOMEM;
        break;
      }
      m->v = g;
    }
    m->v[m->nv++] = (tpu_repo_vscan_t){version, sig, e};
  }
  closedir(vd);
  return rc;
}

int tpu_repo_scan(const char *root, tpu_repo_scan_t *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  DIR *d = opendir(root);
  if (!d) {
    snprintf(err, errlen, "%s: %s", root, strerror(errno));
    return -1;
  }
  size_t cap = 0;
  struct dirent *e;
  char mdir[8192], q[200];
  int rc = 0;
  while ((e = next_entry(d, &rc))) {
    if (e->d_name[0] == '.') continue; /* hidden, ".", "..": not ours */
    if ((size_t)snprintf(mdir, sizeof mdir, "%s/%s", root, e->d_name) >= sizeof mdir) continue;
    struct stat sb;
    int se = stat(mdir, &sb) != 0 ? errno : 0;
    if (gone(se) || (!se && !S_ISDIR(sb.st_mode))) continue; /* files at the top: ignored */
    if (!tpu_repo_valid_name(e->d_name)) {
      if (!se)
        problem(out, "directory '%s' skipped: model names are 1-%d bytes of [A-Za-z0-9._-]",
                tpu_log_escape(q, sizeof q, e->d_name), TPU_REPO_MAX_NAME);
      continue;
    }
    tpu_repo_mscan_t m;
    memset(&m, 0, sizeof m);
    memcpy(m.name, e->d_name, strlen(e->d_name) + 1); /* valid: at most TPU_REPO_MAX_NAME */
    int me = se ? se : scan_model(out, mdir, &m);
    if (gone(me)) { /* removed meanwhile */
      free(m.v);
      continue;
    }
    if (me) {
      free(m.v);
      m.v = NULL;
      m.nv = 0;
      m.err = me;
      problem(out, "model '%s': its directory cannot be read (%s); its versions are kept as "
              "they are until it can", tpu_log_escape(q, sizeof q, m.name), strerror(me));
    } else if (!m.nv) { /* not a model: a helper directory, or a model still being created */
      free(m.v);
      continue;
    } else {
      qsort(m.v, m.nv, sizeof *m.v, cmp_vscan);
      scan_policy(out, mdir, &m);
    }
    if (out->n == cap) {
      cap = cap ? cap * 2 : 8;
      tpu_repo_mscan_t *g = realloc(out->m, cap * sizeof *g);
      if (!g) {
        free(m.v);
        rc = ENOMEM;
        break;
      }
      out->m = g;
    }
    out->m[out->n++] = m;
  }
  closedir(d);
  if (rc) { /* a partial listing would read as models removed: report the root unreadable */
    snprintf(err, errlen, "%s: cannot be listed: %s", root, strerror(rc));
    tpu_repo_scan_free(out);
    return -1;
  }
  if (out->n) qsort(out->m, out->n, sizeof *out->m, cmp_mscan);
  return 0;
}

void tpu_repo_scan_free(tpu_repo_scan_t *s) {
  for (size_t i = 0; i < s->n; i++) free(s->m[i].v);
  free(s->m);
  free(s->problems);
  memset(s, 0, sizeof *s);
}

/* ---- the repository's state (repository thread only) ---- */

typedef struct {
  uint64_t version;
  int state;          /* TPUD__MODEL_STATE__MODEL_STATE_* when not serving */
  char reason[512];
  char last_err[512]; /* the last load's error ("" after a success): logged once while it lasts */
  uint64_t disk_sig;  /* latest scan; 0 = not on disk */
  uint64_t tried_sig; /* signature of the files the last load attempt read */
  int pinned;         /* named by a ModelLoad: served whatever the policy says */
  int unloaded;       /* named by a ModelUnload: not served until a ModelLoad */
  int force;          /* load again even if the files did not change */
  int attempted;      /* loaded during the current reconcile (each version once per round) */
  int transient;      /* the last load failed for want of descriptors or memory: retried,
                       * files changed or not, from retry_at_us on */
  uint64_t retry_at_us, retry_delay_us; /* transient retries back off: 1 s doubling to 60 s */
  int seen;           /* scan_update: listed (or kept, being unreadable) by the latest scan */
  unsigned ndraining; /* retired instances still referenced */
  tpu__model_t *inst; /* the serving instance (one reference), or NULL */
} vstate_t;

typedef struct {
  char name[TPU_REPO_MAX_NAME + 1];
  tpu_repo_policy_t policy;
  uint64_t policy_sig;
  int disabled;       /* ModelUnload of every version: only pinned versions serve */
  int force_all;      /* this reconcile retries failed versions (ModelLoad of the model) */
  vstate_t *v;        /* ascending */
  size_t nv;
} mstate_t;

struct tpu__repo {
  tpu_server_t *srv;
  mstate_t *m; /* ascending by name */
  size_t nm;
  int root_warned;
  tpu_repo_problem_t *problems; /* the latest scan's, each logged when it first appeared */
  size_t nproblems;
  pthread_t thread;
  int started;

  pthread_mutex_t mu; /* guards everything below */
  pthread_cond_t cv;
  tpu__models_t *table;
  tpu_qlist_t ops;                  /* tpu__repo_op_t, linked through op->link */
  tpu__model_t *grave;              /* instances whose last reference is gone */
  tpu__model_t *live;               /* every instance not yet freed */
  int rescan, stopping, stopped_compute;
};

static tpu__repo_t *repo_of(tpu_server_t *srv) { return srv->repo; }

/* ---- references ---- */

void tpu__model_retain(tpu__model_t *m) { atomic_fetch_add(&m->refs, 1); }

void tpu__model_release(tpu__model_t *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  if (!m->model && !m->batcher) { /* a status-only entry */
    free(m);
    return;
  }
  tpu__repo_t *r = m->repo;
  pthread_mutex_lock(&r->mu);
  m->grave_next = r->grave;
  r->grave = m;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

tpu__models_t *tpu__models_acquire(tpu_server_t *srv) {
  tpu__repo_t *r = repo_of(srv);
  pthread_mutex_lock(&r->mu);
  tpu__models_t *t = r->table;
  atomic_fetch_add(&t->refs, 1);
  pthread_mutex_unlock(&r->mu);
  return t;
}

void tpu__models_release(tpu__models_t *t) {
  if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
  for (size_t i = 0; i < t->n; i++) tpu__model_release(t->models[i]);
  free(t->models);
  free(t);
}

int tpu__model_absent(tpu_server_t *srv, const char *name, const char *version) {
  uint64_t want = 0;
  if (!name || !*name) return 1;
  if (version && *version && tpu_repo_parse_version(version, &want) != 0) return 1;
  tpu__repo_t *r = repo_of(srv);
  int absent = 1;
  pthread_mutex_lock(&r->mu);
  tpu__models_t *t = r->table;
  for (size_t i = 0; i < t->n && absent; i++)
    if (strcmp(t->models[i]->name, name) == 0 && (!want || t->models[i]->version == want))
      absent = 0;
  pthread_mutex_unlock(&r->mu);
  return absent;
}

tpu__model_t *tpu__server_find_model(tpu_server_t *srv, const char *name, const char *version,
                                     char *msg, size_t msglen) {
  if (!name || !*name) {
    snprintf(msg, msglen, "no model name given");
    return NULL;
  }
  /* Names in messages: at most 64 bytes (and "..."), so the explanation always fits. */
  const char *more = strlen(name) > 64 ? "..." : "";
  uint64_t want = 0;
  if (version && *version && tpu_repo_parse_version(version, &want) != 0) {
    snprintf(msg, msglen, "model '%.64s%s': version '%.40s%s' is not a positive integer", name,
             more, version, strlen(version) > 40 ? "..." : "");
    return NULL;
  }
  tpu__repo_t *r = repo_of(srv);
  tpu__model_t *best = NULL;
  int known = 0, state = 0;
  char reason[256] = "";
  pthread_mutex_lock(&r->mu);
  tpu__models_t *t = r->table;
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (strcmp(m->name, name) != 0) continue;
    known = 1;
    if (want && m->version == want && m->state != TPUD__MODEL_STATE__MODEL_STATE_READY) {
      state = m->state;
      snprintf(reason, sizeof reason, "%.200s", m->reason);
    }
    if (m->state != TPUD__MODEL_STATE__MODEL_STATE_READY) continue;
    if (want ? m->version == want : (!best || m->version > best->version)) best = m;
  }
  if (best) atomic_fetch_add(&best->refs, 1);
  pthread_mutex_unlock(&r->mu);
  if (best) return best;
  if (!known)
    snprintf(msg, msglen, "model '%.64s%s' is not in the repository", name, more);
  else if (want && state)
    snprintf(msg, msglen, "model '%s' has no ready version %llu (it is %s%s%s)", name,
             (unsigned long long)want,
             state == TPUD__MODEL_STATE__MODEL_STATE_LOADING     ? "loading"
             : state == TPUD__MODEL_STATE__MODEL_STATE_FAILED    ? "failed"
             : state == TPUD__MODEL_STATE__MODEL_STATE_UNLOADING ? "unloading"
                                                                 : "not loaded",
             reason[0] ? ": " : "", reason);
  else if (want)
    snprintf(msg, msglen, "model '%s' has no ready version %llu", name, (unsigned long long)want);
  else
    snprintf(msg, msglen, "model '%s' has no ready version", name);
  return NULL;
}

/* ---- instances ---- */

static int model_run(void *ctx, size_t bucket_rows, const void *in, void *out, uint64_t want,
                     char *err, size_t errlen) {
  tpu__model_t *m = ctx;
  int bi = tpu_model_bucket_index(m->model, bucket_rows);
  if (bi < 0) {
    snprintf(err, errlen, "no bucket holds %zu rows", bucket_rows);
    return -1;
  }
  tpu_status_t st = tpu_model_run_want(m->model, (size_t)bi, in, out, want, err, errlen);
  if (st != TPU_OK) {
    if (!err[0]) snprintf(err, errlen, "%s", tpu_strerror(st));
    return -1;
  }
  if ((size_t)bi < m->nbuckets) { /* the systolic-array model's view of this call (metrics) */
    tpu_stats_inc(&m->stats.macs, m->bucket_macs[bi]);
    tpu_stats_inc(&m->stats.sim_cycles, m->bucket_cycles[bi]);
    tpu_stats_inc(&m->stats.sim_slots, m->bucket_slots[bi]);
  }
  return 0;
}

/* The engine work (MACs, simulated systolic cycles and slots) of one call per bucket, from the
 * model's plans (exact, and nothing extra runs). */
static void bucket_costs(tpu__model_t *m, size_t nb) {
  if (nb > TPU_MODEL_MAX_BUCKETS) nb = TPU_MODEL_MAX_BUCKETS;
  for (size_t b = 0; b < nb; b++)
    tpu_model_bucket_cost(m->model, b, &m->bucket_macs[b], &m->bucket_cycles[b],
                          &m->bucket_slots[b]);
  m->nbuckets = nb;
}

static void set_names(tpu__model_t *m, const char *name, uint64_t version) {
  snprintf(m->name, sizeof m->name, "%s", name);
  m->version = version;
  snprintf(m->version_str, sizeof m->version_str, "%llu", (unsigned long long)version);
  snprintf(m->label, sizeof m->label, "model '%s' version %llu", name,
           (unsigned long long)version);
}

/* Loads one version into a new serving instance (one reference, on the live list). Returns 0,
 * or -1 with err. Repository thread (or start-up). */
static int instance_load(tpu__repo_t *r, const char *name, const char *vdir, uint64_t version,
                         tpu__model_t **out, int *transient, char *err, size_t errlen) {
  tpu_server_t *srv = r->srv;
  *out = NULL;
  tpu__model_t *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  set_names(m, name, version);
  m->repo = r;
  atomic_init(&m->refs, 1);
  uint64_t t0 = tpu_now_us();
  tpu_model_load_opts_t lo = {.cancel = &r->srv->load_cancel,
                              .memory_limit = srv->cfg.model_memory_limit,
                              .batch_copies = 1}; /* the batcher's input and output buffers */
  tpu_status_t st = tpu_model_load(srv->engine, vdir, name, version, &lo, &m->model, err, errlen);
  *transient = lo.transient;
  if (st != TPU_OK) {
    if (!err[0]) snprintf(err, errlen, "%s", tpu_strerror(st));
    if (st == TPU_ERANGE) /* the limit: the figures are in err; say which option */
      snprintf(err + strlen(err), errlen - strlen(err), " (--model-memory-limit)");
    free(m);
    return st == TPU_ECANCELED ? 1 : -1;
  }
  m->memory_bytes = lo.memory_bytes;
  size_t nb;
  const size_t *buckets = tpu_model_buckets(m->model, &nb);
  m->nin = tpu_model_input_count(m->model);
  m->nout = tpu_model_output_count(m->model);
  for (size_t i = 0; i < m->nin; i++) {
    const tpu_model_tensor_t *t = tpu_model_input(m->model, i);
    m->in_spec[i] = (tpu_tensor_spec_t){t->name, t->datatype, t->shape, t->rank, t->missing_ok, 0};
  }
  for (size_t j = 0; j < m->nout; j++) {
    const tpu_model_tensor_t *t = tpu_model_output(m->model, j);
    m->out_spec[j] = (tpu_tensor_spec_t){t->name, t->datatype, t->shape, t->rank, 0,
                                         t->on_request};
  }
  m->in_row = tpu_model_in_row_bytes(m->model);
  m->out_row = tpu_model_out_row_bytes(m->model);
  m->batched = tpu_model_batched(m->model);
  /* Payload capture: model.json's payload_capture, else --payload-capture. A model that asks
   * for it is refused by a server without a store rather than served uncaptured. */
  int pc = tpu_model_config(m->model)->payload_capture;
  tpu_audit_t *au = tpu__audit_enter(srv);
  int store = au && tpu_audit_capturing(au);
  if (au) tpu__audit_leave(srv);
  if (pc == TPU_MODEL_CAPTURE_ON && !store) {
    snprintf(err, errlen, "model.json asks for \"payload_capture\": true, but this server has "
             "no payload store (start it with --audit-log and --payload-dir)");
    tpu_model_free(m->model);
    free(m);
    return -1;
  }
  m->capture = store && (pc == TPU_MODEL_CAPTURE_ON ||
                         (pc == TPU_MODEL_CAPTURE_DEFAULT &&
                          strcmp(srv->cfg.payload_capture, "none") != 0));
  const char *fmt = tpu_model_format_name(m->model);
  m->platform = strcmp(fmt, "onnx") == 0 ? "tpud_onnx"
                : strcmp(fmt, "xgboost") == 0 ? "tpud_xgboost" : "tpud";
  m->vmodel = (tpu_vmodel_t){m->label, m->in_spec, m->nin, m->out_spec, m->nout};
  bucket_costs(m, nb);
  tpu_batcher_config_t bc = {
      .name = m->label,
      .max_batch_size = tpu_model_max_batch_size(m->model),
      .buckets = buckets,
      .nbuckets = nb,
      .max_queue_delay_us = tpu_model_max_queue_delay_us(m->model),
      .queue_rows = srv->cfg.queue_rows,
      .in_row_bytes = m->in_row,
      .out_row_bytes = m->out_row,
      .run = model_run,
      .run_ctx = m,
      .stats = &m->stats,
  };
  if (tpu_batcher_create(&bc, &m->batcher) != 0) {
    snprintf(err, errlen, "cannot start its batcher: %s", strerror(errno));
    tpu_model_free(m->model);
    free(m);
    return -1;
  }
  m->state = TPUD__MODEL_STATE__MODEL_STATE_READY;
  const char *sha = tpu_model_sha256(m->model);
  char io[512];
  size_t at = 0;
  for (size_t k = 0; k < m->nin + m->nout && at < sizeof io; k++) {
    const tpu_tensor_spec_t *sp = k < m->nin ? &m->in_spec[k] : &m->out_spec[k - m->nin];
    char shp[128];
    size_t so = (size_t)snprintf(shp, sizeof shp, "[");
    for (size_t d = 0; d < sp->rank && so < sizeof shp; d++)
      so += (size_t)snprintf(shp + so, sizeof shp - so, "%s%lld", d ? "," : "",
                             (long long)sp->shape[d]);
    if (so < sizeof shp) snprintf(shp + so, sizeof shp - so, "]");
    at += (size_t)snprintf(io + at, sizeof io - at, "%s%s '%s' %s %s",
                           k == 0 ? "" : k == m->nin ? "; " : ", ",
                           k < m->nin ? "input" : "output", sp->name, sp->datatype, shp);
  }
  const char *ref = tpu_model_reference_result(m->model), *cal = tpu_model_calibration(m->model);
  tpu_log_info("%s: ready in %llu ms (%s, sha256 %.12s.., warm-up %llu us, memory %.1f MiB) "
               "from %s: %s; %s%s%s, max_batch_size %zu, %zu buckets, max_queue_delay_us %u%s%s",
               m->label, (unsigned long long)((tpu_now_us() - t0 + 500) / 1000),
               tpu_model_format_name(m->model), sha ? sha : "?",
               (unsigned long long)tpu_model_warmup_us(m->model),
               (double)m->memory_bytes / (1 << 20), vdir, io,
               tpu_model_precision_name(tpu_model_precision(m->model)), cal[0] ? " " : "", cal,
               bc.max_batch_size, nb,
               (unsigned)bc.max_queue_delay_us, ref[0] ? "; reference check " : "", ref);
  pthread_mutex_lock(&r->mu);
  m->live_next = r->live;
  if (r->live) r->live->live_prev = m;
  r->live = m;
  pthread_mutex_unlock(&r->mu);
  *out = m;
  return 0;
}

/* Frees an instance whose last reference is gone: its batcher is idle (every call that used it
 * held a reference), so stopping it only joins its thread. */
static void instance_free(tpu__repo_t *r, tpu__model_t *m) {
  pthread_mutex_lock(&r->mu);
  if (m->live_prev)
    m->live_prev->live_next = m->live_next;
  else
    r->live = m->live_next;
  if (m->live_next) m->live_next->live_prev = m->live_prev;
  pthread_mutex_unlock(&r->mu);
  tpu_batcher_free(m->batcher);
  tpu_model_free(m->model);
  free(m);
}

/* ---- the table ---- */

static mstate_t *find_m(tpu__repo_t *r, const char *name) {
  for (size_t i = 0; i < r->nm; i++)
    if (strcmp(r->m[i].name, name) == 0) return &r->m[i];
  return NULL;
}

static vstate_t *find_v(mstate_t *m, uint64_t version) {
  for (size_t i = 0; i < m->nv; i++)
    if (m->v[i].version == version) return &m->v[i];
  return NULL;
}

/* The state shown for a version. */
static int shown_state(const vstate_t *v) {
  if (v->inst) return TPUD__MODEL_STATE__MODEL_STATE_READY;
  if (v->ndraining) return TPUD__MODEL_STATE__MODEL_STATE_UNLOADING;
  return v->state;
}

/* Builds a new table from the repository's state and swaps it in. */
static void publish(tpu__repo_t *r) {
  size_t n = 0;
  for (size_t i = 0; i < r->nm; i++) n += r->m[i].nv;
  tpu__models_t *t = calloc(1, sizeof *t);
  tpu__model_t **a = calloc(n + 1, sizeof *a);
  if (!t || !a) goto oom;
  atomic_init(&t->refs, 1);
  t->models = a;
  for (size_t i = 0; i < r->nm; i++) {
    mstate_t *m = &r->m[i];
    for (size_t j = 0; j < m->nv; j++) {
      vstate_t *v = &m->v[j];
      if (v->inst) {
        tpu__model_retain(v->inst);
        a[t->n++] = v->inst;
        continue;
      }
      tpu__model_t *e = calloc(1, sizeof *e);
      if (!e) goto oom;
      set_names(e, m->name, v->version);
      atomic_init(&e->refs, 1);
      e->state = shown_state(v);
      e->unwanted = v->unloaded || (m->disabled && !v->pinned);
      snprintf(e->reason, sizeof e->reason, "%s",
               v->ndraining && !v->reason[0] ? "draining in-flight requests" : v->reason);
      a[t->n++] = e;
    }
  }
  pthread_mutex_lock(&r->mu);
  tpu__models_t *old = r->table;
  r->table = t;
  pthread_mutex_unlock(&r->mu);
  tpu__models_release(old);
  return;
oom:
  /* Keep the old table: states are shown late, routing is unchanged. */
  tpu_log_error("model repository: out of memory while publishing the model table");
  if (t) {
    for (size_t i = 0; i < t->n; i++) tpu__model_release(a[i]);
  }
  free(a);
  free(t);
}

/* ---- loading, retiring, unloading (repository thread) ---- */

static void vdir_of(tpu__repo_t *r, const mstate_t *m, const vstate_t *v, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s/%llu", r->srv->cfg.models, m->name, (unsigned long long)v->version);
}

/* A version not to try (again) in this reconcile: its last load failed on the files it has now
 * (a transient failure: until its retry time, and once per reconcile). */
static int known_bad(const mstate_t *m, const vstate_t *v) {
  if (v->inst || v->state != TPUD__MODEL_STATE__MODEL_STATE_FAILED || v->force ||
      (m->force_all && !v->attempted))
    return 0;
  if (v->transient && v->tried_sig == v->disk_sig)
    return v->attempted || tpu_now_us() < v->retry_at_us;
  return v->tried_sig == v->disk_sig;
}

/* Loads (or reloads) v. Publishes LOADING first when v is not serving, then the result. */
static void load_version(tpu__repo_t *r, mstate_t *m, vstate_t *v) {
  char vdir[8192 + 300], err[512] = "";
  vdir_of(r, m, v, vdir, sizeof vdir);
  uint64_t sig = v->disk_sig;
  int reload = v->inst != NULL;
  v->force = 0;
  v->attempted = 1;
  if (!reload) {
    v->state = TPUD__MODEL_STATE__MODEL_STATE_LOADING;
    v->reason[0] = 0;
    publish(r);
    tpu_log_info("model '%s' version %llu: loading from %s", m->name,
                 (unsigned long long)v->version, vdir);
  } else {
    tpu_log_info("model '%s' version %llu: files changed; loading them as a new instance",
                 m->name, (unsigned long long)v->version);
  }
  tpu__model_t *inst = NULL;
  int transient = 0;
  int rc = instance_load(r, m->name, vdir, v->version, &inst, &transient, err, sizeof err);
  if (rc == 1) { /* cancelled: the server is stopping; nothing to record against the files */
    tpu_log_info("model '%s' version %llu: load abandoned (server stopping)", m->name,
                 (unsigned long long)v->version);
    if (!reload) {
      v->state = TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE;
      snprintf(v->reason, sizeof v->reason, "load abandoned: the server is stopping");
    }
    publish(r);
    return;
  }
  /* A transient failure (descriptors, memory) says nothing about the files: tried again with
   * the same files, backing off (1 s doubling to 60 s), and logged and audited once while the
   * reason stays the same. */
  int again = rc != 0 && transient && v->transient && strcmp(v->last_err, err) == 0;
  v->transient = rc != 0 && transient;
  if (v->transient) {
    v->retry_delay_us = again ? (v->retry_delay_us < 30000000u ? v->retry_delay_us * 2 : 60000000u)
                              : 1000000u;
    v->retry_at_us = tpu_now_us() + v->retry_delay_us;
  }
  snprintf(v->last_err, sizeof v->last_err, "%s", rc != 0 ? err : "");
  v->tried_sig = sig; /* the signature read before the load: files changed meanwhile differ */
  if (rc != 0) {
    const char *retry = transient ? "will retry (descriptors or memory ran out), backing off"
                                  : "will retry when files change";
    if (reload) {
      snprintf(v->reason, sizeof v->reason,
               "reload failed: %s; still serving the files loaded before", err);
      if (!again) {
        tpu_log_error("model '%s' version %llu: reload failed: %s; the previous instance keeps "
                      "serving; %s",
                      m->name, (unsigned long long)v->version, err, retry);
        tpu__audit_event(r->srv, TPU_AUDIT_KIND_LOAD_FAILED, m->name, v->version, v->reason);
      }
    } else {
      v->state = TPUD__MODEL_STATE__MODEL_STATE_FAILED;
      snprintf(v->reason, sizeof v->reason, "%s", err);
      if (!again) {
        tpu_log_error("model '%s' version %llu: load failed: %s; %s", m->name,
                      (unsigned long long)v->version, err, retry);
        tpu__audit_event(r->srv, TPU_AUDIT_KIND_LOAD_FAILED, m->name, v->version, err);
      }
    }
    publish(r);
    return;
  }
  tpu__model_t *old = v->inst;
  v->inst = inst;
  v->state = TPUD__MODEL_STATE__MODEL_STATE_READY;
  v->reason[0] = 0;
  if (old) v->ndraining++;
  publish(r); /* the new instance serves from here on */
  /* The record says what was verified: the files, and the reference check's result. */
  char what[768];
  const char *ref = tpu_model_reference_result(inst->model);
  tpu_errf(what, sizeof what, "%s%s%s", old ? "files changed: a new instance serves" : vdir,
           ref[0] ? "; reference check " : "", ref);
  tpu__audit_event(r->srv, old ? TPU_AUDIT_KIND_RELOAD : TPU_AUDIT_KIND_LOAD, m->name, v->version,
                   what);
  if (old) {
    tpu_log_info("%s: swapped to the new instance; the old one finishes its in-flight requests",
                 old->label);
    tpu__model_release(old);
  }
}

/* Takes v out of service. unload: fail its queued requests with UNAVAILABLE and wait for the
 * batch in progress (ModelUnload); otherwise its requests finish normally (policy, removal). */
static void retire_version(tpu__repo_t *r, vstate_t *v, int unload, const char *why) {
  tpu__model_t *old = v->inst;
  v->inst = NULL;
  v->ndraining++;
  v->state = TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE;
  snprintf(v->reason, sizeof v->reason, "%s", why);
  publish(r);
  tpu__audit_event(r->srv, TPU_AUDIT_KIND_UNLOAD, old->name, old->version, why);
  tpu_log_info("%s: unloading (%s)%s", old->label, why,
               unload ? "; queued requests fail with UNAVAILABLE"
                      : "; in-flight requests finish first");
  if (unload) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s is being unloaded", old->label);
    tpu_batcher_stop_why(old->batcher, 1, msg);
  }
  tpu__model_release(old);
}

/* Frees the instances whose last reference is gone and updates their versions' states. */
static void bury(tpu__repo_t *r, tpu__model_t *list) {
  int changed = 0;
  while (list) {
    tpu__model_t *next = list->grave_next;
    mstate_t *m = find_m(r, list->name);
    vstate_t *v = m ? find_v(m, list->version) : NULL;
    if (v && v->ndraining) {
      v->ndraining--;
      changed = 1;
    }
    tpu_log_info("%s: unloaded (its last in-flight request finished)", list->label);
    instance_free(r, list);
    list = next;
  }
  if (changed) publish(r);
}

static const char *policy_text(const mstate_t *m, char *buf, size_t len) {
  tpu_repo_policy_format(&m->policy, buf, len);
  return buf;
}

/* Loads what m's policy and pins ask for, then retires what they no longer want. */
static void reconcile(tpu__repo_t *r, mstate_t *m) {
  uint64_t *cand = calloc(m->nv + 1, sizeof *cand), *pick = calloc(m->nv + 1, sizeof *pick);
  char *want = calloc(m->nv + 1, 1);
  if (!cand || !pick || !want) {
    tpu_log_error("model '%s': out of memory while reconciling", m->name);
    goto out;
  }
  for (size_t i = 0; i < m->nv; i++) m->v[i].attempted = 0;
  for (;;) {
    size_t nc = 0;
    for (size_t i = 0; i < m->nv; i++) {
      vstate_t *v = &m->v[i];
      if (v->disk_sig && !v->unloaded && !known_bad(m, v)) cand[nc++] = v->version;
    }
    size_t np = m->disabled ? 0 : tpu_repo_policy_select(&m->policy, cand, nc, pick);
    memset(want, 0, m->nv);
    vstate_t *todo = NULL;
    for (size_t i = 0; i < m->nv; i++) {
      vstate_t *v = &m->v[i];
      int w = v->pinned && v->disk_sig && !known_bad(m, v);
      for (size_t k = 0; !w && k < np; k++) w = pick[k] == v->version;
      want[i] = (char)w;
      if (w && !v->attempted &&
          (!v->inst || v->tried_sig != v->disk_sig || v->force ||
           (v->transient && tpu_now_us() >= v->retry_at_us))) /* a reload to retry */
        todo = v; /* the highest */
    }
    if (!todo || atomic_load(&r->srv->load_cancel)) break; /* stopping: load nothing more */
    load_version(r, m, todo);
  }
  m->force_all = 0;
  char pol[128];
  for (size_t i = 0; i < m->nv; i++) {
    vstate_t *v = &m->v[i];
    char why[256];
    if (v->inst && !want[i] && v->unloaded) {
      /* A version unloaded by request (its replacement, if any, was loaded above): with
       * another version serving, its queued and in-flight requests finish here; with none,
       * they fail UNAVAILABLE at once, as for unloading the model. */
      int other = 0;
      for (size_t k = 0; k < m->nv && !other; k++) other = k != i && m->v[k].inst && want[k];
      retire_version(r, v, !other, "unloaded by request");
    } else if (v->inst && !want[i]) {
      if (!v->disk_sig)
        snprintf(why, sizeof why, "its directory was removed");
      else
        snprintf(why, sizeof why, "not in the version policy %s", policy_text(m, pol, sizeof pol));
      retire_version(r, v, 0, why);
    } else if (!v->inst && !want[i] && v->state != TPUD__MODEL_STATE__MODEL_STATE_FAILED &&
               v->state != TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE) {
      v->state = TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE;
    }
    if (!v->inst && !want[i] && v->state == TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE &&
        !v->ndraining) {
      if (v->unloaded || (m->disabled && !v->pinned))
        snprintf(v->reason, sizeof v->reason, "unloaded by request");
      else if (v->disk_sig)
        snprintf(v->reason, sizeof v->reason, "not in the version policy %s",
                 policy_text(m, pol, sizeof pol));
    }
  }
out:
  free(cand);
  free(pick);
  free(want);
}

/* Drops versions gone from disk with nothing left to show, and models with no versions. */
static void prune(tpu__repo_t *r) {
  for (size_t i = 0; i < r->nm;) {
    mstate_t *m = &r->m[i];
    for (size_t j = 0; j < m->nv;) {
      vstate_t *v = &m->v[j];
      if (!v->disk_sig && !v->inst && !v->ndraining) {
        memmove(v, v + 1, (m->nv - j - 1) * sizeof *v);
        m->nv--;
      } else {
        j++;
      }
    }
    if (m->nv == 0) {
      free(m->v);
      memmove(m, m + 1, (r->nm - i - 1) * sizeof *m);
      r->nm--;
    } else {
      i++;
    }
  }
}

static mstate_t *add_m(tpu__repo_t *r, const char *name) {
  mstate_t *g = realloc(r->m, (r->nm + 1) * sizeof *g);
  if (!g) return NULL;
  r->m = g;
  size_t at = 0;
  while (at < r->nm && strcmp(r->m[at].name, name) < 0) at++;
  memmove(&r->m[at + 1], &r->m[at], (r->nm - at) * sizeof *g);
  r->nm++;
  mstate_t *m = &r->m[at];
  memset(m, 0, sizeof *m);
  snprintf(m->name, sizeof m->name, "%s", name);
  tpu_repo_policy_default(&m->policy);
  return m;
}

static vstate_t *add_v(mstate_t *m, uint64_t version) {
  vstate_t *g = realloc(m->v, (m->nv + 1) * sizeof *g);
  if (!g) return NULL;
  m->v = g;
  size_t at = 0;
  while (at < m->nv && m->v[at].version < version) at++;
  memmove(&m->v[at + 1], &m->v[at], (m->nv - at) * sizeof *g);
  m->nv++;
  vstate_t *v = &m->v[at];
  memset(v, 0, sizeof *v);
  v->version = version;
  v->state = TPUD__MODEL_STATE__MODEL_STATE_UNAVAILABLE;
  return v;
}

/* Logs the scan's problems that the previous scan did not have, and keeps the list. */
static void report_problems(tpu__repo_t *r, tpu_repo_scan_t *s) {
  for (size_t i = 0; i < s->nproblems; i++) {
    int known = 0;
    for (size_t j = 0; j < r->nproblems && !known; j++)
      known = strcmp(s->problems[i].text, r->problems[j].text) == 0;
    if (!known) tpu_log_warn("model repository: %s", s->problems[i].text);
  }
  free(r->problems);
  r->problems = s->problems;
  r->nproblems = s->nproblems;
  s->problems = NULL;
  s->nproblems = 0;
}

/* Updates the repository's view of the disk (no loading). Returns -1 when the root could not
 * be read: the state is then kept as it is (a repository briefly unmounted unloads nothing).
 * Likewise a model or version directory that is there but unreadable keeps its versions'
 * signatures: only what is gone counts as removed. */
static int scan_update(tpu__repo_t *r) {
  tpu_repo_scan_t s;
  char err[512];
  if (tpu_repo_scan(r->srv->cfg.models, &s, err, sizeof err) != 0) {
    if (!r->root_warned)
      tpu_log_warn("model repository %s; serving what is loaded, rescanning later", err);
    r->root_warned = 1;
    return -1;
  }
  if (r->root_warned) tpu_log_info("model repository %s: readable again", r->srv->cfg.models);
  r->root_warned = 0;
  report_problems(r, &s);
  int oom = 0;
  for (size_t i = 0; i < r->nm; i++)
    for (size_t j = 0; j < r->m[i].nv; j++) r->m[i].v[j].seen = 0;
  for (size_t i = 0; i < s.n; i++) {
    tpu_repo_mscan_t *ms = &s.m[i];
    mstate_t *m = find_m(r, ms->name);
    if (ms->err) { /* unreadable: whatever we knew of it stands */
      for (size_t j = 0; m && j < m->nv; j++) m->v[j].seen = 1;
      continue;
    }
    if (!m && !(m = add_m(r, ms->name))) {
      oom = 1;
      break;
    }
    if (ms->policy_unread) {
      /* keep the policy in force and its signature: re-read when it can be */
    } else if (ms->policy_sig != m->policy_sig) {
      char pol[128];
      if (ms->policy_ok) {
        m->policy = ms->policy;
        tpu_log_info("model '%s': version policy %s (policy.json)", m->name,
                     policy_text(m, pol, sizeof pol));
      } else if (ms->policy_sig) {
        tpu_log_error("model '%s': policy.json: %s; keeping version policy %s", m->name,
                      ms->policy_err, policy_text(m, pol, sizeof pol));
      } else {
        tpu_repo_policy_default(&m->policy);
        tpu_log_info("model '%s': policy.json removed; version policy %s", m->name,
                     policy_text(m, pol, sizeof pol));
      }
      m->policy_sig = ms->policy_sig;
    }
    for (size_t j = 0; j < ms->nv; j++) {
      vstate_t *v = find_v(m, ms->v[j].version);
      if (ms->v[j].err) { /* unreadable: a known version stands, a new one waits */
        if (v) v->seen = 1;
        continue;
      }
      if (!v && !(v = add_v(m, ms->v[j].version))) {
        oom = 1;
        break;
      }
      v->disk_sig = ms->v[j].sig;
      v->seen = 1;
    }
  }
  tpu_repo_scan_free(&s);
  if (oom) { /* what was not listed is unknown, not gone: keep it, and load nothing now */
    tpu_log_error("model repository: out of memory while scanning; serving what is loaded");
    return -1;
  }
  for (size_t i = 0; i < r->nm; i++)
    for (size_t j = 0; j < r->m[i].nv; j++)
      if (!r->m[i].v[j].seen) r->m[i].v[j].disk_sig = 0; /* gone from disk */
  return 0;
}

static void sync_all(tpu__repo_t *r) {
  if (scan_update(r) == 0) {
    for (size_t i = 0; i < r->nm; i++) reconcile(r, &r->m[i]);
    prune(r);
  }
  publish(r);
}

/* ---- ModelLoad / ModelUnload ---- */

static void serving_versions(mstate_t *m, tpu__repo_op_t *op) {
  op->nversions = 0;
  for (size_t i = 0; m && i < m->nv && op->nversions < 64; i++) {
    if (!m->v[i].inst) continue;
    snprintf(op->versions[op->nversions], sizeof op->versions[0], "%llu",
             (unsigned long long)m->v[i].version);
    op->version_ptrs[op->nversions] = op->versions[op->nversions];
    op->nversions++;
  }
}

static void do_op(tpu__repo_t *r, tpu__repo_op_t *op) {
  op->code = TPU_CODE_OK;
  op->msg[0] = 0;
  if (op->load) scan_update(r); /* load what is on disk now */
  mstate_t *m = find_m(r, op->name);
  vstate_t *v = m && op->version ? find_v(m, op->version) : NULL;
  if (!m) {
    op->code = TPU_CODE_NOT_FOUND;
    snprintf(op->msg, sizeof op->msg, "model '%s' is not in the repository",
             op->name);
    goto done;
  }
  if (op->version && (!v || (op->load && !v->disk_sig))) {
    op->code = TPU_CODE_NOT_FOUND;
    snprintf(op->msg, sizeof op->msg, "model '%s' has no version %llu in the "
             "repository", op->name, (unsigned long long)op->version);
    goto done;
  }
  if (op->load && atomic_load(&r->srv->load_cancel)) {
    op->code = TPU_CODE_UNAVAILABLE;
    snprintf(op->msg, sizeof op->msg, "server is shutting down: no model loads");
    goto done;
  }
  if (op->load) {
    if (v) {
      v->pinned = 1;
      v->unloaded = 0;
      if (!v->inst) v->force = 1;
      tpu_log_info("model '%s' version %llu: load requested", m->name,
                   (unsigned long long)v->version);
    } else {
      m->disabled = 0;
      m->force_all = 1;
      for (size_t i = 0; i < m->nv; i++) m->v[i].unloaded = 0;
      tpu_log_info("model '%s': load requested", m->name);
    }
    for (size_t i = 0; i < r->nm; i++) reconcile(r, &r->m[i]);
    prune(r);
    publish(r);
    m = find_m(r, op->name);
    v = m && op->version ? find_v(m, op->version) : NULL;
    serving_versions(m, op);
    if (atomic_load(&r->srv->load_cancel) && (op->version ? !(v && v->inst) : !op->nversions)) {
      op->code = TPU_CODE_UNAVAILABLE;
      snprintf(op->msg, sizeof op->msg,
               "server is shutting down: the load of model '%s' was abandoned", op->name);
    } else if (op->version ? !(v && v->inst) : op->nversions == 0) {
      op->code = TPU_CODE_FAILED_PRECONDITION;
      const vstate_t *bad = v;
      for (size_t i = 0; !bad && m && i < m->nv; i++)
        if (m->v[m->nv - 1 - i].state == TPUD__MODEL_STATE__MODEL_STATE_FAILED)
          bad = &m->v[m->nv - 1 - i];
      if (bad)
        snprintf(op->msg, sizeof op->msg, "model '%s' version %llu: load failed: "
                 "%.300s", op->name, (unsigned long long)bad->version,
                 bad->reason[0] ? bad->reason : "unknown error"); /* msg_text: 512 */
      else
        snprintf(op->msg, sizeof op->msg, "model '%s': no version could be "
                 "loaded", op->name);
    }
    goto done;
  }
  /* unload. One version: it is marked and reconcile does the rest, loading the version the
   * policy picks instead (a rollback) before retiring this one, so unversioned requests always
   * find a ready version. The whole model: every version goes now, queued requests fail. */
  op->nversions = 0;
  for (size_t i = 0; i < m->nv; i++) {
    vstate_t *u = &m->v[i];
    if (v && u != v) continue;
    u->unloaded = v != NULL;
    u->pinned = 0;
    if (u->inst) {
      snprintf(op->versions[op->nversions], sizeof op->versions[0], "%llu",
               (unsigned long long)u->version);
      op->version_ptrs[op->nversions] = op->versions[op->nversions];
      op->nversions++;
      if (!v) retire_version(r, u, 1, "unloaded by request");
    }
  }
  if (!v) m->disabled = 1;
  if (v)
    tpu_log_info("model '%s' version %llu: unload requested (%s)", m->name,
                 (unsigned long long)v->version, op->nversions ? "unloaded" : "was not loaded");
  else
    tpu_log_info("model '%s': unload of every version requested: %zu unloaded; new versions "
                 "stay unloaded until a ModelLoad", m->name, op->nversions);
  reconcile(r, m); /* may bring an older version back under the policy */
  publish(r);
done:
  op->done(op); /* the caller's continuation: its audit record, then its answer */
}

/* ---- the thread ---- */

static void *repo_main(void *arg) {
  tpu__repo_t *r = arg;
  unsigned poll = r->srv->cfg.poll_seconds;
  uint64_t next_poll = tpu_now_us() + (uint64_t)poll * 1000000u;
  pthread_mutex_lock(&r->mu);
  while (!r->stopping) {
    if (r->grave) {
      tpu__model_t *list = r->grave;
      r->grave = NULL;
      pthread_mutex_unlock(&r->mu);
      bury(r, list);
      pthread_mutex_lock(&r->mu);
      continue;
    }
    tpu_qnode_t *n = tpu_qlist_pop(&r->ops);
    if (n) {
      pthread_mutex_unlock(&r->mu);
      do_op(r, tpu_container_of(n, tpu__repo_op_t, link));
      pthread_mutex_lock(&r->mu);
      continue;
    }
    uint64_t now = tpu_now_us();
    if (r->rescan || (poll && now >= next_poll)) {
      if (r->rescan) tpu_log_info("model repository: rescanning (SIGHUP)");
      r->rescan = 0;
      pthread_mutex_unlock(&r->mu);
      sync_all(r);
      pthread_mutex_lock(&r->mu);
      next_poll = tpu_now_us() + (uint64_t)poll * 1000000u;
      continue;
    }
    if (poll) {
      struct timespec ts = {.tv_sec = (time_t)(next_poll / 1000000u),
                            .tv_nsec = (long)(next_poll % 1000000u) * 1000};
      pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    } else {
      pthread_cond_wait(&r->cv, &r->mu);
    }
  }
  tpu_qnode_t *ops = tpu_qlist_take_all(&r->ops);
  pthread_mutex_unlock(&r->mu);
  while (ops) {
    tpu_qnode_t *next = ops->next;
    tpu__repo_op_t *op = tpu_container_of(ops, tpu__repo_op_t, link);
    op->code = TPU_CODE_UNAVAILABLE;
    snprintf(op->msg, sizeof op->msg, "server is shutting down");
    op->done(op);
    ops = next;
  }
  return NULL;
}

int tpu__repo_create(tpu_server_t *srv, tpu__repo_t **out, char *err, size_t errlen) {
  *out = NULL;
  tpu__repo_t *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  r->srv = srv;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  r->table = calloc(1, sizeof *r->table);
  if (!r->table) {
    snprintf(err, errlen, "out of memory");
    goto fail;
  }
  atomic_init(&r->table->refs, 1);
  srv->repo = r; /* the start-up loads publish through srv */
  sync_all(r);
  if (srv->cfg.poll_seconds)
    tpu_log_info("model repository %s: rescanning every %u s and on SIGHUP", srv->cfg.models,
                 srv->cfg.poll_seconds);
  else
    tpu_log_info("model repository %s: rescanning on SIGHUP (polling disabled)",
                 srv->cfg.models);
  if (tpu_thread_create(&r->thread, repo_main, r) != 0) {
    snprintf(err, errlen, "cannot start the repository thread: %s", strerror(errno));
    goto fail;
  }
  r->started = 1;
  *out = r;
  return 0;
fail:
  srv->repo = NULL;
  tpu__repo_free(r);
  return -1;
}

void tpu__repo_rescan(tpu__repo_t *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->rescan = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

int tpu__repo_submit(tpu__repo_t *r, tpu__repo_op_t *op) {
  pthread_mutex_lock(&r->mu);
  if (r->stopping) {
    pthread_mutex_unlock(&r->mu);
    return -1;
  }
  tpu_qlist_push(&r->ops, &op->link);
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

void tpu__repo_cancel_loads(tpu__repo_t *r) {
  if (r) atomic_store(&r->srv->load_cancel, 1);
}


void tpu__repo_stop(tpu__repo_t *r, int abort) {
  if (!r) return;
  atomic_store(&r->srv->load_cancel, 1); /* a load in progress stops at its next check */
  pthread_mutex_lock(&r->mu);
  r->stopping = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (r->started) {
    pthread_join(r->thread, NULL);
    r->started = 0;
  }
  /* The thread is gone: nothing adds instances any more, so the list can be walked with the
   * lock dropped around each stop (a stop joins a thread whose done callback never takes mu). */
  pthread_mutex_lock(&r->mu);
  tpu__model_t *m = r->live;
  pthread_mutex_unlock(&r->mu);
  for (; m; m = m->live_next) tpu_batcher_stop(m->batcher, abort);
}

void tpu__repo_free(tpu__repo_t *r) {
  if (!r) return;
  tpu__repo_stop(r, 1);
  for (size_t i = 0; i < r->nm; i++) {
    for (size_t j = 0; j < r->m[i].nv; j++) {
      tpu__model_t *inst = r->m[i].v[j].inst;
      r->m[i].v[j].inst = NULL;
      tpu__model_release(inst);
    }
    free(r->m[i].v);
  }
  free(r->m);
  r->m = NULL;
  r->nm = 0;
  pthread_mutex_lock(&r->mu);
  tpu__models_t *t = r->table;
  r->table = NULL;
  pthread_mutex_unlock(&r->mu);
  tpu__models_release(t);
  /* Everything released: the grave holds every instance left. */
  tpu__model_t *g = r->grave;
  r->grave = NULL;
  while (g) {
    tpu__model_t *next = g->grave_next;
    instance_free(r, g);
    g = next;
  }
  /* Instances still referenced (a caller leaked a reference) are freed regardless. */
  while (r->live) instance_free(r, r->live);
  if (r->srv && r->srv->repo == r) r->srv->repo = NULL;
  free(r->problems);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

size_t tpu__models_ready(tpu_server_t *srv) {
  tpu__models_t *t = tpu__models_acquire(srv);
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++)
    n += t->models[i]->state == TPUD__MODEL_STATE__MODEL_STATE_READY;
  tpu__models_release(t);
  return n;
}

/* A model the repository is trying to serve but that has no ready version: one of its versions
 * is LOADING or FAILED (and not unloaded by request) and none is READY. Versions UNAVAILABLE
 * (unloaded, outside the version policy), UNLOADING, or FAILED and then unloaded by request are
 * not being served on purpose and do not count. */
static int unready_model(const tpu__models_t *t, size_t i) {
  const tpu__model_t *m = t->models[i];
  if (m->unwanted || (m->state != TPUD__MODEL_STATE__MODEL_STATE_LOADING &&
                      m->state != TPUD__MODEL_STATE__MODEL_STATE_FAILED))
    return 0;
  for (size_t k = 0; k < t->n; k++)
    if (t->models[k]->state == TPUD__MODEL_STATE__MODEL_STATE_READY &&
        strcmp(t->models[k]->name, m->name) == 0)
      return 0;
  return 1;
}

int tpu__models_server_ready(tpu_server_t *srv, int strict, char *why, size_t whylen) {
  tpu__models_t *t = tpu__models_acquire(srv);
  size_t ready = 0;
  for (size_t i = 0; i < t->n; i++)
    ready += t->models[i]->state == TPUD__MODEL_STATE__MODEL_STATE_READY;
  int ok = ready > 0;
  if (!ok) snprintf(why, whylen, "no model is ready");
  for (size_t i = 0; ok && strict && i < t->n; i++) {
    if (!unready_model(t, i)) continue;
    const tpu__model_t *m = t->models[i];
    ok = 0;
    if (m->state == TPUD__MODEL_STATE__MODEL_STATE_FAILED)
      snprintf(why, whylen, "model '%s' has no ready version (version %s failed: %.200s); "
               "--strict-readiness needs every configured model ready", m->name,
               m->version_str, m->reason[0] ? m->reason : "no reason recorded");
    else
      snprintf(why, whylen, "model '%s' is still loading (version %s); --strict-readiness "
               "needs every configured model ready", m->name, m->version_str);
  }
  tpu__models_release(t);
  return ok;
}

/*
 * payload.c - the payload store (payload.h): entries built on engine threads, staged and
 * written by the audit writer, rotation and retention, and the offline reader.
 */
#define _GNU_SOURCE
#include "payload.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <pthread.h>

#include "audit_int.h"
#include "file.h"
#include "log.h"
#include "tpu_text.h"

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) {
  return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- the key ---- */

static int unhex(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int tpu_payload_load_key(const char *path, tpu_payload_key_t *key, char *err, size_t errlen) {
  void *buf = NULL;
  size_t len = 0;
  if (tpu_file_read(path, 4096, NULL, &buf, &len, NULL, err, errlen) != 0) return -1;
  unsigned char *b = buf;
  int rc = -1;
  size_t t = len;
  while (t > 0 && (b[t - 1] == '\n' || b[t - 1] == '\r')) t--;
  if (len == TPU_PAYLOAD_KEY_BYTES) {
    memcpy(key->key, b, TPU_PAYLOAD_KEY_BYTES);
    rc = 0;
  } else if (t == 2 * TPU_PAYLOAD_KEY_BYTES) {
    rc = 0;
    for (size_t i = 0; i < TPU_PAYLOAD_KEY_BYTES && rc == 0; i++) {
      int hi = unhex(b[2 * i]), lo = unhex(b[2 * i + 1]);
      if (hi < 0 || lo < 0) rc = -1;
      else key->key[i] = (uint8_t)(hi << 4 | lo);
    }
  }
  if (rc != 0)
    snprintf(err, errlen, "%s: a payload key is 32 bytes, or 64 hex digits (e.g. `openssl rand "
             "-hex 32`); this file has %zu bytes", path, len);
  OPENSSL_cleanse(buf, len);
  free(buf);
  if (rc == 0) {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(key->key, TPU_PAYLOAD_KEY_BYTES, md, &n, tpu__audit_sha256_md(), NULL);
    memcpy(key->id, md, sizeof key->id);
  }
  return rc;
}

/* ---- building an entry (engine thread) ---- */

/* A decimal, without printf (the header is built for every captured request). */
static void add_int(tpu_buf_t *h, int64_t v) {
  char d[24];
  int n = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do d[sizeof d - 1 - n++] = (char)('0' + u % 10); while ((u /= 10) != 0);
  if (v < 0) d[sizeof d - 1 - n++] = '-';
  tpu_buf_add(h, d + sizeof d - n, (size_t)n);
}

static void add_tensor_header(tpu_buf_t *h, const tpu_payload_tensor_t *t, size_t rows,
                              size_t bytes) {
  tpu_buf_adds(h, "{\"name\":");
  tpu__audit_json_str(h, t->name);
  tpu_buf_adds(h, ",\"datatype\":");
  tpu__audit_json_str(h, t->datatype);
  tpu_buf_adds(h, ",\"shape\":[");
  for (size_t d = 0; d < t->rank; d++) {
    if (d) tpu_buf_add(h, ",", 1);
    add_int(h, t->shape[d] < 0 ? (int64_t)rows : t->shape[d]);
  }
  tpu_buf_adds(h, "],\"bytes\":");
  add_int(h, (int64_t)bytes);
  tpu_buf_add(h, "}", 1);
}

/* Each engine thread keeps one AES-256-GCM context keyed once (a new context and key schedule
 * per entry cost 0.8 us of a 0.3 us seal, measured), and a nonce of its own: a random 8-byte
 * prefix drawn when the thread first seals (and again every 2^32 entries) and a 4-byte counter,
 * the deterministic construction of NIST SP 800-38D 8.2.1, so no two entries under one key share
 * a nonce without drawing the DRBG (1.8 us) per entry. */
typedef struct {
  EVP_CIPHER_CTX *ctx;
  uint8_t key[TPU_PAYLOAD_KEY_BYTES];
  uint8_t prefix[8];
  uint32_t counter;
  int keyed, fresh;
} sealer_t;

static pthread_key_t sealer_key;
static pthread_once_t sealer_once = PTHREAD_ONCE_INIT;
static EVP_CIPHER *gcm;

static void sealer_free(void *p) {
  sealer_t *s = p;
  EVP_CIPHER_CTX_free(s->ctx);
  OPENSSL_cleanse(s, sizeof *s);
  free(s);
}

static void sealer_init(void) {
  gcm = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
  (void)pthread_key_create(&sealer_key, sealer_free);
}

/* Seals the body of entry e (body_len bytes after its head) in place and appends the tag. */
static int seal(const tpu_payload_key_t *key, unsigned char *e, size_t body_len) {
  pthread_once(&sealer_once, sealer_init);
  sealer_t *s = pthread_getspecific(sealer_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || !(s->ctx = EVP_CIPHER_CTX_new()) || pthread_setspecific(sealer_key, s) != 0) {
      if (s) EVP_CIPHER_CTX_free(s->ctx);
      free(s);
      return -1;
    }
    s->fresh = 1;
  }
  if (!s->keyed || memcmp(s->key, key->key, sizeof s->key) != 0) {
    if (EVP_EncryptInit_ex(s->ctx, gcm ? gcm : EVP_aes_256_gcm(), NULL, key->key, NULL) != 1)
      return -1;
    memcpy(s->key, key->key, sizeof s->key);
    s->keyed = 1;
    s->fresh = 1; /* another key: a fresh prefix anyway */
  }
  if (s->fresh || s->counter == UINT32_MAX) {
    if (RAND_bytes(s->prefix, sizeof s->prefix) != 1) return -1;
    s->counter = 0;
    s->fresh = 0;
  }
  unsigned char *nonce = e + 16, *body = e + TPU_PAYLOAD_ENTRY_HEAD;
  memcpy(nonce, s->prefix, 8);
  put32(nonce + 8, ++s->counter);
  memcpy(e + 8, key->id, 8);
  int n = 0, fin = 0;
  int ok = EVP_EncryptInit_ex(s->ctx, NULL, NULL, NULL, nonce) == 1 &&
           EVP_EncryptUpdate(s->ctx, NULL, &n, e, TPU_PAYLOAD_ENTRY_HEAD) == 1 &&
           EVP_EncryptUpdate(s->ctx, body, &n, body, (int)body_len) == 1 &&
           EVP_EncryptFinal_ex(s->ctx, body + n, &fin) == 1 && (size_t)(n + fin) == body_len &&
           EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, TPU_PAYLOAD_TAG_BYTES,
                               body + body_len) == 1;
  return ok ? 0 : -1;
}

int tpu_payload_build(const tpu_payload_key_t *key, const char *model, const char *version,
                      size_t rows, const tpu_payload_tensor_t *in, size_t nin,
                      const tpu_payload_tensor_t *out, size_t nout, tpu_payload_blob_t **blob) {
  *blob = NULL;
  if (nin > TPU_PAYLOAD_MAX_TENSORS || nout > TPU_PAYLOAD_MAX_TENSORS) return -1;
  tpu_buf_t h = {0};
  size_t tensor_bytes = 0;
  (void)tpu_buf_reserve(&h, 256 + 128 * (nin + nout)); /* one allocation, as a rule */
  tpu_buf_adds(&h, "{\"model\":");
  tpu__audit_json_str(&h, model);
  tpu_buf_adds(&h, ",\"version\":");
  tpu__audit_json_str(&h, version);
  tpu_buf_adds(&h, ",\"rows\":");
  add_int(&h, (int64_t)rows);
  tpu_buf_adds(&h, ",\"inputs\":[");
  for (size_t i = 0; i < nin; i++) {
    if (i) tpu_buf_add(&h, ",", 1);
    add_tensor_header(&h, &in[i], rows, in[i].rows * in[i].row_bytes);
    tensor_bytes += in[i].rows * in[i].row_bytes;
  }
  tpu_buf_adds(&h, "],\"outputs\":[");
  for (size_t i = 0; i < nout; i++) {
    if (i) tpu_buf_add(&h, ",", 1);
    add_tensor_header(&h, &out[i], rows, out[i].rows * out[i].row_bytes);
    tensor_bytes += out[i].rows * out[i].row_bytes;
  }
  tpu_buf_adds(&h, "]}");
  if (h.oom || h.len > UINT32_MAX / 2 || tensor_bytes > UINT32_MAX / 2) {
    tpu_buf_free(&h);
    return -1;
  }
  size_t body_len = 4 + h.len + tensor_bytes;
  size_t len = TPU_PAYLOAD_ENTRY_HEAD + body_len + (key ? TPU_PAYLOAD_TAG_BYTES : 0);
  tpu_payload_blob_t *b = malloc(sizeof *b + len);
  if (!b) {
    tpu_buf_free(&h);
    return -1;
  }
  unsigned char *e = b->data, *body = e + TPU_PAYLOAD_ENTRY_HEAD;
  memset(e, 0, TPU_PAYLOAD_ENTRY_HEAD);
  memcpy(e, "TPUE", 4);
  e[4] = 1;
  e[5] = key ? 1 : 0;
  put32(e + 28, (uint32_t)body_len);
  put32(body, (uint32_t)h.len);
  memcpy(body + 4, h.p, h.len);
  unsigned char *p = body + 4 + h.len;
  for (int side = 0; side < 2; side++) {
    const tpu_payload_tensor_t *ts = side ? out : in;
    for (size_t i = 0, n = side ? nout : nin; i < n; i++) {
      const tpu_payload_tensor_t *t = &ts[i];
      if (t->stride == t->row_bytes) { /* one tensor's rows are contiguous */
        memcpy(p, t->base, t->rows * t->row_bytes);
        p += t->rows * t->row_bytes;
      } else {
        for (size_t r = 0; r < t->rows; r++, p += t->row_bytes)
          memcpy(p, t->base + r * t->stride, t->row_bytes);
      }
    }
  }
  tpu_buf_free(&h);
  if (key && seal(key, e, body_len) != 0) { /* in place: the clear body never leaves here */
    OPENSSL_cleanse(b, sizeof *b + len);
    free(b);
    return -1;
  }
  b->len = len;
  tpu__audit_mac(NULL, 0, e, len, b->sha256);
  *blob = b;
  return 0;
}

/* ---- the store (writer thread) ---- */

typedef struct {
  char name[48];
  uint64_t bytes;
  time_t mtime; /* its last write */
} pfile_t;

struct tpu_pstore {
  char *dir;
  uint64_t max_bytes, max_age_s, segment;
  pfile_t *closed; /* oldest first */
  size_t nclosed, capclosed;
  int fd;             /* the current file, -1 = none yet */
  char cur[48];
  uint64_t good_off;  /* its committed size */
  time_t cur_first;   /* when its first entry was committed */
  int cut_needed;     /* bytes past good_off may be there (a failed or taken-back write) */
  int dirty;          /* written since the last fdatasync */
  tpu_buf_t staged;
  size_t nstaged;     /* entries in staged */
  uint64_t entries, files_deleted, bytes_deleted;
};

static int by_name(const void *x, const void *y) {
  return strcmp(((const pfile_t *)x)->name, ((const pfile_t *)y)->name);
}

static int add_closed(tpu_pstore_t *ps, const char *name, uint64_t bytes, time_t mtime) {
  if (ps->nclosed == ps->capclosed) {
    size_t cap = ps->capclosed ? 2 * ps->capclosed : 16;
    pfile_t *n = realloc(ps->closed, cap * sizeof *n);
    if (!n) return -1;
    ps->closed = n;
    ps->capclosed = cap;
  }
  pfile_t *f = &ps->closed[ps->nclosed++];
  snprintf(f->name, sizeof f->name, "%s", name);
  f->bytes = bytes;
  f->mtime = mtime;
  return 0;
}

static int is_payload_name(const char *s) {
  if (strncmp(s, "payload.", 8) != 0) return 0;
  size_t i = 8;
  for (; i < 28; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  if (s[i] == '\0') return 1;
  if (s[i] != '-' || !s[i + 1]) return 0;
  for (i++; s[i]; i++)
    if (s[i] < '0' || s[i] > '9') return 0;
  return 1;
}

int tpu_pstore_open(const char *dir, uint64_t max_bytes, uint64_t max_age_s, tpu_pstore_t **out,
                    char *err, size_t errlen) {
  *out = NULL;
  if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "%s: cannot create the directory: %s", dir, strerror(errno));
    return -1;
  }
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(err, errlen, "%s: %s", dir, strerror(errno));
    return -1;
  }
  tpu_pstore_t *ps = calloc(1, sizeof *ps);
  if (!ps || !(ps->dir = strdup(dir))) {
    free(ps);
    closedir(d);
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  ps->fd = -1;
  ps->max_bytes = max_bytes;
  ps->max_age_s = max_age_s;
  uint64_t seg = max_bytes ? max_bytes / 8 : (uint64_t)256 << 20;
  if (seg < (64u << 10)) seg = 64u << 10;
  if (seg > ((uint64_t)1 << 30)) seg = (uint64_t)1 << 30;
  ps->segment = seg;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!is_payload_name(de->d_name) || strlen(de->d_name) >= sizeof ps->closed->name) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    if (add_closed(ps, de->d_name, (uint64_t)st.st_size, st.st_mtime) != 0) {
      closedir(d);
      tpu_pstore_close(ps);
      snprintf(err, errlen, "out of memory");
      return -1;
    }
  }
  closedir(d);
  if (ps->nclosed) qsort(ps->closed, ps->nclosed, sizeof *ps->closed, by_name);
  *out = ps;
  return 0;
}

static void close_current(tpu_pstore_t *ps) {
  if (ps->fd < 0) return;
  if (ps->dirty) (void)fdatasync(ps->fd);
  close(ps->fd);
  ps->fd = -1;
  ps->dirty = 0;
  if (ps->good_off > 0) (void)add_closed(ps, ps->cur, ps->good_off, time(NULL));
  else { /* nothing committed to it: not worth keeping */
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ps->dir, ps->cur);
    (void)unlink(path);
  }
}

void tpu_pstore_close(tpu_pstore_t *ps) {
  if (!ps) return;
  close_current(ps);
  tpu_buf_free(&ps->staged);
  free(ps->closed);
  free(ps->dir);
  free(ps);
}

/* Starts the file the next entry goes into, named after its seq. */
static int start_file(tpu_pstore_t *ps, uint64_t seq) {
  char path[4200];
  for (int i = 0; i < 1000; i++) {
    if (i) snprintf(ps->cur, sizeof ps->cur, "payload.%020" PRIu64 "-%d", seq, i);
    else snprintf(ps->cur, sizeof ps->cur, "payload.%020" PRIu64, seq);
    snprintf(path, sizeof path, "%s/%s", ps->dir, ps->cur);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd >= 0) {
      ps->fd = fd;
      ps->good_off = 0;
      ps->cut_needed = 0;
      ps->cur_first = 0;
      int dfd = open(ps->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
      }
      return 0;
    }
    if (errno != EEXIST) return errno;
  }
  return EEXIST;
}

int tpu_pstore_stage(tpu_pstore_t *ps, uint64_t seq, const tpu_payload_blob_t *blob,
                     char ref[TPU_PAYLOAD_REF_MAX]) {
  if (ps->fd < 0) {
    int e = start_file(ps, seq);
    if (e) return e;
  }
  unsigned char fr[TPU_PAYLOAD_FRAME_BYTES];
  memcpy(fr, "TPUF", 4);
  put32(fr + 4, (uint32_t)blob->len);
  put64(fr + 8, seq);
  uint64_t off = ps->good_off + ps->staged.len;
  tpu_buf_add(&ps->staged, fr, sizeof fr);
  tpu_buf_add(&ps->staged, blob->data, blob->len);
  if (ps->staged.oom) return ENOMEM;
  ps->nstaged++;
  snprintf(ref, TPU_PAYLOAD_REF_MAX, "%s@%" PRIu64, ps->cur, off);
  return 0;
}

void tpu_pstore_unstage(tpu_pstore_t *ps) {
  tpu_buf_free(&ps->staged); /* also clears oom */
  ps->nstaged = 0;
  ps->cut_needed = 1;
}

int tpu_pstore_write(tpu_pstore_t *ps, int sync, const char **what) {
  if (ps->fd < 0 || ps->staged.len == 0) return 0;
  if (ps->cut_needed) {
    if (ftruncate(ps->fd, (off_t)ps->good_off) != 0) {
      *what = "ftruncate of a payload file";
      return errno;
    }
    ps->cut_needed = 0;
  }
  ps->cut_needed = 1; /* until committed: a log failure after this retries these bytes */
  size_t off = 0;
  while (off < ps->staged.len) {
    ssize_t w = pwrite(ps->fd, ps->staged.p + off, ps->staged.len - off,
                       (off_t)(ps->good_off + off));
    if (w < 0) {
      if (errno == EINTR) continue;
      *what = "write of a payload file";
      return errno;
    }
    off += (size_t)w;
  }
  ps->dirty = 1;
  if (sync) {
    if (fdatasync(ps->fd) != 0) {
      *what = "fdatasync of a payload file";
      return errno;
    }
    ps->dirty = 0;
  }
  return 0;
}

void tpu_pstore_committed(tpu_pstore_t *ps) {
  if (ps->staged.len == 0) return;
  if (ps->good_off == 0) ps->cur_first = time(NULL);
  ps->good_off += ps->staged.len;
  ps->cut_needed = 0;
  tpu_buf_clear(&ps->staged);
  ps->entries += ps->nstaged;
  ps->nstaged = 0;
}

int tpu_pstore_sync(tpu_pstore_t *ps) {
  if (ps->fd < 0 || !ps->dirty) return 0;
  if (fdatasync(ps->fd) != 0) return errno;
  ps->dirty = 0;
  return 0;
}

static void delete_oldest(tpu_pstore_t *ps, const char *why, void (*report)(void *, const char *),
                          void *ctx) {
  pfile_t f = ps->closed[0];
  memmove(ps->closed, ps->closed + 1, (ps->nclosed - 1) * sizeof *ps->closed);
  ps->nclosed--;
  char path[4200], msg[600], when[40];
  snprintf(path, sizeof path, "%s/%s", ps->dir, f.name);
  if (unlink(path) != 0 && errno != ENOENT) {
    tpu_log_warn("payload store %s: cannot delete %s (%s): %s", ps->dir, f.name, why,
                 strerror(errno));
    return;
  }
  struct tm tm;
  gmtime_r(&f.mtime, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  snprintf(msg, sizeof msg, "deleted %s (%" PRIu64 " bytes, last written %s): %s", f.name,
           f.bytes, when, why);
  ps->files_deleted++;
  ps->bytes_deleted += f.bytes;
  tpu_log_info("payload store %s: %s", ps->dir, msg);
  if (report) report(ctx, msg);
}

void tpu_pstore_maintain(tpu_pstore_t *ps, void (*report)(void *, const char *), void *ctx) {
  time_t now = time(NULL);
  if (ps->fd >= 0 && ps->staged.len == 0 &&
      (ps->good_off >= ps->segment ||
       (ps->max_age_s && ps->good_off > 0 &&
        (uint64_t)(now - ps->cur_first) >= (ps->max_age_s + 3) / 4)))
    close_current(ps);
  char why[160];
  if (ps->max_bytes) {
    uint64_t total = ps->fd >= 0 ? ps->good_off : 0;
    for (size_t i = 0; i < ps->nclosed; i++) total += ps->closed[i].bytes;
    while (ps->nclosed && total > ps->max_bytes) {
      snprintf(why, sizeof why, "the store held %" PRIu64 " bytes, over --payload-max-bytes %" PRIu64,
               total, ps->max_bytes);
      total -= ps->closed[0].bytes;
      delete_oldest(ps, why, report, ctx);
    }
  }
  if (ps->max_age_s) {
    while (ps->nclosed && (uint64_t)(now - ps->closed[0].mtime) > ps->max_age_s) {
      snprintf(why, sizeof why, "older than --payload-max-age %" PRIu64 " s", ps->max_age_s);
      delete_oldest(ps, why, report, ctx);
    }
  }
}

void tpu_pstore_stats(const tpu_pstore_t *ps, tpu_pstore_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!ps) return;
  out->files_deleted = ps->files_deleted;
  out->bytes_deleted = ps->bytes_deleted;
  out->entries = ps->entries;
  out->bytes = ps->fd >= 0 ? ps->good_off : 0;
  for (size_t i = 0; i < ps->nclosed; i++) out->bytes += ps->closed[i].bytes;
}

/* ---- reading (offline) ---- */

static int read_at(int fd, void *buf, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void hex8(const uint8_t *id, char out[17]) {
  static const char d[] = "0123456789abcdef";
  for (int i = 0; i < 8; i++) out[2 * i] = d[id[i] >> 4], out[2 * i + 1] = d[id[i] & 15];
  out[16] = '\0';
}

static int parse_tensors(json_t *arr, tpu_payload_tensor_view_t *v, size_t *n,
                         const unsigned char **p, const unsigned char *end) {
  if (!json_is_array(arr) || json_array_size(arr) > TPU_PAYLOAD_MAX_TENSORS) return -1;
  *n = json_array_size(arr);
  for (size_t i = 0; i < *n; i++) {
    json_t *t = json_array_get(arr, i), *shape = json_object_get(t, "shape");
    const char *name = json_string_value(json_object_get(t, "name"));
    const char *dt = json_string_value(json_object_get(t, "datatype"));
    json_t *bytes = json_object_get(t, "bytes");
    if (!name || !dt || !json_is_integer(bytes) || !json_is_array(shape) ||
        json_array_size(shape) > 8)
      return -1;
    snprintf(v[i].name, sizeof v[i].name, "%s", name);
    snprintf(v[i].datatype, sizeof v[i].datatype, "%s", dt);
    v[i].rank = json_array_size(shape);
    for (size_t d = 0; d < v[i].rank; d++) v[i].shape[d] = json_integer_value(json_array_get(shape, d));
    json_int_t b = json_integer_value(bytes);
    if (b < 0 || (size_t)b > (size_t)(end - *p)) return -1;
    v[i].bytes = (size_t)b;
    v[i].data = *p;
    *p += b;
  }
  return 0;
}

tpu_payload_status_t tpu_payload_read(const char *dir, const char *ref, uint64_t seq,
                                      const char *sha256, const tpu_payload_key_t *key,
                                      tpu_payload_t **out, char *why, size_t whylen) {
  *out = NULL;
  why[0] = '\0';
  const char *at = strrchr(ref, '@');
  char name[48];
  uint64_t off = 0;
  if (!at || (size_t)(at - ref) >= sizeof name || at == ref || !at[1]) {
    snprintf(why, whylen, "the record's payload reference \"%s\" is not FILE@OFFSET", ref);
    return TPU_PAYLOAD_WRONG;
  }
  memcpy(name, ref, (size_t)(at - ref));
  name[at - ref] = '\0';
  char *endp;
  errno = 0;
  off = strtoull(at + 1, &endp, 10);
  if (!is_payload_name(name) || *endp || errno) {
    snprintf(why, whylen, "the record's payload reference \"%s\" is not FILE@OFFSET", ref);
    return TPU_PAYLOAD_WRONG;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, whylen, "%s: %s", path, strerror(errno));
    return TPU_PAYLOAD_MISSING;
  }
  struct stat st;
  unsigned char fr[TPU_PAYLOAD_FRAME_BYTES];
  if (fstat(fd, &st) != 0 || off + TPU_PAYLOAD_FRAME_BYTES > (uint64_t)st.st_size) {
    close(fd);
    snprintf(why, whylen, "%s is %lld bytes: no entry at offset %" PRIu64, path,
             (long long)st.st_size, off);
    return TPU_PAYLOAD_MISSING;
  }
  if (read_at(fd, fr, sizeof fr, off) != 0 || memcmp(fr, "TPUF", 4) != 0) {
    close(fd);
    snprintf(why, whylen, "%s: no payload entry starts at offset %" PRIu64, path, off);
    return TPU_PAYLOAD_WRONG;
  }
  uint32_t len = get32(fr + 4);
  uint64_t fseq = get64(fr + 8);
  if (fseq != seq) {
    close(fd);
    snprintf(why, whylen, "%s@%" PRIu64 " is the payload of seq %" PRIu64 ", not of seq %" PRIu64,
             name, off, fseq, seq);
    return TPU_PAYLOAD_WRONG;
  }
  if (len < TPU_PAYLOAD_ENTRY_HEAD || off + TPU_PAYLOAD_FRAME_BYTES + len > (uint64_t)st.st_size) {
    close(fd);
    snprintf(why, whylen, "%s@%" PRIu64 ": the entry is cut short (%u bytes claimed)", name, off,
             len);
    return TPU_PAYLOAD_MISSING;
  }
  unsigned char *e = malloc(len);
  if (!e || read_at(fd, e, len, off + TPU_PAYLOAD_FRAME_BYTES) != 0) {
    free(e);
    close(fd);
    snprintf(why, whylen, "%s: cannot read %u bytes at %" PRIu64, path, len, off);
    return TPU_PAYLOAD_MISSING;
  }
  close(fd);
  char hex[65];
  tpu__audit_mac(NULL, 0, e, len, hex);
  if (strcmp(hex, sha256) != 0) {
    free(e);
    snprintf(why, whylen, "%s@%" PRIu64 ": the entry's SHA-256 is %s, the record says %s: "
             "changed since it was written", name, off, hex, sha256);
    return TPU_PAYLOAD_TAMPERED;
  }
  char inner[1000];
  tpu_payload_status_t rc = tpu_payload_parse_entry(e, len, key, out, inner, sizeof inner);
  if (rc != TPU_PAYLOAD_OK) snprintf(why, whylen, "%s@%" PRIu64 ": %s", name, off, inner);
  free(e);
  return rc;
}

tpu_payload_status_t tpu_payload_parse_entry(const unsigned char *e, size_t len,
                                             const tpu_payload_key_t *key, tpu_payload_t **out,
                                             char *why, size_t whylen) {
  *out = NULL;
  why[0] = '\0';
  tpu_payload_status_t rc = TPU_PAYLOAD_BAD;
  if (len < TPU_PAYLOAD_ENTRY_HEAD || len > INT32_MAX) {
    snprintf(why, whylen, "not an entry of a format this build reads (%zu bytes)", len);
    return rc;
  }
  uint32_t body_len = get32(e + 28);
  int cipher = e[5];
  unsigned char *body = NULL;
  if (memcmp(e, "TPUE", 4) != 0 || e[4] != 1 || cipher > 1 ||
      (size_t)TPU_PAYLOAD_ENTRY_HEAD + body_len + (cipher ? TPU_PAYLOAD_TAG_BYTES : 0) != len) {
    snprintf(why, whylen, "not an entry of a format this build reads");
    return rc;
  }
  if (cipher) {
    char want[17], have[17];
    hex8(e + 8, want);
    if (!key) {
      snprintf(why, whylen, "the entry is encrypted with key id %s: give --payload-key", want);
      return TPU_PAYLOAD_KEY;
    }
    hex8(key->id, have);
    if (memcmp(key->id, e + 8, 8) != 0) {
      snprintf(why, whylen, "the entry was encrypted with key id %s; --payload-key is key id %s: "
               "the wrong key", want, have);
      return TPU_PAYLOAD_KEY;
    }
    body = malloc(body_len ? body_len : 1);
    EVP_CIPHER_CTX *c = body ? EVP_CIPHER_CTX_new() : NULL;
    int n = 0, fin = 0;
    int ok = c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key->key, e + 16) == 1 &&
             EVP_DecryptUpdate(c, NULL, &n, e, TPU_PAYLOAD_ENTRY_HEAD) == 1 &&
             EVP_DecryptUpdate(c, body, &n, e + TPU_PAYLOAD_ENTRY_HEAD, (int)body_len) == 1 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TPU_PAYLOAD_TAG_BYTES,
                                 (void *)(e + TPU_PAYLOAD_ENTRY_HEAD + body_len)) == 1 &&
             EVP_DecryptFinal_ex(c, body + n, &fin) == 1;
    EVP_CIPHER_CTX_free(c);
    if (!ok) {
      if (body) OPENSSL_cleanse(body, body_len);
      free(body);
      snprintf(why, whylen, "AES-256-GCM rejects the entry (its tag does not match): changed "
               "since it was written");
      return TPU_PAYLOAD_TAMPERED;
    }
  } else {
    body = malloc(body_len ? body_len : 1);
    if (body) memcpy(body, e + TPU_PAYLOAD_ENTRY_HEAD, body_len);
  }
  tpu_payload_t *p = body ? calloc(1, sizeof *p) : NULL;
  if (!p) {
    free(body);
    snprintf(why, whylen, "out of memory");
    return rc;
  }
  p->body = body;
  p->encrypted = cipher;
  uint32_t hlen = body_len >= 4 ? get32(p->body) : 0;
  json_t *h = body_len >= 4 && hlen <= body_len - 4
                  ? json_loadb((const char *)p->body + 4, hlen, 0, NULL) : NULL;
  const unsigned char *q = h ? p->body + 4 + hlen : NULL, *end = p->body + body_len;
  const char *m = json_string_value(json_object_get(h, "model"));
  const char *v = json_string_value(json_object_get(h, "version"));
  json_t *rows = json_object_get(h, "rows");
  if (!m || !v || !json_is_integer(rows) || json_integer_value(rows) < 0 ||
      parse_tensors(json_object_get(h, "inputs"), p->in, &p->nin, &q, end) != 0 ||
      parse_tensors(json_object_get(h, "outputs"), p->out, &p->nout, &q, end) != 0 || q != end) {
    json_decref(h);
    tpu_payload_free(p);
    snprintf(why, whylen, "the entry's header does not describe its bytes");
    return rc;
  }
  snprintf(p->model, sizeof p->model, "%s", m);
  snprintf(p->version, sizeof p->version, "%s", v);
  p->rows = (size_t)json_integer_value(rows);
  json_decref(h);
  *out = p;
  return TPU_PAYLOAD_OK;
}

void tpu_payload_free(tpu_payload_t *p) {
  if (!p) return;
  free(p->body);
  free(p);
}

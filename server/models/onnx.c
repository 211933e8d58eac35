/*
 * onnx.c - the ONNX model decoder (see onnx.h for what it promises).
 *
 * DESIGN
 * protobuf-c unpacks the whole ModelProto with tpud's own schema (proto/onnx.proto); this file
 * then walks the message once, checking as it copies into the plain description, and frees the
 * message. Sizes are checked before anything is allocated from them: an element count is
 * multiplied out with overflow checks and must equal what the file actually carries, so no
 * allocation is larger than the input (or, for external data, than the external file). The
 * schema is not recursive (subgraphs are left out of it), so decoding depth is bounded.
 * When protobuf-c refuses the bytes it says nothing about where; locate() then walks the wire
 * format itself with the schema's descriptors to name the message, field and tensor or node
 * that does not parse. Tensor bytes are copied as little-endian raw data: tpud runs on
 * little-endian hosts only (x86-64, aarch64), checked at compile time below.
 * Never writes files; no threads, no state.
 */
#define _GNU_SOURCE /* realpath with NULL */
#include "onnx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "onnx.pb-c.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "onnx.c copies typed tensor fields as little-endian raw data: little-endian hosts only"
#endif

/* ---- data types ---- */

static const struct {
  const char *name;
  unsigned bits; /* 0: STRING (no fixed size) */
} dtypes[] = {
    [TPU_ONNX_FLOAT] = {"FLOAT", 32},           [TPU_ONNX_UINT8] = {"UINT8", 8},
    [TPU_ONNX_INT8] = {"INT8", 8},              [TPU_ONNX_UINT16] = {"UINT16", 16},
    [TPU_ONNX_INT16] = {"INT16", 16},           [TPU_ONNX_INT32] = {"INT32", 32},
    [TPU_ONNX_INT64] = {"INT64", 64},           [TPU_ONNX_STRING] = {"STRING", 0},
    [TPU_ONNX_BOOL] = {"BOOL", 8},              [TPU_ONNX_FLOAT16] = {"FLOAT16", 16},
    [TPU_ONNX_DOUBLE] = {"DOUBLE", 64},         [TPU_ONNX_UINT32] = {"UINT32", 32},
    [TPU_ONNX_UINT64] = {"UINT64", 64},         [TPU_ONNX_COMPLEX64] = {"COMPLEX64", 64},
    [TPU_ONNX_COMPLEX128] = {"COMPLEX128", 128}, [TPU_ONNX_BFLOAT16] = {"BFLOAT16", 16},
    [TPU_ONNX_FLOAT8E4M3FN] = {"FLOAT8E4M3FN", 8}, [TPU_ONNX_FLOAT8E4M3FNUZ] = {"FLOAT8E4M3FNUZ", 8},
    [TPU_ONNX_FLOAT8E5M2] = {"FLOAT8E5M2", 8},  [TPU_ONNX_FLOAT8E5M2FNUZ] = {"FLOAT8E5M2FNUZ", 8},
    [TPU_ONNX_UINT4] = {"UINT4", 4},            [TPU_ONNX_INT4] = {"INT4", 4},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *tpu_onnx_dtype_name(int dtype) {
  return dtype > 0 && dtype < NDTYPES ? dtypes[dtype].name : NULL;
}

unsigned tpu_onnx_dtype_bits(int dtype) {
  return dtype > 0 && dtype < NDTYPES ? dtypes[dtype].bits : 0;
}

/* ---- context and errors ---- */

/* An external data file read whole and checked against its digest (opts.digests_required). */
typedef struct {
  char *real;   /* realpath */
  uint8_t *buf; /* its bytes, as hashed: tensors are copied from here, never re-read */
  size_t size;
} ext_file_t;

typedef struct {
  const char *name; /* prefixes every message */
  const char *dir;  /* external data's directory, NULL: refused */
  char *realdir;    /* realpath(dir), resolved at the first external tensor */
  uint64_t ext_left; /* bytes of external data still allowed (the caller's max_bytes) */
  const tpu_onnx_parse_opts_t *opts; /* NULL: no digests */
  ext_file_t *files;
  size_t nfiles;
  uint64_t file_left; /* bytes of whole external files still allowed */
  char *err;
  size_t errlen;
} ctx_t;

__attribute__((format(printf, 3, 4))) static tpu_status_t fail(ctx_t *c, tpu_status_t rc,
                                                               const char *fmt, ...) {
  if (c->err && c->errlen) {
    int n = snprintf(c->err, c->errlen, "%s: ", c->name);
    if (n >= 0 && (size_t)n < c->errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  return rc;
}

static tpu_status_t oom(ctx_t *c) { return fail(c, TPU_ENOMEM, "out of memory"); }

static char *dupstr(const char *s) { return strdup(s ? s : ""); }

/* 64-byte aligned, n may be 0 (then NULL, which is not an error). */
static void *alloc64(size_t n, int *failed) {
  *failed = 0;
  if (!n) return NULL;
  size_t r = (n + 63) & ~(size_t)63;
  if (r < n) {
    *failed = 1;
    return NULL;
  }
  void *p = aligned_alloc(64, r);
  if (!p) *failed = 1;
  return p;
}

/* Whether a message carries an unknown field with number `id` (a part of ONNX the schema
 * leaves out, see proto/onnx.proto). */
static int has_unknown(const ProtobufCMessage *m, uint32_t id) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == id) return 1;
  return 0;
}

/* ---- locating a protobuf decoding failure ---- */

/* Reads a varint at *p (< end); returns 0 when truncated or longer than 10 bytes. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*p >= end) return 0;
    uint8_t b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 1;
    }
  }
  return 0;
}

/* The string field "name" (number 1 in most messages; 8 in TensorProto; 3 in NodeProto) of a
 * message's bytes, if it can be found, copied into out as printable text. */
static void find_name(const uint8_t *p, const uint8_t *end, uint32_t name_field, char *out,
                      size_t outlen) {
  out[0] = 0;
  while (p < end) {
    uint64_t key, len;
    if (!read_varint(&p, end, &key)) return;
    unsigned wt = key & 7;
    if (wt == 0) {
      if (!read_varint(&p, end, &len)) return;
    } else if (wt == 1 || wt == 5) {
      size_t n = wt == 1 ? 8 : 4;
      if ((size_t)(end - p) < n) return;
      p += n;
    } else if (wt == 2) {
      if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return;
      if ((key >> 3) == name_field) {
        size_t k = 0;
        for (uint64_t i = 0; i < len && k + 1 < outlen && i < 64; i++)
          out[k++] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' ? (char)p[i] : '?';
        out[k] = 0;
        return;
      }
      p += len;
    } else {
      return;
    }
  }
}

static uint32_t name_field_of(const ProtobufCMessageDescriptor *d) {
  const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, "name");
  return f && f->type == PROTOBUF_C_TYPE_STRING ? f->id : 0;
}

/* Walks `len` bytes as message `d`, descending into known sub-messages, and writes into `where`
 * (a path such as "graph.initializer[2] 'w'") and `why` the first thing that does not parse.
 * Returns 1 when it found something, 0 when the walk saw nothing wrong. `depth` bounds the
 * recursion (the schema is not recursive, but bytes can still claim anything). */
static int locate(const uint8_t *p, const uint8_t *end, const ProtobufCMessageDescriptor *d,
                  char *where, size_t wlen, char *why, size_t ylen, int depth) {
  unsigned counts[64] = {0}; /* occurrences of each field (index in d->fields), for [i] */
  const uint8_t *start = p;
  while (p < end) {
    size_t off = (size_t)(p - start);
    uint64_t key;
    if (!read_varint(&p, end, &key)) {
      snprintf(why, ylen, "truncated field key at byte %zu of %s", off, d->short_name);
      return 1;
    }
    uint32_t id = (uint32_t)(key >> 3);
    unsigned wt = key & 7;
    if (id == 0) {
      snprintf(why, ylen, "field number 0 at byte %zu of %s", off, d->short_name);
      return 1;
    }
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, id);
    const char *fname = f ? f->name : "an unknown field";
    uint64_t len = 0;
    switch (wt) {
    case 0:
      if (!read_varint(&p, end, &len)) {
        snprintf(why, ylen, "%s.%s: truncated varint", d->short_name, fname);
        return 1;
      }
      break;
    case 1:
    case 5:
      if ((size_t)(end - p) < (wt == 1 ? 8u : 4u)) {
        snprintf(why, ylen, "%s.%s: truncated %s-bit value", d->short_name, fname,
                 wt == 1 ? "64" : "32");
        return 1;
      }
      p += wt == 1 ? 8 : 4;
      break;
    case 2:
      if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) {
        /* A cut sub-message: name it from what is left of it (a tensor's or node's name). */
        char name[80] = "";
        if (f && f->type == PROTOBUF_C_TYPE_MESSAGE && name_field_of(f->descriptor))
          find_name(p, end, name_field_of(f->descriptor), name, sizeof name);
        snprintf(why, ylen, "%s.%s%s%s%s: truncated (its length runs past the end of the data)",
                 d->short_name, fname, name[0] ? " '" : "", name, name[0] ? "'" : "");
        return 1;
      }
      break;
    default:
      snprintf(why, ylen, "%s.%s: wire type %u is not a valid protobuf wire type", d->short_name,
               fname, wt);
      return 1;
    }
    if (f) {
      unsigned want;
      int packable = 0;
      switch (f->type) {
      case PROTOBUF_C_TYPE_STRING:
      case PROTOBUF_C_TYPE_BYTES:
      case PROTOBUF_C_TYPE_MESSAGE:
        want = 2;
        break;
      case PROTOBUF_C_TYPE_FLOAT:
      case PROTOBUF_C_TYPE_FIXED32:
      case PROTOBUF_C_TYPE_SFIXED32:
        want = 5, packable = 1;
        break;
      case PROTOBUF_C_TYPE_DOUBLE:
      case PROTOBUF_C_TYPE_FIXED64:
      case PROTOBUF_C_TYPE_SFIXED64:
        want = 1, packable = 1;
        break;
      default:
        want = 0, packable = 1;
        break;
      }
      int ok = wt == want || (packable && f->label == PROTOBUF_C_LABEL_REPEATED && wt == 2);
      size_t fi = (size_t)(f - d->fields);
      unsigned idx = fi < 64 ? counts[fi]++ : 0;
      if (!ok) {
        snprintf(why, ylen, "%s.%s: wire type %u where %u is expected", d->short_name, f->name,
                 wt, want);
        return 1;
      }
      if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 16) {
        const ProtobufCMessageDescriptor *sd = f->descriptor;
        const uint8_t *sub = p;
        char sw[256], name[80];
        sw[0] = 0;
        if (locate(sub, sub + len, sd, sw, sizeof sw, why, ylen, depth + 1)) {
          uint32_t nf = name_field_of(sd);
          name[0] = 0;
          if (nf) find_name(sub, sub + len, nf, name, sizeof name);
          size_t k = strlen(where);
          if (f->label == PROTOBUF_C_LABEL_REPEATED)
            snprintf(where + k, wlen - k, "%s%s[%u]", k ? "." : "", f->name, idx);
          else
            snprintf(where + k, wlen - k, "%s%s", k ? "." : "", f->name);
          k = strlen(where);
          if (name[0]) snprintf(where + k, wlen - k, " '%s'", name);
          k = strlen(where);
          if (sw[0]) snprintf(where + k, wlen - k, ".%s", sw);
          return 1;
        }
      }
    }
    if (wt == 2) p += len;
  }
  return 0;
}

/* ---- external data ---- */

/* Checks an external data location and resolves it inside the model's directory. Returns a
 * new realpath, or NULL with the error set. */
static char *resolve_external(ctx_t *c, const char *what, const char *loc, tpu_status_t *rc) {
  *rc = TPU_EINVAL;
  if (!c->dir) {
    fail(c, TPU_EINVAL, "%s: external data ('%s') is not allowed here (no model directory)",
         what, loc);
    return NULL;
  }
  if (!loc[0]) {
    fail(c, TPU_EINVAL, "%s: external data with an empty location", what);
    return NULL;
  }
  if (loc[0] == '/') {
    fail(c, TPU_EINVAL,
         "%s: external data location '%s' is an absolute path (only paths relative to the "
         "model's directory are allowed)", what, loc);
    return NULL;
  }
  for (const char *s = loc; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.') {
      fail(c, TPU_EINVAL,
           "%s: external data location '%s' has a '..' component (it must stay inside the "
           "model's directory)", what, loc);
      return NULL;
    }
    s += n;
    while (*s == '/') s++;
  }
  if (!c->realdir) {
    c->realdir = realpath(c->dir, NULL);
    if (!c->realdir) {
      fail(c, TPU_EINVAL, "%s: model directory '%s': %s", what, c->dir, strerror(errno));
      return NULL;
    }
  }
  size_t n = strlen(c->realdir) + 1 + strlen(loc) + 1;
  char *joined = malloc(n);
  if (!joined) {
    *rc = oom(c);
    return NULL;
  }
  snprintf(joined, n, "%s/%s", c->realdir, loc);
  char *real = realpath(joined, NULL);
  int e = errno;
  free(joined);
  if (!real) {
    fail(c, TPU_EINVAL, "%s: external data file '%s': %s", what, loc, strerror(e));
    return NULL;
  }
  size_t dl = strlen(c->realdir);
  /* realdir "/" (a model at the root) contains everything. */
  int inside = dl == 1 || (strncmp(real, c->realdir, dl) == 0 && real[dl] == '/');
  if (!inside) {
    fail(c, TPU_EINVAL,
         "%s: external data file '%s' resolves to '%s', outside the model's directory (a "
         "symlink leading out is not allowed)", what, loc, real);
    free(real);
    return NULL;
  }
  *rc = TPU_OK;
  return real;
}

static int parse_u64(const char *s, uint64_t *v) {
  if (!s || !*s) return 0;
  uint64_t x = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    if (x > (UINT64_MAX - 9) / 10) return 0;
    x = x * 10 + (uint64_t)(*s - '0');
  }
  *v = x;
  return 1;
}

/* The external file at realpath `real` named `loc`, read whole and checked against the digest
 * model.json lists for it (c->opts->external), cached for the other tensors it holds. */
static tpu_status_t digested_file(ctx_t *c, const char *what, const char *loc, const char *real,
                                  const ext_file_t **out) {
  for (size_t i = 0; i < c->nfiles; i++)
    if (strcmp(c->files[i].real, real) == 0) {
      *out = &c->files[i];
      return TPU_OK;
    }
  const tpu_onnx_external_t *want = NULL;
  for (size_t i = 0; i < c->opts->nexternal && !want; i++) {
    const tpu_onnx_external_t *x = &c->opts->external[i];
    if (strcmp(x->path, loc) == 0) {
      want = x;
    } else { /* the same file by another spelling ("./w.bin", "d//w.bin") */
      tpu_status_t rc;
      char *err = c->err;
      c->err = NULL; /* a listed path that does not resolve is not this file: no message */
      char *xr = resolve_external(c, what, x->path, &rc);
      c->err = err;
      if (xr && strcmp(xr, real) == 0) want = x;
      free(xr);
      if (rc == TPU_ENOMEM) return oom(c);
    }
  }
  if (!want)
    return fail(c, TPU_EINVAL,
                "%s: external data file '%s' has no SHA-256 in model.json's checkpoint.external "
                "(every external data file must be listed with its digest; "
                "tools/model_digest.py writes them)", what, loc);
  int fd = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    int e = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    return fail(c, e == ENOMEM ? TPU_ENOMEM : TPU_EINVAL, "%s: external data file '%s': %s", what,
                loc, e ? strerror(e) : "not a regular file");
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size > c->file_left || size > SIZE_MAX - 64) {
    close(fd);
    return fail(c, TPU_EINVAL, "%s: external data file '%s' of %llu bytes is over the bound on "
                "the model's size (%llu bytes left)", what, loc, (unsigned long long)size,
                (unsigned long long)c->file_left);
  }
  ext_file_t *grown = realloc(c->files, (c->nfiles + 1) * sizeof *grown);
  uint8_t *buf = malloc(size ? (size_t)size : 1);
  if (grown) c->files = grown;
  if (!grown || !buf) {
    close(fd);
    free(buf);
    return oom(c);
  }
  for (size_t done = 0; done < size;) {
    ssize_t n = read(fd, buf + done, (size_t)size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : 0;
      close(fd);
      free(buf);
      return fail(c, TPU_EINVAL, "%s: external data file '%s': %s", what, loc,
                  e ? strerror(e) : "shorter than it was a moment ago (changed while read)");
    }
    done += (size_t)n;
  }
  close(fd);
  char got[65];
  if (tpu_file_sha256(buf, (size_t)size, NULL, got) != 0) {
    free(buf);
    return fail(c, TPU_ENOMEM, "%s: SHA-256 of external data file '%s' failed", what, loc);
  }
  if (strcmp(got, want->sha256) != 0) {
    free(buf);
    return fail(c, TPU_EINVAL,
                "%s: external data file '%s': SHA-256 mismatch: the file's digest is %s, "
                "model.json's checkpoint.external expects %s (corrupt, partially copied or "
                "replaced file)", what, loc, got, want->sha256);
  }
  char *r = strdup(real);
  if (!r) {
    free(buf);
    return oom(c);
  }
  c->files[c->nfiles] = (ext_file_t){.real = r, .buf = buf, .size = (size_t)size};
  c->file_left -= size;
  *out = &c->files[c->nfiles++];
  return TPU_OK;
}

/* Reads tensor t's nbytes from its external data into t->data. */
static tpu_status_t read_external(ctx_t *c, const char *what, const Tpuonnx__TensorProto *tp,
                                  tpu_onnx_tensor_t *t) {
  const char *loc = NULL, *off_s = NULL, *len_s = NULL;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Tpuonnx__StringStringEntryProto *kv = tp->external_data[i];
    const char *k = kv->key ? kv->key : "";
    const char **slot = strcmp(k, "location") == 0 ? &loc
                        : strcmp(k, "offset") == 0 ? &off_s
                        : strcmp(k, "length") == 0 ? &len_s
                                                   : NULL;
    if (!slot) continue; /* "checksum" and others: not checked */
    if (*slot) return fail(c, TPU_EINVAL, "%s: external_data gives '%s' twice", what, k);
    *slot = kv->value ? kv->value : "";
  }
  if (!loc) return fail(c, TPU_EINVAL, "%s: external_data has no 'location'", what);
  uint64_t off = 0, len = t->nbytes;
  if (off_s && !parse_u64(off_s, &off))
    return fail(c, TPU_EINVAL, "%s: external data offset '%s' is not a non-negative integer",
                what, off_s);
  if (len_s && !parse_u64(len_s, &len))
    return fail(c, TPU_EINVAL, "%s: external data length '%s' is not a non-negative integer",
                what, len_s);
  if (len != t->nbytes)
    return fail(c, TPU_EINVAL,
                "%s: external data length %llu bytes, but its dims need %zu bytes of %s", what,
                (unsigned long long)len, t->nbytes, dtypes[t->dtype].name);
  if (len > c->ext_left)
    return fail(c, TPU_EINVAL,
                "%s: external data of %llu bytes is over the bound on the model's size (%llu "
                "bytes left)", what, (unsigned long long)len, (unsigned long long)c->ext_left);
  tpu_status_t rc;
  char *real = resolve_external(c, what, loc, &rc);
  if (!real) return rc;
  if (c->opts && c->opts->digests_required) {
    const ext_file_t *f = NULL;
    rc = digested_file(c, what, loc, real, &f);
    free(real);
    if (rc != TPU_OK) return rc;
    if (off > f->size || len > f->size - off)
      return fail(c, TPU_EINVAL,
                  "%s: external data bytes %llu..%llu lie past the end of '%s' (%zu bytes)", what,
                  (unsigned long long)off, (unsigned long long)(off + len), loc, f->size);
    int failed;
    t->data = alloc64(t->nbytes, &failed);
    if (failed) return oom(c);
    if (t->nbytes) memcpy(t->data, f->buf + off, t->nbytes);
    c->ext_left -= len;
    t->external = 1;
    return TPU_OK;
  }
  /* Only this tensor's bytes are read (pread), so one large shared file costs no more memory
   * than its tensors. O_NOFOLLOW: the path is already resolved, so a symlink in its place now
   * was put there after the check, and is refused; O_NONBLOCK: a FIFO cannot block open(). */
  int fd = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | O_NOFOLLOW);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    int e = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    free(real);
    return fail(c, e == ENOMEM ? TPU_ENOMEM : TPU_EINVAL, "%s: external data file '%s': %s", what,
                loc, e ? strerror(e) : "not a regular file");
  }
  free(real);
  uint64_t size = (uint64_t)sb.st_size;
  if (off > size || len > size - off) {
    close(fd);
    return fail(c, TPU_EINVAL,
                "%s: external data bytes %llu..%llu lie past the end of '%s' (%llu bytes)", what,
                (unsigned long long)off, (unsigned long long)(off + len), loc,
                (unsigned long long)size);
  }
  int failed;
  t->data = alloc64(t->nbytes, &failed);
  if (failed) {
    close(fd);
    return oom(c);
  }
  for (size_t done = 0; done < t->nbytes;) {
    ssize_t n = pread(fd, (uint8_t *)t->data + done, t->nbytes - done, (off_t)(off + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : 0;
      close(fd);
      return fail(c, TPU_EINVAL, "%s: external data file '%s': %s", what, loc,
                  e ? strerror(e) : "shorter than it was a moment ago (changed while read)");
    }
    done += (size_t)n;
  }
  close(fd);
  c->ext_left -= len;
  t->external = 1;
  return TPU_OK;
}

/* ---- tensors ---- */

static void tensor_clear(tpu_onnx_tensor_t *t) {
  if (!t) return;
  free(t->name);
  free(t->dims);
  free(t->data);
  memset(t, 0, sizeof *t);
}

/* "[3,5]" into out, cut short with "..." when it does not fit. */
static void format_dims(const int64_t *dims, size_t n, char *out, size_t outlen) {
  size_t k = (size_t)snprintf(out, outlen, "[");
  for (size_t i = 0; i < n && k < outlen; i++) {
    if (k + 24 >= outlen) {
      snprintf(out + k, outlen - k, "...");
      return;
    }
    k += (size_t)snprintf(out + k, outlen - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  }
  if (k < outlen) snprintf(out + k, outlen - k, "]");
}

/* Copies n typed elements (each `from` bytes wide in the file's field) into t->data, narrowing
 * each to t's element width. */
static tpu_status_t copy_typed(ctx_t *c, tpu_onnx_tensor_t *t, const void *src, size_t n,
                               size_t from) {
  int failed;
  t->data = alloc64(t->nbytes, &failed);
  if (failed) return oom(c);
  size_t to = t->nelements ? t->nbytes / (size_t)t->nelements : 0;
  /* Complex types keep two values per element: copy the values, not the elements. */
  if (t->dtype == TPU_ONNX_COMPLEX64 || t->dtype == TPU_ONNX_COMPLEX128) to /= 2;
  const uint8_t *s = src;
  uint8_t *d = t->data;
  for (size_t i = 0; i < n; i++) {
    if (t->dtype == TPU_ONNX_BOOL) {
      int32_t v;
      memcpy(&v, s + i * from, sizeof v);
      d[i] = v != 0;
    } else {
      memcpy(d + i * to, s + i * from, to); /* little-endian: the low bytes come first */
    }
  }
  return TPU_OK;
}

/* Checks and copies one TensorProto; `what` names it in messages ("initializer 'w'"). */
static tpu_status_t tensor_from(ctx_t *c, const char *what, const Tpuonnx__TensorProto *tp,
                                tpu_onnx_tensor_t *t) {
  memset(t, 0, sizeof *t);
  if (has_unknown(&tp->base, 3))
    return fail(c, TPU_ENOTSUP, "%s: segmented tensors (TensorProto.segment) are not supported",
                what);
  if (!tp->has_data_type || tp->data_type == TPU_ONNX_UNDEFINED)
    return fail(c, TPU_EINVAL, "%s: no data_type", what);
  if (!tpu_onnx_dtype_name(tp->data_type))
    return fail(c, TPU_EINVAL, "%s: unknown data_type %d (known: 1..%d)", what, tp->data_type,
                NDTYPES - 1);
  int dt = tp->data_type;
  if (dt == TPU_ONNX_STRING)
    return fail(c, TPU_ENOTSUP, "%s: STRING tensors are not supported", what);
  t->dtype = dt;
  t->name = dupstr(tp->name);
  if (!t->name) return oom(c);
  uint64_t ne = 1;
  int overflow = 0;
  for (size_t i = 0; i < tp->n_dims; i++) {
    if (tp->dims[i] < 0)
      return fail(c, TPU_EINVAL, "%s: dimension %zu is %lld (dims must be non-negative)", what, i,
                  (long long)tp->dims[i]);
    if (!overflow && tp->dims[i] && ne > UINT64_MAX / (uint64_t)tp->dims[i]) overflow = 1;
    if (!overflow) ne *= (uint64_t)tp->dims[i];
  }
  /* A zero dimension makes the count 0 whatever the others are: no overflow then. */
  for (size_t i = 0; i < tp->n_dims; i++)
    if (tp->dims[i] == 0) overflow = 0, ne = 0;
  if (overflow)
    return fail(c, TPU_EOVERFLOW, "%s: the product of its %zu dims overflows 64 bits", what,
                tp->n_dims);
  unsigned bits = dtypes[dt].bits;
  if (ne > (UINT64_MAX - 7) / bits || (ne * bits + 7) / 8 > SIZE_MAX)
    return fail(c, TPU_EOVERFLOW, "%s: %llu elements of %s overflow the byte count", what,
                (unsigned long long)ne, dtypes[dt].name);
  t->nelements = ne;
  t->nbytes = (size_t)((ne * bits + 7) / 8);
  t->ndim = tp->n_dims;
  if (t->ndim) {
    t->dims = malloc(t->ndim * sizeof *t->dims);
    if (!t->dims) return oom(c);
    memcpy(t->dims, tp->dims, t->ndim * sizeof *t->dims);
  }

  /* Which field carries the data, and how many elements it holds. */
  const char *field = NULL;
  const void *src = NULL;
  size_t count = 0, width = 0, per = 1; /* per: values per element (2 for complex) */
  int nfields = 0;
  if (tp->n_float_data) field = "float_data", src = tp->float_data, count = tp->n_float_data,
                        width = 4, nfields++;
  if (tp->n_int32_data) field = "int32_data", src = tp->int32_data, count = tp->n_int32_data,
                        width = 4, nfields++;
  if (tp->n_int64_data) field = "int64_data", src = tp->int64_data, count = tp->n_int64_data,
                        width = 8, nfields++;
  if (tp->n_double_data) field = "double_data", src = tp->double_data,
                         count = tp->n_double_data, width = 8, nfields++;
  if (tp->n_uint64_data) field = "uint64_data", src = tp->uint64_data,
                         count = tp->n_uint64_data, width = 8, nfields++;
  if (tp->n_string_data) field = "string_data", count = tp->n_string_data, nfields++;
  int external = tp->has_data_location && tp->data_location == 1;
  if (tp->has_data_location && tp->data_location != 0 && tp->data_location != 1)
    return fail(c, TPU_EINVAL, "%s: unknown data_location %d (0 DEFAULT or 1 EXTERNAL)", what,
                tp->data_location);
  if (tp->has_raw_data) nfields++;
  if (external) {
    if (nfields)
      return fail(c, TPU_EINVAL, "%s: data_location is EXTERNAL but it also carries data", what);
    return read_external(c, what, tp, t);
  }
  if (tp->n_external_data)
    return fail(c, TPU_EINVAL, "%s: external_data given but data_location is not EXTERNAL",
                what);
  if (nfields > 1)
    return fail(c, TPU_EINVAL, "%s: data in more than one field (raw_data and typed fields)",
                what);
  if (tp->has_raw_data) {
    if (tp->raw_data.len != t->nbytes) {
      char shape[160];
      format_dims(t->dims, t->ndim, shape, sizeof shape);
      return fail(c, TPU_EINVAL, "%s: raw_data holds %zu bytes, but shape %s of %s needs %zu",
                  what, tp->raw_data.len, shape, dtypes[dt].name, t->nbytes);
    }
    int failed;
    t->data = alloc64(t->nbytes, &failed);
    if (failed) return oom(c);
    if (t->nbytes) memcpy(t->data, tp->raw_data.data, t->nbytes);
    return TPU_OK;
  }
  /* The typed field each data type uses (onnx.proto's rules). */
  const char *want;
  switch (dt) {
  case TPU_ONNX_FLOAT: want = "float_data"; break;
  case TPU_ONNX_COMPLEX64: want = "float_data", per = 2; break;
  case TPU_ONNX_INT64: want = "int64_data"; break;
  case TPU_ONNX_DOUBLE: want = "double_data"; break;
  case TPU_ONNX_COMPLEX128: want = "double_data", per = 2; break;
  case TPU_ONNX_UINT32:
  case TPU_ONNX_UINT64: want = "uint64_data"; break;
  case TPU_ONNX_UINT4:
  case TPU_ONNX_INT4: want = NULL; break;
  default: want = "int32_data"; break; /* 8- and 16-bit types, INT32, BOOL, FLOAT16, FLOAT8 */
  }
  if (!want) {
    if (ne == 0 && !nfields) return TPU_OK;
    return fail(c, TPU_ENOTSUP, "%s: %s data is only supported as raw_data", what,
                dtypes[dt].name);
  }
  if (!nfields) {
    if (ne == 0) return TPU_OK;
    return fail(c, TPU_EINVAL, "%s: no data (dims call for %llu elements of %s in raw_data or %s)",
                what, (unsigned long long)ne, dtypes[dt].name, want);
  }
  if (strcmp(field, want) != 0)
    return fail(c, TPU_EINVAL, "%s: %s data in %s (expected raw_data or %s)", what,
                dtypes[dt].name, field, want);
  if (count != ne * per)
    return fail(c, TPU_EINVAL, "%s: %s holds %zu values, but its dims call for %llu", what,
                field, count, (unsigned long long)(ne * per));
  return copy_typed(c, t, src, count, width);
}

/* ---- attributes, nodes, values ---- */

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void attr_clear(tpu_onnx_attr_t *a) {
  free(a->name);
  free(a->s.data);
  if (a->t) tensor_clear(a->t), free(a->t);
  free(a->floats);
  free(a->ints);
  if (a->strings)
    for (size_t i = 0; i < a->n; i++) free(a->strings[i].data);
  free(a->strings);
  if (a->tensors)
    for (size_t i = 0; i < a->n; i++) tensor_clear(&a->tensors[i]);
  free(a->tensors);
}

static int copy_bytes(tpu_onnx_bytes_t *b, const ProtobufCBinaryData *src) {
  b->len = src->len;
  b->data = malloc(src->len + 1); /* NUL after, for text attributes */
  if (!b->data) return 0;
  if (src->len) memcpy(b->data, src->data, src->len);
  b->data[src->len] = 0;
  return 1;
}

static tpu_status_t attr_from(ctx_t *c, const char *node, const Tpuonnx__AttributeProto *ap,
                              tpu_onnx_attr_t *a) {
  const char *an = ap->name ? ap->name : "";
  char what[512];
  if (!an[0]) return fail(c, TPU_EINVAL, "%s: an attribute with no name", node);
  if (ap->ref_attr_name && ap->ref_attr_name[0])
    return fail(c, TPU_ENOTSUP,
                "%s: attribute '%s' refers to a function attribute ('%s'): functions are not "
                "supported", node, an, ap->ref_attr_name);
  int type = ap->has_type ? ap->type : 0;
  if (has_unknown(&ap->base, 6) || has_unknown(&ap->base, 11) || type == 5 || type == 10)
    return fail(c, TPU_ENOTSUP, "%s: attribute '%s' is a graph: subgraphs are not supported",
                node, an);
  if (has_unknown(&ap->base, 22) || has_unknown(&ap->base, 23) || type == 11 || type == 12)
    return fail(c, TPU_ENOTSUP,
                "%s: attribute '%s' is a sparse tensor: sparse tensors are not supported", node,
                an);
  if (has_unknown(&ap->base, 14) || has_unknown(&ap->base, 15) || type == 13 || type == 14)
    return fail(c, TPU_ENOTSUP, "%s: attribute '%s' is a type: type attributes are not supported",
                node, an);
  if (!type) { /* files from before AttributeProto.type: the field that is set says */
    if (ap->has_f) type = 1;
    else if (ap->has_i) type = 2;
    else if (ap->has_s) type = 3;
    else if (ap->t) type = 4;
    else if (ap->n_floats) type = 6;
    else if (ap->n_ints) type = 7;
    else if (ap->n_strings) type = 8;
    else if (ap->n_tensors) type = 9;
    else return fail(c, TPU_EINVAL, "%s: attribute '%s' has no type and no value", node, an);
  }
  a->name = dupstr(an);
  if (!a->name) return oom(c);
  a->type = (tpu_onnx_attr_type_t)type;
  tpu_status_t rc;
  switch (type) {
  case 1: a->f = ap->f; break;
  case 2: a->i = ap->i; break;
  case 3:
    if (!copy_bytes(&a->s, &ap->s)) return oom(c);
    break;
  case 4:
    if (!ap->t) return fail(c, TPU_EINVAL, "%s: attribute '%s' is TENSOR but holds none", node, an);
    a->t = calloc(1, sizeof *a->t);
    if (!a->t) return oom(c);
    snprintf(what, sizeof what, "%s: attribute '%s' tensor", node, an);
    if ((rc = tensor_from(c, what, ap->t, a->t)) != TPU_OK) return rc;
    break;
  case 6:
    a->n = ap->n_floats;
    if (a->n) {
      if (!(a->floats = malloc(a->n * sizeof *a->floats))) return oom(c);
      memcpy(a->floats, ap->floats, a->n * sizeof *a->floats);
    }
    break;
  case 7:
    a->n = ap->n_ints;
    if (a->n) {
      if (!(a->ints = malloc(a->n * sizeof *a->ints))) return oom(c);
      memcpy(a->ints, ap->ints, a->n * sizeof *a->ints);
    }
    break;
  case 8:
    if (ap->n_strings && !(a->strings = calloc(ap->n_strings, sizeof *a->strings))) return oom(c);
    for (; a->n < ap->n_strings; a->n++)
      if (!copy_bytes(&a->strings[a->n], &ap->strings[a->n])) return oom(c);
    break;
  case 9:
    if (ap->n_tensors && !(a->tensors = calloc(ap->n_tensors, sizeof *a->tensors))) return oom(c);
    for (; a->n < ap->n_tensors; a->n++) {
      snprintf(what, sizeof what, "%s: attribute '%s' tensor %zu", node, an, a->n);
      /* a->n counts the tensors to clear, so bump it even when this one fails */
      rc = tensor_from(c, what, ap->tensors[a->n], &a->tensors[a->n]);
      if (rc != TPU_OK) {
        a->n++;
        return rc;
      }
    }
    break;
  default:
    return fail(c, TPU_EINVAL, "%s: attribute '%s' has unknown type %d", node, an, type);
  }
  return TPU_OK;
}

static void node_clear(tpu_onnx_node_t *n) {
  free(n->name);
  free(n->op_type);
  free(n->domain);
  if (n->inputs)
    for (size_t i = 0; i < n->ninputs; i++) free(n->inputs[i]);
  if (n->outputs)
    for (size_t i = 0; i < n->noutputs; i++) free(n->outputs[i]);
  free(n->inputs);
  free(n->outputs);
  if (n->attrs)
    for (size_t i = 0; i < n->nattrs; i++) attr_clear(&n->attrs[i]);
  free(n->attrs);
}

static int is_default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static tpu_status_t node_from(ctx_t *c, size_t index, const Tpuonnx__NodeProto *np,
                              const tpu_onnx_model_t *m, tpu_onnx_node_t *n) {
  char label[400];
  const char *op = np->op_type ? np->op_type : "";
  if (np->name && np->name[0])
    snprintf(label, sizeof label, "node '%.160s' (%.120s)", np->name, op);
  else
    snprintf(label, sizeof label, "node %zu (%.120s)", index, op);
  if (!op[0]) return fail(c, TPU_EINVAL, "%s: no op_type", label);
  const char *dom = is_default_domain(np->domain) ? "" : np->domain;
  n->opset = -1;
  for (size_t i = 0; i < m->nopsets; i++)
    if (strcmp(m->opsets[i].domain, dom) == 0) n->opset = m->opsets[i].version;
  if (n->opset < 0)
    return fail(c, TPU_EINVAL, "%s: domain '%s' has no opset_import", label, dom);
  if (!(n->name = dupstr(np->name)) || !(n->op_type = dupstr(op)) || !(n->domain = dupstr(dom)))
    return oom(c);
  if (np->n_input && !(n->inputs = calloc(np->n_input, sizeof *n->inputs))) return oom(c);
  for (; n->ninputs < np->n_input; n->ninputs++)
    if (!(n->inputs[n->ninputs] = dupstr(np->input[n->ninputs]))) return oom(c);
  if (np->n_output && !(n->outputs = calloc(np->n_output, sizeof *n->outputs))) return oom(c);
  for (; n->noutputs < np->n_output; n->noutputs++)
    if (!(n->outputs[n->noutputs] = dupstr(np->output[n->noutputs]))) return oom(c);
  if (np->n_attribute && !(n->attrs = calloc(np->n_attribute, sizeof *n->attrs))) return oom(c);
  for (; n->nattrs < np->n_attribute; n->nattrs++) {
    tpu_status_t rc = attr_from(c, label, np->attribute[n->nattrs], &n->attrs[n->nattrs]);
    if (rc != TPU_OK) {
      n->nattrs++; /* partly filled: cleared with the rest */
      return rc;
    }
  }
  if (n->nattrs > 1) { /* duplicates: sorted, as a node may carry many */
    const char **names = malloc(n->nattrs * sizeof *names);
    if (!names) return oom(c);
    for (size_t k = 0; k < n->nattrs; k++) names[k] = n->attrs[k].name;
    qsort(names, n->nattrs, sizeof *names, cmp_names);
    for (size_t k = 1; k < n->nattrs; k++)
      if (strcmp(names[k - 1], names[k]) == 0) {
        tpu_status_t rc =
            fail(c, TPU_EINVAL, "%s: attribute '%.200s' given twice", label, names[k]);
        free(names);
        return rc;
      }
    free(names);
  }
  return TPU_OK;
}

static void value_clear(tpu_onnx_value_t *v) {
  free(v->name);
  free(v->dims);
  free(v->batch_param);
}

static tpu_status_t value_from(ctx_t *c, const char *kind, size_t index,
                               const Tpuonnx__ValueInfoProto *vp, tpu_onnx_value_t *v) {
  char label[256];
  if (!vp->name || !vp->name[0]) return fail(c, TPU_EINVAL, "graph %s %zu: no name", kind, index);
  snprintf(label, sizeof label, "graph %s '%.200s'", kind, vp->name);
  if (!(v->name = dupstr(vp->name))) return oom(c);
  const Tpuonnx__TypeProto *tp = vp->type;
  if (!tp) return fail(c, TPU_EINVAL, "%s: no type", label);
  if (tp->value_case != TPUONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
    const char *what = has_unknown(&tp->base, 4)   ? "a sequence"
                       : has_unknown(&tp->base, 5) ? "a map"
                       : has_unknown(&tp->base, 8) ? "a sparse tensor"
                       : has_unknown(&tp->base, 9) ? "an optional"
                                                   : "not a tensor";
    return fail(c, TPU_ENOTSUP, "%s: its type is %s (only tensors are supported)", label, what);
  }
  const Tpuonnx__TypeProto__Tensor *tt = tp->tensor_type;
  if (!tt->has_elem_type || tt->elem_type == 0)
    return fail(c, TPU_EINVAL, "%s: no elem_type", label);
  if (!tpu_onnx_dtype_name(tt->elem_type))
    return fail(c, TPU_EINVAL, "%s: unknown elem_type %d (known: 1..%d)", label, tt->elem_type,
                NDTYPES - 1);
  v->dtype = tt->elem_type;
  if (!tt->shape)
    return fail(c, TPU_EINVAL, "%s: no shape (a static shape is needed, -1 only for the batch)",
                label);
  v->ndim = tt->shape->n_dim;
  if (v->ndim && !(v->dims = malloc(v->ndim * sizeof *v->dims))) return oom(c);
  for (size_t i = 0; i < v->ndim; i++) {
    const Tpuonnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == TPUONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return fail(c, TPU_EINVAL, "%s: dimension %zu is %lld (must be non-negative)", label, i,
                    (long long)d->dim_value);
      v->dims[i] = d->dim_value;
      continue;
    }
    const char *param =
        d->value_case == TPUONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param
            ? d->dim_param
            : "";
    if (i != 0)
      return fail(c, TPU_ENOTSUP,
                  "%s: dimension %zu is symbolic%s%s%s (only dimension 0, the batch, may be)",
                  label, i, param[0] ? " ('" : "", param, param[0] ? "')" : "");
    v->dims[0] = -1;
    if (!(v->batch_param = dupstr(param))) return oom(c);
  }
  return TPU_OK;
}

/* ---- the model ---- */

void tpu_onnx_free(tpu_onnx_model_t *m) {
  if (!m) return;
  if (m->opsets)
    for (size_t i = 0; i < m->nopsets; i++) free(m->opsets[i].domain);
  free(m->opsets);
  free(m->producer_name);
  free(m->producer_version);
  free(m->graph_name);
  if (m->initializers)
    for (size_t i = 0; i < m->ninitializers; i++) tensor_clear(&m->initializers[i]);
  free(m->initializers);
  if (m->nodes)
    for (size_t i = 0; i < m->nnodes; i++) node_clear(&m->nodes[i]);
  free(m->nodes);
  if (m->inputs)
    for (size_t i = 0; i < m->ninputs; i++) value_clear(&m->inputs[i]);
  if (m->outputs)
    for (size_t i = 0; i < m->noutputs; i++) value_clear(&m->outputs[i]);
  free(m->inputs);
  free(m->outputs);
  free(m);
}

static tpu_status_t values_from(ctx_t *c, const Tpuonnx__GraphProto *g, tpu_onnx_model_t *m,
                                const char **sorted);

static tpu_status_t model_from(ctx_t *c, const Tpuonnx__ModelProto *mp, tpu_onnx_model_t *m) {
  tpu_status_t rc;
  if (!mp->has_ir_version || mp->ir_version <= 0)
    return fail(c, TPU_EINVAL, "no ir_version (is this an ONNX model?)");
  m->ir_version = mp->ir_version;
  if (!mp->n_opset_import) return fail(c, TPU_EINVAL, "no opset_import");
  if (!(m->opsets = calloc(mp->n_opset_import, sizeof *m->opsets))) return oom(c);
  m->opset = -1;
  for (; m->nopsets < mp->n_opset_import; m->nopsets++) {
    const Tpuonnx__OperatorSetIdProto *o = mp->opset_import[m->nopsets];
    const char *dom = is_default_domain(o->domain) ? "" : o->domain;
    if (!o->has_version)
      return fail(c, TPU_EINVAL, "opset_import for domain '%s' has no version", dom);
    for (size_t k = 0; k < m->nopsets; k++)
      if (strcmp(m->opsets[k].domain, dom) == 0)
        return fail(c, TPU_EINVAL, "opset_import names domain '%s' twice", dom);
    if (!(m->opsets[m->nopsets].domain = dupstr(dom))) return oom(c);
    m->opsets[m->nopsets].version = o->version;
    if (!dom[0]) m->opset = o->version;
  }
  if (m->opset < 0)
    return fail(c, TPU_EINVAL, "opset_import has no entry for the default domain (ai.onnx)");
  if (m->opset < TPU_ONNX_OPSET_MIN || m->opset > TPU_ONNX_OPSET_MAX)
    return fail(c, TPU_ENOTSUP, "default-domain (ai.onnx) opset %lld is not supported (%d..%d)",
                (long long)m->opset, TPU_ONNX_OPSET_MIN, TPU_ONNX_OPSET_MAX);
  if (!(m->producer_name = dupstr(mp->producer_name)) ||
      !(m->producer_version = dupstr(mp->producer_version)))
    return oom(c);
  const Tpuonnx__GraphProto *g = mp->graph;
  if (!g) return fail(c, TPU_EINVAL, "no graph");
  if (!(m->graph_name = dupstr(g->name))) return oom(c);
  if (has_unknown(&g->base, 15))
    return fail(c, TPU_ENOTSUP, "the graph has sparse initializers (not supported)");

  if (g->n_initializer && !(m->initializers = calloc(g->n_initializer, sizeof *m->initializers)))
    return oom(c);
  for (; m->ninitializers < g->n_initializer; m->ninitializers++) {
    const Tpuonnx__TensorProto *tp = g->initializer[m->ninitializers];
    char what[256];
    if (!tp->name || !tp->name[0])
      return fail(c, TPU_EINVAL, "initializer %zu: no name", m->ninitializers);
    snprintf(what, sizeof what, "initializer '%.200s'", tp->name);
    rc = tensor_from(c, what, tp, &m->initializers[m->ninitializers]);
    if (rc != TPU_OK) {
      m->ninitializers++;
      return rc;
    }
  }
  /* Names sorted once (a file can hold many initializers: no quadratic scans), for the
   * duplicate check and for marking the inputs that have one. */
  const char **sorted = NULL;
  if (m->ninitializers) {
    if (!(sorted = malloc(m->ninitializers * sizeof *sorted))) return oom(c);
    for (size_t k = 0; k < m->ninitializers; k++) sorted[k] = m->initializers[k].name;
    qsort(sorted, m->ninitializers, sizeof *sorted, cmp_names);
    for (size_t k = 1; k < m->ninitializers; k++)
      if (strcmp(sorted[k - 1], sorted[k]) == 0) {
        rc = fail(c, TPU_EINVAL, "initializer '%.200s': given twice", sorted[k]);
        free(sorted);
        return rc;
      }
  }
  rc = values_from(c, g, m, sorted);
  free(sorted);
  if (rc != TPU_OK) return rc;
  if (g->n_node && !(m->nodes = calloc(g->n_node, sizeof *m->nodes))) return oom(c);
  for (; m->nnodes < g->n_node; m->nnodes++) {
    rc = node_from(c, m->nnodes, g->node[m->nnodes], m, &m->nodes[m->nnodes]);
    if (rc != TPU_OK) {
      m->nnodes++;
      return rc;
    }
  }
  return TPU_OK;
}

/* The graph's inputs and outputs; `sorted`: the initializers' names, sorted (NULL if none). */
static tpu_status_t values_from(ctx_t *c, const Tpuonnx__GraphProto *g, tpu_onnx_model_t *m,
                                const char **sorted) {
  tpu_status_t rc;
  if (!g->n_output) return fail(c, TPU_EINVAL, "the graph has no outputs");
  if (g->n_input && !(m->inputs = calloc(g->n_input, sizeof *m->inputs))) return oom(c);
  for (; m->ninputs < g->n_input; m->ninputs++) {
    tpu_onnx_value_t *v = &m->inputs[m->ninputs];
    rc = value_from(c, "input", m->ninputs, g->input[m->ninputs], v);
    if (rc != TPU_OK) {
      m->ninputs++;
      return rc;
    }
    const char *key = v->name;
    v->initializer =
        sorted && bsearch(&key, sorted, m->ninitializers, sizeof *sorted, cmp_names) != NULL;
  }
  if (!(m->outputs = calloc(g->n_output, sizeof *m->outputs))) return oom(c);
  for (; m->noutputs < g->n_output; m->noutputs++) {
    rc = value_from(c, "output", m->noutputs, g->output[m->noutputs], &m->outputs[m->noutputs]);
    if (rc != TPU_OK) {
      m->noutputs++;
      return rc;
    }
  }
  /* Duplicate names among inputs, and among outputs: sorted copies of the
   * checked names, as above. */
  for (int pass = 0; pass < 2; pass++) {
    size_t n = pass ? m->noutputs : m->ninputs;
    if (n < 2) continue;
    const char **names = malloc(n * sizeof *names);
    if (!names) return oom(c);
    for (size_t k = 0; k < n; k++) names[k] = (pass ? m->outputs : m->inputs)[k].name;
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t k = 1; k < n; k++)
      if (strcmp(names[k - 1], names[k]) == 0) {
        rc = fail(c, TPU_EINVAL, "graph %s '%.200s': given twice", pass ? "output" : "input",
                  names[k]);
        free(names);
        return rc;
      }
    free(names);
  }
  return TPU_OK;
}

static tpu_status_t parse(const void *buf, size_t len, const char *name, const char *dir,
                          uint64_t ext_max, const tpu_onnx_parse_opts_t *opts,
                          tpu_onnx_model_t **out, char *err, size_t errlen) {
  ctx_t c = {.name = name ? name : "model.onnx", .dir = dir, .ext_left = ext_max, .opts = opts,
             .file_left = ext_max, .err = err, .errlen = errlen};
  if (err && errlen) err[0] = 0;
  *out = NULL;
  if (!buf && len) return fail(&c, TPU_EINVAL, "no data");
  if (len == 0) return fail(&c, TPU_EINVAL, "empty file (not an ONNX model)");
  Tpuonnx__ModelProto *mp = tpuonnx__model_proto__unpack(NULL, len, buf);
  if (!mp) {
    char where[512] = "", why[256] = "";
    if (locate(buf, (const uint8_t *)buf + len, &tpuonnx__model_proto__descriptor, where,
               sizeof where, why, sizeof why, 0))
      return fail(&c, TPU_EINVAL, "not a valid ONNX model: %s%s%s", where, where[0] ? ": " : "",
                  why);
    return fail(&c, TPU_EINVAL,
                "not a valid ONNX model (protobuf decoding failed: out of memory or a value "
                "that does not fit its field)");
  }
  tpu_onnx_model_t *m = calloc(1, sizeof *m);
  tpu_status_t rc = m ? model_from(&c, mp, m) : oom(&c);
  tpuonnx__model_proto__free_unpacked(mp, NULL);
  free(c.realdir);
  for (size_t i = 0; i < c.nfiles; i++) {
    free(c.files[i].real);
    free(c.files[i].buf);
  }
  free(c.files);
  if (rc != TPU_OK) {
    tpu_onnx_free(m);
    return rc;
  }
  *out = m;
  return TPU_OK;
}

/* ---- a standalone tensor ---- */

void tpu_onnx_tensor_free(tpu_onnx_tensor_t *t) {
  if (!t) return;
  tensor_clear(t);
  free(t);
}

tpu_status_t tpu_onnx_tensor_parse(const void *buf, size_t len, const char *name,
                                   tpu_onnx_tensor_t **out, char *err, size_t errlen) {
  /* dir NULL: read_external refuses too, but a lone tensor is refused before any other check
   * with a message that says why (it has no directory, not "no model directory"). */
  ctx_t c = {.name = name ? name : "tensor.pb", .err = err, .errlen = errlen};
  if (err && errlen) err[0] = 0;
  *out = NULL;
  if (!buf && len) return fail(&c, TPU_EINVAL, "no data");
  /* Zero bytes are a valid (empty) TensorProto: tensor_from then finds no data_type. */
  Tpuonnx__TensorProto *tp = tpuonnx__tensor_proto__unpack(NULL, len, buf);
  if (!tp) {
    char where[512] = "", why[256] = "";
    if (locate(buf, (const uint8_t *)buf + len, &tpuonnx__tensor_proto__descriptor, where,
               sizeof where, why, sizeof why, 0))
      return fail(&c, TPU_EINVAL, "not a valid ONNX TensorProto: %s%s%s", where,
                  where[0] ? ": " : "", why);
    return fail(&c, TPU_EINVAL,
                "not a valid ONNX TensorProto (protobuf decoding failed: out of memory or a "
                "value that does not fit its field)");
  }
  char what[256];
  if (tp->name && tp->name[0]) snprintf(what, sizeof what, "tensor '%.200s'", tp->name);
  else snprintf(what, sizeof what, "tensor");
  tpu_status_t rc;
  tpu_onnx_tensor_t *t = NULL;
  if ((tp->has_data_location && tp->data_location == 1) || tp->n_external_data)
    rc = fail(&c, TPU_EINVAL,
              "%s: external data is not supported for a standalone tensor (its bytes must be "
              "in the file)", what);
  else if (!(t = calloc(1, sizeof *t)))
    rc = oom(&c);
  else
    rc = tensor_from(&c, what, tp, t);
  tpuonnx__tensor_proto__free_unpacked(tp, NULL);
  if (rc != TPU_OK) {
    tpu_onnx_tensor_free(t);
    return rc;
  }
  *out = t;
  return TPU_OK;
}

tpu_status_t tpu_onnx_parse(const void *buf, size_t len, const char *name, const char *dir,
                            tpu_onnx_model_t **out, char *err, size_t errlen) {
  return parse(buf, len, name, dir, UINT64_MAX, NULL, out, err, errlen);
}

tpu_status_t tpu_onnx_parse_with(const void *buf, size_t len, const char *name,
                                 const tpu_onnx_parse_opts_t *opts, tpu_onnx_model_t **out,
                                 char *err, size_t errlen) {
  if (!opts) return tpu_onnx_parse(buf, len, name, NULL, out, err, errlen);
  return parse(buf, len, name, opts->dir, opts->max_bytes ? opts->max_bytes : UINT64_MAX, opts,
               out, err, errlen);
}

tpu_status_t tpu_onnx_load(const char *path, size_t max_bytes, const atomic_int *cancel,
                           tpu_onnx_model_t **out, char *err, size_t errlen) {
  *out = NULL;
  void *buf;
  size_t len;
  int e = tpu_file_read(path, max_bytes, cancel, &buf, &len, NULL, err, errlen);
  if (e) return e == ECANCELED ? TPU_ECANCELED : e == ENOMEM ? TPU_ENOMEM : TPU_EINVAL;
  char *dir = strdup(path);
  if (!dir) {
    free(buf);
    ctx_t c = {.name = path, .err = err, .errlen = errlen};
    return oom(&c);
  }
  char *slash = strrchr(dir, '/');
  if (!slash) strcpy(dir, ".");
  else if (slash == dir) dir[1] = 0;
  else *slash = 0;
  tpu_status_t rc = parse(buf, len, path, dir, max_bytes ? max_bytes : UINT64_MAX, NULL, out,
                          err, errlen);
  free(dir);
  free(buf);
  return rc;
}

/*
 * safetensors.c - strict safetensors reader (see safetensors.h for the checks and why).
 *
 * DESIGN
 * Validation happens once, at open, in the order a reader needs it: sizes first (so nothing is
 * read outside the buffer), then the header's bytes (UTF-8, '{'), then its JSON, then each
 * tensor on its own (fields, dtype, shape, byte count), then the tensors together (sorted by
 * offset they must tile the data section exactly). Every check that fails writes one message
 * naming the file and, where there is one, the tensor. Nothing here allocates after open, and
 * nothing here ever writes to the file's bytes once they are read.
 */
#include "safetensors.h"

#include "file.h"
#include "log.h"
#include "tpu_text.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

struct tpu_safetensors {
  const uint8_t *base;      /* the whole file */
  size_t len;               /* its size in bytes */
  int owned;                /* base is our buffer (tpu_file_read) to free at close */
  tpu_st_tensor_t *tensors; /* in data-offset order */
  size_t ntensors;
  const tpu_st_tensor_t **by_name; /* the same tensors sorted by name, for bsearch */
  uint64_t *dims;           /* shape storage, every tensor's dimensions back to back */
  char **meta;              /* __metadata__ as key, value, key, value, ... */
  size_t nmeta;             /* number of pairs */
};

static const struct {
  const char *name;
  unsigned bits;
} dtypes[TPU_ST_DTYPE_COUNT] = {
#define TPU__ST_DTYPE_ROW(n, b) {#n, b},
    TPU_ST_DTYPE_MAP(TPU__ST_DTYPE_ROW)
#undef TPU__ST_DTYPE_ROW
};

const char *tpu_st_dtype_name(tpu_st_dtype_t dtype) {
  return (unsigned)dtype < TPU_ST_DTYPE_COUNT ? dtypes[dtype].name : NULL;
}

unsigned tpu_st_dtype_bits(tpu_st_dtype_t dtype) {
  return (unsigned)dtype < TPU_ST_DTYPE_COUNT ? dtypes[dtype].bits : 0;
}

/* ---- messages ---- */

/* "file: message" into err, and returns status: `return fail(...)`. */
#define fail(err, errlen, status, file, fmt, ...) \
  tpu_errf_ret((status), (err), (errlen), "%s: " fmt, (file), ##__VA_ARGS__)

/* Names come from the file: quoted safely for a message (tpu_log_escape) so a crafted name
 * cannot forge log lines. out holds at least 100 bytes. */
static const char *safe_name(char *out, size_t outlen, const char *s) {
  return tpu_log_escape(out, outlen, s);
}

static const char *fmt_shape(char *out, size_t outlen, const uint64_t *shape, size_t ndim) {
  size_t o = (size_t)snprintf(out, outlen, "[");
  for (size_t i = 0; i < ndim && o < outlen; i++)
    o += (size_t)snprintf(out + o, outlen - o, "%s%llu", i ? ", " : "",
                          (unsigned long long)shape[i]);
  if (o < outlen) snprintf(out + o, outlen - o, "]");
  return out;
}

/* ---- UTF-8 ---- */

/* Returns the offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or len when all is well. */
static size_t utf8_invalid_at(const uint8_t *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    uint8_t c = s[i];
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;   /* overlong */
      if (c == 0xed) hi = 0x9f;   /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;   /* overlong */
      if (c == 0xf4) hi = 0x8f;   /* above U+10FFFF */
    } else {
      return i;
    }
    if (len - i <= n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k <= n; k++)
      if ((s[i + k] & 0xc0) != 0x80) return i;
    i += n + 1;
  }
  return len;
}

/* ---- the header ---- */

static int parse_dtype(const char *s, tpu_st_dtype_t *out) {
  for (int i = 0; i < TPU_ST_DTYPE_COUNT; i++)
    if (strcmp(s, dtypes[i].name) == 0) {
      *out = (tpu_st_dtype_t)i;
      return 1;
    }
  return 0;
}

static int cmp_offsets(const void *a, const void *b) {
  const tpu_st_tensor_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_names(const void *a, const void *b) {
  const tpu_st_tensor_t *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

/* Fills *t from one header entry (everything but the data pointer). */
static tpu_status_t parse_tensor(const char *file, const char *key, json_t *v, tpu_st_tensor_t *t,
                                 uint64_t *dims, char *err, size_t errlen) {
  char nm[128], shp[256];
  safe_name(nm, sizeof nm, key);
  if (!json_is_object(v))
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': expected an object with dtype, shape and data_offsets", nm);
  const char *k;
  json_t *field;
  json_object_foreach(v, k, field) {
    if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets")) {
      char fk[128];
      return fail(err, errlen, TPU_EINVAL, file,
                  "tensor '%s': unknown field '%s' (expected dtype, shape, data_offsets)", nm,
                  safe_name(fk, sizeof fk, k));
    }
  }

  json_t *dt = json_object_get(v, "dtype");
  if (!dt) return fail(err, errlen, TPU_EINVAL, file, "tensor '%s': missing dtype", nm);
  if (!json_is_string(dt))
    return fail(err, errlen, TPU_EINVAL, file, "tensor '%s': dtype must be a string", nm);
  if (!parse_dtype(json_string_value(dt), &t->dtype)) {
    char dn[128];
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': unknown dtype '%s' (expected one of BOOL, U8, I8, F8_E5M2, "
                "F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F4, "
                "F6_E2M3, F6_E3M2)",
                nm, safe_name(dn, sizeof dn, json_string_value(dt)));
  }

  json_t *sh = json_object_get(v, "shape");
  if (!sh) return fail(err, errlen, TPU_EINVAL, file, "tensor '%s': missing shape", nm);
  if (!json_is_array(sh))
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': shape must be an array of non-negative integers", nm);
  t->ndim = json_array_size(sh);
  if (t->ndim > TPU_SAFETENSORS_MAX_DIMS)
    return fail(err, errlen, TPU_EINVAL, file, "tensor '%s': shape has %zu dimensions, at most %d",
                nm, t->ndim, TPU_SAFETENSORS_MAX_DIMS);
  uint64_t nel = 1;
  int overflow = 0;
  for (size_t i = 0; i < t->ndim; i++) {
    json_t *d = json_array_get(sh, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return fail(err, errlen, TPU_EINVAL, file,
                  "tensor '%s': shape[%zu] must be a non-negative integer", nm, i);
    dims[i] = (uint64_t)json_integer_value(d);
    if (__builtin_mul_overflow(nel, dims[i], &nel)) overflow = 1;
  }
  /* A zero dimension makes the product 0 whatever overflowed before it. */
  for (size_t i = 0; i < t->ndim; i++)
    if (dims[i] == 0) overflow = 0, nel = 0;
  if (overflow)
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': shape %s has more than 2^64 elements", nm,
                fmt_shape(shp, sizeof shp, dims, t->ndim));
  t->nelements = nel;

  json_t *off = json_object_get(v, "data_offsets");
  if (!off) return fail(err, errlen, TPU_EINVAL, file, "tensor '%s': missing data_offsets", nm);
  json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
  if (!json_is_array(off) || json_array_size(off) != 2 || !json_is_integer(b) ||
      !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': data_offsets must be [begin, end], two non-negative integers", nm);
  t->begin = (uint64_t)json_integer_value(b);
  t->end = (uint64_t)json_integer_value(e);
  if (t->end < t->begin)
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': data_offsets [%llu, %llu] end before they begin", nm,
                (unsigned long long)t->begin, (unsigned long long)t->end);

  uint64_t bits, held = t->end - t->begin;
  if (__builtin_mul_overflow(nel, (uint64_t)dtypes[t->dtype].bits, &bits))
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': shape %s of %s needs more than 2^64 bits", nm,
                fmt_shape(shp, sizeof shp, dims, t->ndim), dtypes[t->dtype].name);
  if (bits % 8)
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': shape %s of %s is %llu bits, not a whole number of bytes", nm,
                fmt_shape(shp, sizeof shp, dims, t->ndim), dtypes[t->dtype].name,
                (unsigned long long)bits);
  if (bits / 8 != held)
    return fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, shape %s of %s needs %llu",
                nm, (unsigned long long)t->begin, (unsigned long long)t->end,
                (unsigned long long)held, fmt_shape(shp, sizeof shp, dims, t->ndim),
                dtypes[t->dtype].name, (unsigned long long)(bits / 8));
  if (held > SIZE_MAX)
    return fail(err, errlen, TPU_EOVERFLOW, file, "tensor '%s': %llu bytes exceed the address space",
                nm, (unsigned long long)held);
  t->nbytes = (size_t)held;
  return TPU_OK;
}

static tpu_status_t parse_metadata(const char *file, json_t *v, tpu_safetensors_t *st, char *err,
                                   size_t errlen) {
  if (!json_is_object(v))
    return fail(err, errlen, TPU_EINVAL, file, "__metadata__ must be an object of strings");
  st->meta = calloc(2 * json_object_size(v) + 1, sizeof *st->meta);
  if (!st->meta) return fail(err, errlen, TPU_ENOMEM, file, "out of memory");
  const char *k;
  json_t *s;
  json_object_foreach(v, k, s) {
    char nm[128];
    if (!json_is_string(s))
      return fail(err, errlen, TPU_EINVAL, file, "__metadata__['%s'] must be a string",
                  safe_name(nm, sizeof nm, k));
    st->meta[2 * st->nmeta] = strdup(k);
    st->meta[2 * st->nmeta + 1] = strdup(json_string_value(s));
    st->nmeta++; /* counted before the check so close frees a half-made pair */
    if (!st->meta[2 * st->nmeta - 2] || !st->meta[2 * st->nmeta - 1])
      return fail(err, errlen, TPU_ENOMEM, file, "out of memory");
  }
  return TPU_OK;
}

/* The checks of a whole file, in order. st->base and st->len are set. */
static tpu_status_t validate(tpu_safetensors_t *st, const char *file, char *err, size_t errlen) {
  const uint8_t *buf = st->base;
  size_t len = st->len;
  tpu_status_t rc;

  if (len < 8)
    return fail(err, errlen, TPU_EINVAL, file,
                "file is %zu bytes, too short for the 8-byte header length", len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i]; /* little-endian */
  if (hlen > TPU_SAFETENSORS_MAX_HEADER)
    return fail(err, errlen, TPU_EINVAL, file, "header length %llu exceeds the limit of %llu bytes",
                (unsigned long long)hlen, TPU_SAFETENSORS_MAX_HEADER);
  if (hlen > len - 8)
    return fail(err, errlen, TPU_EINVAL, file,
                "header length %llu runs past the end of the file (%zu bytes leave room for %zu)",
                (unsigned long long)hlen, len, len - 8);
  const uint8_t *hdr = buf + 8;
  size_t bad = utf8_invalid_at(hdr, (size_t)hlen);
  if (bad < hlen)
    return fail(err, errlen, TPU_EINVAL, file,
                "header is not valid UTF-8: byte 0x%02x at header offset %zu", hdr[bad], bad);
  if (hlen == 0 || hdr[0] != '{')
    return fail(err, errlen, TPU_EINVAL, file, "header must be a JSON object starting with '{'%s",
                hlen == 0 ? ", but it is empty" : "");

  json_error_t jerr;
  json_t *root = json_loadb((const char *)hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    if (strstr(jerr.text, "duplicate object key"))
      return fail(err, errlen, TPU_EINVAL, file,
                  "header names the same key twice (%s, header line %d, column %d): duplicate "
                  "tensor names are refused",
                  jerr.text, jerr.line, jerr.column);
    return fail(err, errlen, TPU_EINVAL, file, "header is not valid JSON: %s (line %d, column %d)",
                jerr.text, jerr.line, jerr.column);
  }

  /* Shapes share one array sized by what the header holds (not n × MAX_DIMS: a 100 MB header of
   * small entries must not cost gigabytes). */
  size_t n = json_object_size(root), ndims = 0;
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    size_t d = json_array_size(json_object_get(v, "shape")); /* 0 unless an array */
    ndims += d < TPU_SAFETENSORS_MAX_DIMS ? d : TPU_SAFETENSORS_MAX_DIMS;
  }
  st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
  st->dims = calloc(ndims ? ndims : 1, sizeof *st->dims);
  if (!st->tensors || !st->dims) {
    rc = fail(err, errlen, TPU_ENOMEM, file, "out of memory");
    goto done;
  }
  size_t used = 0; /* dims handed out so far */
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      if ((rc = parse_metadata(file, v, st, err, errlen)) != TPU_OK) goto done;
      continue;
    }
    tpu_st_tensor_t *t = &st->tensors[st->ntensors];
    uint64_t *dims = st->dims + used;
    t->shape = dims;
    if ((rc = parse_tensor(file, key, v, t, dims, err, errlen)) != TPU_OK) goto done;
    used += t->ndim; /* parse_tensor refused more than MAX_DIMS, as counted above */
    if (!(t->name = strdup(key))) {
      rc = fail(err, errlen, TPU_ENOMEM, file, "out of memory");
      goto done;
    }
    st->ntensors++;
  }

  qsort(st->tensors, st->ntensors, sizeof *st->tensors, cmp_offsets);
  uint64_t at = 0;
  const uint8_t *data = hdr + hlen;
  size_t data_len = len - 8 - (size_t)hlen;
  for (size_t i = 0; i < st->ntensors; i++) {
    tpu_st_tensor_t *t = &st->tensors[i];
    char a[128], b[128];
    if (t->begin > at) {
      if (i == 0)
        rc = fail(err, errlen, TPU_EINVAL, file,
                  "tensor '%s': data_offsets [%llu, %llu] leave a gap: the first tensor must "
                  "start at offset 0",
                  safe_name(a, sizeof a, t->name), (unsigned long long)t->begin,
                  (unsigned long long)t->end);
      else
        rc = fail(err, errlen, TPU_EINVAL, file,
                  "tensor '%s': data_offsets [%llu, %llu] leave a gap of %llu bytes after tensor "
                  "'%s', which ends at %llu",
                  safe_name(a, sizeof a, t->name), (unsigned long long)t->begin,
                  (unsigned long long)t->end, (unsigned long long)(t->begin - at),
                  safe_name(b, sizeof b, st->tensors[i - 1].name), (unsigned long long)at);
      goto done;
    }
    if (t->begin < at) {
      const tpu_st_tensor_t *p = &st->tensors[i - 1]; /* at > 0 means i > 0 */
      rc = fail(err, errlen, TPU_EINVAL, file,
                "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' at [%llu, %llu]",
                safe_name(a, sizeof a, t->name), (unsigned long long)t->begin,
                (unsigned long long)t->end, safe_name(b, sizeof b, p->name),
                (unsigned long long)p->begin, (unsigned long long)p->end);
      goto done;
    }
    at = t->end;
  }
  if (at != data_len) {
    if (at < data_len)
      rc = fail(err, errlen, TPU_EINVAL, file,
                "%zu trailing bytes: the tensors end at data offset %llu but the file has %zu "
                "bytes of data",
                data_len - (size_t)at, (unsigned long long)at, data_len);
    else
      rc = fail(err, errlen, TPU_EINVAL, file,
                "tensors need %llu bytes of data but the file has only %zu after the header "
                "(truncated file?)",
                (unsigned long long)at, data_len);
    goto done;
  }
  for (size_t i = 0; i < st->ntensors; i++) st->tensors[i].data = data + st->tensors[i].begin;

  st->by_name = malloc((st->ntensors ? st->ntensors : 1) * sizeof *st->by_name);
  if (!st->by_name) {
    rc = fail(err, errlen, TPU_ENOMEM, file, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < st->ntensors; i++) st->by_name[i] = &st->tensors[i];
  qsort(st->by_name, st->ntensors, sizeof *st->by_name, cmp_names);
  rc = TPU_OK;
done:
  json_decref(root);
  return rc;
}

/* ---- open, close, look-ups ---- */

void tpu_safetensors_close(tpu_safetensors_t *st) {
  if (!st) return;
  for (size_t i = 0; i < st->ntensors; i++) free((char *)st->tensors[i].name);
  for (size_t i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
  free(st->meta);
  free(st->tensors);
  free(st->dims);
  free(st->by_name);
  if (st->owned) free((void *)st->base);
  free(st);
}

static tpu_status_t parse_into(tpu_safetensors_t *st, const char *name, tpu_safetensors_t **out,
                               char *err, size_t errlen) {
  tpu_status_t rc = validate(st, name, err, errlen);
  if (rc != TPU_OK) {
    tpu_safetensors_close(st);
    return rc;
  }
  *out = st;
  return TPU_OK;
}

tpu_status_t tpu_safetensors_parse(const void *buf, size_t len, const char *name,
                                   tpu_safetensors_t **out, char *err, size_t errlen) {
  if (!name) name = "<memory>";
  if (err && errlen) err[0] = '\0';
  if (!out || (!buf && len)) return fail(err, errlen, TPU_EINVAL, name, "invalid argument");
  *out = NULL;
  tpu_safetensors_t *st = calloc(1, sizeof *st);
  if (!st) return fail(err, errlen, TPU_ENOMEM, name, "out of memory");
  st->base = buf;
  st->len = len;
  return parse_into(st, name, out, err, errlen);
}

/* Reads `path` into a fresh handle that owns the bytes (no validation yet). */
static tpu_status_t read_file(const char *path, const tpu_st_read_opts_t *o,
                              tpu_safetensors_t **out, char *err, size_t errlen) {
  void *buf;
  size_t len;
  int e = tpu_file_read(path, o ? o->max_bytes : 0, o ? o->cancel : NULL, &buf, &len, NULL, err,
                        errlen);
  if (o && o->sys_errno) *o->sys_errno = e;
  if (e) {
    if (e == ECANCELED) return TPU_ECANCELED;
    if (e == ENOMEM) return TPU_ENOMEM;
    return TPU_EINVAL; /* the message says why */
  }
  tpu_safetensors_t *st = calloc(1, sizeof *st);
  if (!st) {
    free(buf);
    if (o && o->sys_errno) *o->sys_errno = ENOMEM;
    return fail(err, errlen, TPU_ENOMEM, path, "out of memory");
  }
  st->base = buf;
  st->len = len;
  st->owned = 1;
  *out = st;
  return TPU_OK;
}

static int is_hex64(const char *s) {
  size_t i = 0;
  for (; s[i]; i++)
    if (i >= 64 || !((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
                     (s[i] >= 'A' && s[i] <= 'F')))
      return 0;
  return i == 64;
}

static tpu_status_t digest(const tpu_safetensors_t *st, const atomic_int *cancel, char hex[65]);

tpu_status_t tpu_safetensors_load(const char *path, const char *sha256_hex,
                                  const tpu_st_read_opts_t *opts, tpu_safetensors_t **out,
                                  char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (opts && opts->sys_errno) *opts->sys_errno = 0;
  if (!out || !path) return fail(err, errlen, TPU_EINVAL, path ? path : "(null)", "invalid argument");
  *out = NULL;
  if (sha256_hex && !is_hex64(sha256_hex))
    return fail(err, errlen, TPU_EINVAL, path, "expected SHA-256 must be 64 hex digits");
  tpu_safetensors_t *st = NULL;
  tpu_status_t rc = read_file(path, opts, &st, err, errlen);
  if (rc != TPU_OK) return rc;
  if (!sha256_hex) return parse_into(st, path, out, err, errlen);
  /* The digest is of the private copy that is parsed next: what was verified is what is used. */
  char got[65];
  if ((rc = digest(st, opts ? opts->cancel : NULL, got)) != TPU_OK) {
    tpu_safetensors_close(st);
    if (rc == TPU_ECANCELED) return fail(err, errlen, rc, path, "cancelled while hashing");
    return fail(err, errlen, rc, path, "SHA-256 failed (OpenSSL EVP)");
  }
  if (strncasecmp(got, sha256_hex, 64) != 0) {
    char want[65];
    for (int i = 0; i < 64; i++)
      want[i] = (char)(sha256_hex[i] >= 'A' && sha256_hex[i] <= 'F' ? sha256_hex[i] + 32
                                                                    : sha256_hex[i]);
    want[64] = '\0';
    tpu_safetensors_close(st);
    return fail(err, errlen, TPU_EINVAL, path,
                "SHA-256 mismatch: the file's digest is %s, expected %s (corrupt, partially "
                "copied or replaced file)",
                got, want);
  }
  return parse_into(st, path, out, err, errlen);
}

tpu_status_t tpu_safetensors_open(const char *path, tpu_safetensors_t **out, char *err,
                                  size_t errlen) {
  return tpu_safetensors_load(path, NULL, NULL, out, err, errlen);
}

static tpu_status_t digest(const tpu_safetensors_t *st, const atomic_int *cancel, char hex[65]) {
  int e = tpu_file_sha256(st->base, st->len, cancel, hex);
  return e == 0 ? TPU_OK : e == ECANCELED ? TPU_ECANCELED : TPU_ENOMEM;
}

tpu_status_t tpu_safetensors_sha256(const tpu_safetensors_t *st, char hex[65]) {
  if (!st || !hex) return TPU_EINVAL;
  return digest(st, NULL, hex);
}

const tpu_st_tensor_t *tpu_safetensors_find(const tpu_safetensors_t *st, const char *name) {
  if (!st || !name) return NULL;
  tpu_st_tensor_t key = {.name = name};
  const tpu_st_tensor_t *kp = &key;
  const tpu_st_tensor_t **hit =
      bsearch(&kp, st->by_name, st->ntensors, sizeof *st->by_name, cmp_names);
  return hit ? *hit : NULL;
}

size_t tpu_safetensors_count(const tpu_safetensors_t *st) { return st ? st->ntensors : 0; }

const tpu_st_tensor_t *tpu_safetensors_tensor(const tpu_safetensors_t *st, size_t i) {
  return st && i < st->ntensors ? &st->tensors[i] : NULL;
}

const char *tpu_safetensors_metadata(const tpu_safetensors_t *st, const char *key) {
  if (!st || !key) return NULL;
  for (size_t i = 0; i < st->nmeta; i++)
    if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
  return NULL;
}

const void *tpu_safetensors_bytes(const tpu_safetensors_t *st, size_t *len) {
  if (len) *len = st ? st->len : 0;
  return st ? st->base : NULL;
}

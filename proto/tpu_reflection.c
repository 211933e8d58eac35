/*
 * tpu_reflection.c - gRPC server reflection over the embedded descriptors (tpu_reflection.h).
 */
#include "tpu_reflection.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reflection.pb-c.h"

/* ---- a minimal protobuf wire reader over FileDescriptorProto bytes ---- */

typedef struct {
  const uint8_t *p, *end;
} rd_t;

static int rd_varint(rd_t *r, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && r->p < r->end; shift += 7) {
    uint8_t b = *r->p++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

/* The next field: its number, wire type, and (length-delimited) its bytes. */
static int rd_field(rd_t *r, uint32_t *num, int *wt, const uint8_t **data, size_t *dlen) {
  uint64_t key, v;
  if (rd_varint(r, &key) != 0) return -1;
  *num = (uint32_t)(key >> 3);
  *wt = (int)(key & 7);
  *data = NULL;
  *dlen = 0;
  switch (*wt) {
  case 0: return rd_varint(r, &v);
  case 1: if (r->end - r->p < 8) return -1; r->p += 8; return 0;
  case 5: if (r->end - r->p < 4) return -1; r->p += 4; return 0;
  case 2:
    if (rd_varint(r, &v) != 0 || v > (uint64_t)(r->end - r->p)) return -1;
    *data = r->p;
    *dlen = (size_t)v;
    r->p += v;
    return 0;
  default: return -1;
  }
}

/* ---- the symbol table: "package.Name", "package.Outer.Inner", "package.Service.Method" ---- */

#define MAX_SYMBOLS 1024

typedef struct {
  char *name;
  size_t file;
} sym_t;

static struct {
  pthread_once_t once;
  const uint8_t *fdp[16]; /* each set's FileDescriptorProto */
  size_t fdp_len[16];
  char *fname[16];
  sym_t syms[MAX_SYMBOLS];
  size_t nsyms;
  char *services[64];
  size_t nservices;
} T = {.once = PTHREAD_ONCE_INIT};

static char *join(const char *a, const uint8_t *b, size_t blen) {
  size_t al = strlen(a);
  char *s = malloc(al + 1 + blen + 1);
  if (!s) return NULL;
  memcpy(s, a, al);
  size_t o = al;
  if (al) s[o++] = '.';
  memcpy(s + o, b, blen);
  s[o + blen] = '\0';
  return s;
}

static void add_sym(char *name, size_t file) {
  if (!name) return;
  if (T.nsyms == MAX_SYMBOLS) {
    free(name);
    return;
  }
  T.syms[T.nsyms].name = name;
  T.syms[T.nsyms++].file = file;
}

/* The name (field 1) of a DescriptorProto/EnumDescriptorProto/ServiceDescriptorProto/... */
static int name_of(const uint8_t *p, size_t n, const uint8_t **name, size_t *nlen) {
  rd_t r = {p, p + n};
  uint32_t num;
  int wt;
  const uint8_t *d;
  size_t dl;
  while (r.p < r.end) {
    if (rd_field(&r, &num, &wt, &d, &dl) != 0) return -1;
    if (num == 1 && wt == 2) {
      *name = d;
      *nlen = dl;
      return 0;
    }
  }
  return -1;
}

/* A message (DescriptorProto: nested_type 3, enum_type 4) and what it nests. */
static void add_message(const char *scope, const uint8_t *p, size_t n, size_t file) {
  const uint8_t *nm;
  size_t nl;
  if (name_of(p, n, &nm, &nl) != 0) return;
  char *full = join(scope, nm, nl);
  if (!full) return;
  add_sym(full, file);
  rd_t r = {p, p + n};
  uint32_t num;
  int wt;
  const uint8_t *d;
  size_t dl;
  while (r.p < r.end && rd_field(&r, &num, &wt, &d, &dl) == 0) {
    if (wt != 2) continue;
    if (num == 3) add_message(full, d, dl, file);
    else if (num == 4 && name_of(d, dl, &nm, &nl) == 0) add_sym(join(full, nm, nl), file);
  }
}

static void build(void) {
  for (size_t f = 0; f < tpu__reflection_nsets && f < 16; f++) {
    /* A FileDescriptorSet of one file: field 1, the FileDescriptorProto. */
    rd_t set = {tpu__reflection_sets[f].bytes,
                tpu__reflection_sets[f].bytes + tpu__reflection_sets[f].len};
    uint32_t num;
    int wt;
    const uint8_t *d;
    size_t dl;
    if (rd_field(&set, &num, &wt, &d, &dl) != 0 || num != 1 || wt != 2) continue;
    T.fdp[f] = d;
    T.fdp_len[f] = dl;
    T.fname[f] = (char *)tpu__reflection_sets[f].name;
    /* package (2) first: it scopes the rest, and protoc writes it before the definitions */
    char pkg[128] = "";
    rd_t r = {d, d + dl};
    const uint8_t *v;
    size_t vl;
    while (r.p < r.end && rd_field(&r, &num, &wt, &v, &vl) == 0)
      if (num == 2 && wt == 2 && vl < sizeof pkg) {
        memcpy(pkg, v, vl);
        pkg[vl] = '\0';
      }
    r = (rd_t){d, d + dl};
    while (r.p < r.end && rd_field(&r, &num, &wt, &v, &vl) == 0) {
      if (wt != 2) continue;
      const uint8_t *nm;
      size_t nl;
      if (num == 4) {
        add_message(pkg, v, vl, f);
      } else if (num == 5 && name_of(v, vl, &nm, &nl) == 0) {
        add_sym(join(pkg, nm, nl), f);
      } else if (num == 6 && name_of(v, vl, &nm, &nl) == 0) {
        char *svc = join(pkg, nm, nl);
        if (!svc) continue;
        if (T.nservices < 64) T.services[T.nservices++] = svc;
        add_sym(strdup(svc), f);
        rd_t m = {v, v + vl}; /* methods (2) */
        const uint8_t *md;
        size_t ml;
        while (m.p < m.end && rd_field(&m, &num, &wt, &md, &ml) == 0)
          if (num == 2 && wt == 2 && name_of(md, ml, &nm, &nl) == 0) add_sym(join(svc, nm, nl), f);
      }
    }
  }
}

int tpu_reflection_path(const uint8_t *p, size_t n) {
  static const char v1[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
  static const char va[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  return p && ((n == sizeof v1 - 1 && !memcmp(p, v1, n)) || (n == sizeof va - 1 && !memcmp(p, va, n)));
}

int tpu_reflection_answer(const uint8_t *req, size_t len, uint8_t **out, size_t *outlen) {
  *out = NULL;
  *outlen = 0;
  pthread_once(&T.once, build);
  Grpc__Reflection__V1__ServerReflectionRequest *q =
      grpc__reflection__v1__server_reflection_request__unpack(NULL, len, req);
  if (!q) return -1;
  Grpc__Reflection__V1__ServerReflectionResponse r =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
  r.valid_host = q->host;
  r.original_request = q;
  Grpc__Reflection__V1__ListServiceResponse ls = GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
  Grpc__Reflection__V1__ServiceResponse svc[64], *svcp[64];
  Grpc__Reflection__V1__FileDescriptorResponse fd =
      GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
  ProtobufCBinaryData file;
  Grpc__Reflection__V1__ErrorResponse er = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
  char msg[300];
  long found = -1;
  switch (q->message_request_case) {
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
    for (size_t i = 0; i < T.nservices; i++) {
      Grpc__Reflection__V1__ServiceResponse init = GRPC__REFLECTION__V1__SERVICE_RESPONSE__INIT;
      svc[i] = init;
      svc[i].name = T.services[i];
      svcp[i] = &svc[i];
    }
    ls.n_service = T.nservices;
    ls.service = svcp;
    r.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
    r.list_services_response = &ls;
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
    for (size_t f = 0; f < tpu__reflection_nsets && f < 16 && found < 0; f++)
      if (T.fdp[f] && !strcmp(T.fname[f], q->file_by_filename)) found = (long)f;
    snprintf(msg, sizeof msg, "file not found: %.200s", q->file_by_filename);
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
    for (size_t i = 0; i < T.nsyms && found < 0; i++)
      if (!strcmp(T.syms[i].name, q->file_containing_symbol)) found = (long)T.syms[i].file;
    snprintf(msg, sizeof msg, "symbol not found: %.200s", q->file_containing_symbol);
    break;
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
  case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
    snprintf(msg, sizeof msg, "extensions not found: tpud's services declare none");
    break;
  default:
    er.error_code = 3; /* INVALID_ARGUMENT */
    er.error_message = "the request names nothing to reflect";
    break;
  }
  if (!er.error_code && q->message_request_case !=
                            GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES) {
    if (found >= 0) {
      file.data = (uint8_t *)T.fdp[found];
      file.len = T.fdp_len[found];
      fd.n_file_descriptor_proto = 1;
      fd.file_descriptor_proto = &file;
      r.message_response_case =
          GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
      r.file_descriptor_response = &fd;
    } else {
      er.error_code = 5; /* NOT_FOUND */
      er.error_message = msg;
    }
  }
  if (er.error_code) {
    r.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    r.error_response = &er;
  }
  size_t n = grpc__reflection__v1__server_reflection_response__get_packed_size(&r);
  uint8_t *buf = malloc(n ? n : 1);
  if (buf) {
    grpc__reflection__v1__server_reflection_response__pack(&r, buf);
    *out = buf;
    *outlen = n;
  }
  grpc__reflection__v1__server_reflection_request__free_unpacked(q, NULL);
  return buf ? 0 : -1;
}

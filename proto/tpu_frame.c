/*
 * tpu_frame.c - gRPC length-prefixed framing: header parsing and the incremental decoder.
 *
 * DESIGN
 * The decoder is a two-state machine (HEADER: gathering 5 header bytes; BODY: gathering the
 * message) plus a sticky FAILED state. It prefers pointing into the caller's chunk over copying:
 * a message is gathered into the decoder's buffer only when it straddles chunks. That buffer
 * grows with the bytes actually received, so a peer that announces 64 MiB and then trickles
 * bytes costs what it sent, not what it claimed; a buffer grown past TPU_FRAME_KEEP_BYTES is
 * released between frames so one large request doesn't pin memory for a connection's lifetime.
 * Never reads a socket; never allocates before a header has passed its checks.
 */
#include "tpu_frame.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu_proto_int.h"
#include "tpu_text.h"

/* A gathering buffer larger than this is freed between frames (bytes). */
#define TPU_FRAME_KEEP_BYTES ((size_t)1 << 20)
/* Smallest gathering buffer allocated (bytes). */
#define TPU_FRAME_MIN_ALLOC ((size_t)4096)

/* gRPC status codes used by the error mapping (tpud.StatusCode; kept numeric here so framing
 * has no dependency on generated code). */
enum {
  GRPC_OK = 0,
  GRPC_UNKNOWN = 2,
  GRPC_INVALID_ARGUMENT = 3,
  GRPC_RESOURCE_EXHAUSTED = 8,
  GRPC_UNIMPLEMENTED = 12,
  GRPC_INTERNAL = 13
};

static const char *const status_messages[] = {
#define TPU__PROTO_STATUS_MSG(name, msg) msg,
    TPU_PROTO_STATUS_MAP(TPU__PROTO_STATUS_MSG)
#undef TPU__PROTO_STATUS_MSG
};

const char *tpu_proto_strerror(tpu_proto_status_t status) {
  if ((unsigned)status >= TPU_PROTO_STATUS_COUNT) return "unknown status";
  return status_messages[status];
}

int tpu_proto_status_grpc_code(tpu_proto_status_t status) {
  switch (status) {
  case TPU_PROTO_OK:
    return GRPC_OK;
  case TPU_PROTO_EFLAG:
  case TPU_PROTO_ETRUNCATED:
  case TPU_PROTO_EDECODE:
  case TPU_PROTO_ENOID:
    return GRPC_INVALID_ARGUMENT;
  case TPU_PROTO_ETOOBIG:
  case TPU_PROTO_EPAYLOAD:
  case TPU_PROTO_ENOMEM:
    return GRPC_RESOURCE_EXHAUSTED;
  case TPU_PROTO_ECOMPRESSED: /* what gRPC answers for an unsupported message encoding */
  case TPU_PROTO_EMETHOD:
    return GRPC_UNIMPLEMENTED;
  case TPU_PROTO_ENOSPC:
  case TPU_PROTO_EINVAL:
    return GRPC_INTERNAL;
  case TPU_PROTO_EAGAIN: /* not an error; callers should never need to map it */
  case TPU_PROTO_ECODE:  /* a peer's code we don't know: gRPC clients report UNKNOWN */
  default:
    return GRPC_UNKNOWN;
  }
}

bool tpu_proto_status_fatal(tpu_proto_status_t status) {
  return status == TPU_PROTO_EFLAG || status == TPU_PROTO_ECOMPRESSED ||
         status == TPU_PROTO_ETOOBIG || status == TPU_PROTO_ETRUNCATED;
}

tpu_proto_status_t tpu__proto_error(tpu_proto_error_t *err, tpu_proto_status_t status,
                                    uint64_t request_id, const char *fmt, ...) {
  if (err) {
    va_list ap;
    err->status = status;
    err->request_id = request_id;
    va_start(ap, fmt);
    tpu_verrf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return status;
}

/* ---- headers ---- */

tpu_proto_status_t tpu_frame_parse_header(const uint8_t hdr[TPU_FRAME_HEADER_SIZE],
                                          size_t max_message, uint32_t *len,
                                          tpu_proto_error_t *err) {
  if (!hdr || !len)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_frame_parse_header: header and length pointers must not be NULL");
  if (max_message == 0) max_message = TPU_FRAME_DEFAULT_MAX_MESSAGE;
  /* The flag is checked first: a bad flag means the stream is out of step, and the "length"
   * that follows it is then noise not worth reporting. */
  if (hdr[0] == TPU_FRAME_FLAG_COMPRESSED)
    return tpu__proto_error(err, TPU_PROTO_ECOMPRESSED, 0,
                            "frame is compressed (flag byte 1) but no compression was "
                            "negotiated: send uncompressed messages (flag byte 0)");
  if (hdr[0] != TPU_FRAME_FLAG_NONE)
    return tpu__proto_error(err, TPU_PROTO_EFLAG, 0,
                            "bad frame flag byte 0x%02x: expected 0x00 (uncompressed message) "
                            "followed by a 4-byte big-endian length",
                            hdr[0]);
  uint32_t n = (uint32_t)hdr[1] << 24 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 8 |
               (uint32_t)hdr[4];
  if (n > max_message)
    return tpu__proto_error(err, TPU_PROTO_ETOOBIG, 0,
                            "frame announces a %" PRIu32 "-byte message, over the maximum "
                            "message size of %zu bytes",
                            n, max_message);
  *len = n;
  return TPU_PROTO_OK;
}

tpu_proto_status_t tpu_frame_write_header(uint8_t hdr[TPU_FRAME_HEADER_SIZE], size_t len,
                                          tpu_proto_error_t *err) {
  if (!hdr)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_frame_write_header: header pointer must not be NULL");
  if (len > UINT32_MAX)
    return tpu__proto_error(err, TPU_PROTO_ETOOBIG, 0,
                            "message of %zu bytes does not fit a frame: the length field "
                            "holds at most %" PRIu32 " bytes",
                            len, UINT32_MAX);
  hdr[0] = TPU_FRAME_FLAG_NONE;
  hdr[1] = (uint8_t)(len >> 24);
  hdr[2] = (uint8_t)(len >> 16);
  hdr[3] = (uint8_t)(len >> 8);
  hdr[4] = (uint8_t)len;
  return TPU_PROTO_OK;
}

/* ---- the decoder ---- */

typedef enum {
  DEC_HEADER, /* gathering the 5 header bytes (hdr_got of them so far) */
  DEC_BODY,   /* header accepted; gathering body_len message bytes (body_got so far) */
  DEC_FAILED  /* a framing error; `failure` says which, until reset */
} dec_state_t;

struct tpu_frame_decoder {
  size_t max_message;
  dec_state_t state;
  uint8_t hdr[TPU_FRAME_HEADER_SIZE];
  size_t hdr_got;
  uint32_t body_len;
  size_t body_got;
  uint8_t *buf; /* gathering buffer for split messages */
  size_t cap;   /* its size in bytes */
  tpu_proto_error_t failure;
};

/* Returned as frame->data for empty messages, so data is never NULL for a complete frame. */
static const uint8_t empty_message[1];

tpu_proto_status_t tpu_frame_decoder_create(size_t max_message, tpu_frame_decoder_t **out) {
  if (!out) return TPU_PROTO_EINVAL;
  *out = NULL;
  tpu_frame_decoder_t *dec = calloc(1, sizeof *dec);
  if (!dec) return TPU_PROTO_ENOMEM;
  dec->max_message = max_message ? max_message : TPU_FRAME_DEFAULT_MAX_MESSAGE;
  dec->state = DEC_HEADER;
  *out = dec;
  return TPU_PROTO_OK;
}

void tpu_frame_decoder_free(tpu_frame_decoder_t *dec) {
  if (!dec) return;
  free(dec->buf);
  free(dec);
}

void tpu_frame_decoder_reset(tpu_frame_decoder_t *dec) {
  if (!dec) return;
  dec->state = DEC_HEADER;
  dec->hdr_got = 0;
  dec->body_len = 0;
  dec->body_got = 0;
  memset(&dec->failure, 0, sizeof dec->failure);
}

size_t tpu_frame_decoder_pending(const tpu_frame_decoder_t *dec) {
  if (!dec) return 0;
  switch (dec->state) {
  case DEC_HEADER:
    return dec->hdr_got;
  case DEC_BODY:
    return TPU_FRAME_HEADER_SIZE + dec->body_got;
  case DEC_FAILED:
  default:
    return 0;
  }
}

size_t tpu_frame_decoder_capacity(const tpu_frame_decoder_t *dec) { return dec ? dec->cap : 0; }

/* Makes room for `need` bytes (need <= body_len), growing geometrically but never past the
 * frame's length, so memory tracks received bytes within a factor of two. */
static tpu_proto_status_t reserve(tpu_frame_decoder_t *dec, size_t need, tpu_proto_error_t *err) {
  if (need <= dec->cap) return TPU_PROTO_OK;
  size_t cap = dec->cap ? dec->cap : TPU_FRAME_MIN_ALLOC;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > dec->body_len) cap = dec->body_len;
  uint8_t *p = realloc(dec->buf, cap);
  if (!p)
    return tpu__proto_error(err, TPU_PROTO_ENOMEM, 0,
                            "out of memory gathering a %" PRIu32 "-byte message (%zu bytes)",
                            dec->body_len, cap);
  dec->buf = p;
  dec->cap = cap;
  return TPU_PROTO_OK;
}

static tpu_proto_status_t fail(tpu_frame_decoder_t *dec, tpu_proto_error_t *err) {
  dec->state = DEC_FAILED;
  if (err) *err = dec->failure;
  return dec->failure.status;
}

tpu_proto_status_t tpu_frame_decoder_feed(tpu_frame_decoder_t *dec, const uint8_t *data,
                                          size_t len, size_t *consumed, tpu_frame_t *frame,
                                          tpu_proto_error_t *err) {
  if (consumed) *consumed = 0;
  if (frame) {
    frame->data = NULL;
    frame->len = 0;
  }
  if (!dec || !consumed || !frame || (!data && len))
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_frame_decoder_feed: decoder, consumed and frame must not be "
                            "NULL, nor data when len > 0");
  if (dec->state == DEC_FAILED) {
    if (err) *err = dec->failure;
    return dec->failure.status;
  }
  /* The previous frame (possibly in buf) is no longer referenced: drop an outsized buffer. */
  if (dec->state == DEC_HEADER && dec->hdr_got == 0 && dec->cap > TPU_FRAME_KEEP_BYTES) {
    free(dec->buf);
    dec->buf = NULL;
    dec->cap = 0;
  }

  const uint8_t *p = data, *end = data + len;

  if (dec->state == DEC_HEADER) {
    const uint8_t *hdr;
    if (dec->hdr_got == 0 && (size_t)(end - p) >= TPU_FRAME_HEADER_SIZE) {
      hdr = p; /* whole header in this chunk: parse in place */
      p += TPU_FRAME_HEADER_SIZE;
    } else {
      size_t take = TPU_FRAME_HEADER_SIZE - dec->hdr_got;
      if (take > (size_t)(end - p)) take = (size_t)(end - p);
      if (take) memcpy(dec->hdr + dec->hdr_got, p, take);
      dec->hdr_got += take;
      p += take;
      if (dec->hdr_got < TPU_FRAME_HEADER_SIZE) {
        *consumed = len;
        return TPU_PROTO_EAGAIN;
      }
      hdr = dec->hdr;
    }
    uint32_t body_len;
    tpu_proto_status_t st = tpu_frame_parse_header(hdr, dec->max_message, &body_len,
                                                   &dec->failure);
    *consumed = (size_t)(p - data);
    if (st != TPU_PROTO_OK) return fail(dec, err);
    dec->hdr_got = 0;
    if (body_len == 0) {
      frame->data = empty_message;
      return TPU_PROTO_OK;
    }
    dec->state = DEC_BODY;
    dec->body_len = body_len;
    dec->body_got = 0;
  }

  /* DEC_BODY */
  size_t avail = (size_t)(end - p);
  if (dec->body_got == 0 && avail >= dec->body_len) {
    /* The whole message is inside this chunk: hand it out in place. */
    frame->data = p;
    frame->len = dec->body_len;
    p += dec->body_len;
    dec->state = DEC_HEADER;
    *consumed = (size_t)(p - data);
    return TPU_PROTO_OK;
  }
  size_t take = dec->body_len - dec->body_got;
  if (take > avail) take = avail;
  if (take) {
    tpu_proto_status_t st = reserve(dec, dec->body_got + take, &dec->failure);
    if (st != TPU_PROTO_OK) {
      *consumed = (size_t)(p - data);
      return fail(dec, err);
    }
    memcpy(dec->buf + dec->body_got, p, take);
    dec->body_got += take;
    p += take;
  }
  *consumed = (size_t)(p - data);
  if (dec->body_got < dec->body_len) return TPU_PROTO_EAGAIN;
  frame->data = dec->buf;
  frame->len = dec->body_len;
  dec->state = DEC_HEADER;
  dec->body_got = 0;
  return TPU_PROTO_OK;
}

tpu_proto_status_t tpu_frame_decoder_finish(const tpu_frame_decoder_t *dec,
                                            tpu_proto_error_t *err) {
  if (!dec)
    return tpu__proto_error(err, TPU_PROTO_EINVAL, 0,
                            "tpu_frame_decoder_finish: decoder must not be NULL");
  switch (dec->state) {
  case DEC_FAILED:
    if (err) *err = dec->failure;
    return dec->failure.status;
  case DEC_HEADER:
    if (dec->hdr_got == 0) return TPU_PROTO_OK;
    return tpu__proto_error(err, TPU_PROTO_ETRUNCATED, 0,
                            "stream ended inside a frame header: got %zu of %d header bytes",
                            dec->hdr_got, TPU_FRAME_HEADER_SIZE);
  case DEC_BODY:
  default:
    return tpu__proto_error(err, TPU_PROTO_ETRUNCATED, 0,
                            "stream ended inside a frame: got %zu of the %" PRIu32
                            " message bytes its header announced",
                            dec->body_got, dec->body_len);
  }
}

/* ---- text ---- */

bool tpu_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}


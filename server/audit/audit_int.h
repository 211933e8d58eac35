/*
 * audit_int.h - what audit.c (the writer) and audit_verify.c (the verifier) share: the one
 * definition of a record line's canonical bytes and hash, and the line parser. Not an API.
 */
#ifndef TPU_AUDIT_INT_H
#define TPU_AUDIT_INT_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>

#define TPU__AUDIT_KEY_MAX 1024
#define TPU__AUDIT_ZERO_HASH "0000000000000000000000000000000000000000000000000000000000000000"
#define TPU__AUDIT_HASH_SEP ",\"hash\":\""
/* "torn tail: N bytes, sha256 HEX" - the message of a "recovered" record. */
#define TPU__AUDIT_TORN_FMT "torn tail: %zu bytes, sha256 %s"
/* The message of a "gap" record starts with "seq A..B are not in the log: " (then why): the
 * records A..B (B = the gap record's seq - 1) were written and then destroyed with their file
 * (deleted while the server had it open). The verifier lets the chain resume after it. */
#define TPU__AUDIT_GAP_PFX "seq %" PRIu64 "..%" PRIu64 " are not in the log: "

#include "tpu_text.h"

/* Appends s as a JSON string (quoted, escaped, invalid UTF-8 as U+FFFD). */
void tpu__audit_json_str(tpu_buf_t *b, const char *s);

/* SHA-256 as OpenSSL's EVP_MD, fetched once (any thread). */
struct evp_md_st;
const struct evp_md_st *tpu__audit_sha256_md(void);

/* hash (65 bytes with NUL) of canonical bytes: HMAC-SHA256 when keylen > 0, else SHA-256. */
void tpu__audit_mac(const uint8_t *key, size_t keylen, const void *data, size_t len,
                    char hex[65]);

/* Outcome of tpu__audit_parse_line. */
typedef enum {
  TPU__LINE_OK = 0,
  TPU__LINE_MALFORMED, /* not a JSON object with the record's fields, or not in our layout */
  TPU__LINE_MISMATCH,  /* well-formed, but the hash does not match the canonical bytes */
  TPU__LINE_FORGED     /* keyed: the hash is the plain SHA-256 of the canonical bytes */
} tpu__line_result_t;

typedef struct {
  uint64_t seq;
  char prev[65], hash[65];
  char kind[32];
  char message[256]; /* cut */
  char why[256];     /* for MALFORMED: what is wrong */
} tpu__audit_line_t;

/* Parses and checks one line (without its newline) against key (keylen 0: plain SHA-256). */
tpu__line_result_t tpu__audit_parse_line(const char *line, size_t len, const uint8_t *key,
                                         size_t keylen, tpu__audit_line_t *out);

/* Reads A..B from a "gap" record's message; 0 when it is not in that form. */
int tpu__audit_gap_range(const char *message, uint64_t *first, uint64_t *last);

/* The seq of a line that may be damaged, read from its leading {"seq":N; 0 when absent. */
uint64_t tpu__audit_raw_seq(const char *line, size_t len);

#endif /* TPU_AUDIT_INT_H */

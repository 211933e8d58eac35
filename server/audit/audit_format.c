/*
 * audit_format.c - the encodings every part of the audit module shares: record hashes (SHA-256
 * and HMAC-SHA256, audit_int.h), the request digests (audit.h), and JSON strings as records and
 * payload headers write them. Below audit.c, audit_verify.c and payload.c; calls none of them.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "audit.h"
#include "audit_int.h"

/* SHA-256 fetched once: OpenSSL 3 looks EVP_sha256() up again on every EVP_Digest (measured
 * here: 0.60 us a 512-byte digest, 0.40 us fetched), and a request takes three or four. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static void fetch_sha256(void) { sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL); }

const EVP_MD *tpu__audit_sha256_md(void) {
  pthread_once(&sha256_once, fetch_sha256);
  return sha256_md ? sha256_md : EVP_sha256();
}

static void to_hex(const unsigned char *md, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[md[i] >> 4];
    hex[2 * i + 1] = digits[md[i] & 15];
  }
  hex[2 * n] = '\0';
}

void tpu__audit_mac(const uint8_t *key, size_t keylen, const void *data, size_t len,
                    char hex[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (keylen > 0)
    HMAC(EVP_sha256(), key, (int)keylen, data, len, md, &mdlen);
  else
    EVP_Digest(data, len, md, &mdlen, tpu__audit_sha256_md(), NULL);
  to_hex(md, 32, hex);
}

void tpu_audit_sha256_hex(const void *data, size_t len, char hex[65]) {
  tpu__audit_mac(NULL, 0, data, len, hex);
}

int tpu_audit_sha256_init(tpu_audit_sha256_t *d) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, tpu__audit_sha256_md(), NULL) != 1) {
    EVP_MD_CTX_free(ctx);
    d->ctx = NULL;
    return -1;
  }
  d->ctx = ctx;
  return 0;
}

void tpu_audit_sha256_update(tpu_audit_sha256_t *d, const void *data, size_t len) {
  if (d->ctx && len) EVP_DigestUpdate((EVP_MD_CTX *)d->ctx, data, len);
}

void tpu_audit_sha256_final(tpu_audit_sha256_t *d, char hex[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdlen = 0;
  if (!d->ctx || EVP_DigestFinal_ex((EVP_MD_CTX *)d->ctx, md, &mdlen) != 1) {
    hex[0] = '\0';
  } else {
    to_hex(md, 32, hex);
  }
  EVP_MD_CTX_free((EVP_MD_CTX *)d->ctx);
  d->ctx = NULL;
}

static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) need = 2;
  else if (c == 0xe0) need = 3, lo = 0xa0;
  else if (c == 0xed) need = 3, hi = 0x9f;
  else if (c >= 0xe1 && c <= 0xef) need = 3;
  else if (c == 0xf0) need = 4, lo = 0x90;
  else if (c >= 0xf1 && c <= 0xf3) need = 4;
  else if (c == 0xf4) need = 4, hi = 0x8f;
  else return 0;
  if (n < need || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < need; i++)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return need;
}

/* Appends s as a JSON string (quoted, escaped, invalid UTF-8 as U+FFFD). */
void tpu__audit_json_str(tpu_buf_t *b, const char *s) {
  tpu_buf_add(b, "\"", 1);
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t n = strlen((const char *)p);
  for (size_t i = 0; i < n;) {
    unsigned c = p[i];
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      tpu_buf_add(b, e, 2);
      i++;
    } else if (c < 0x20) {
      char e[8];
      if (c == '\n') memcpy(e, "\\n", 3);
      else if (c == '\t') memcpy(e, "\\t", 3);
      else if (c == '\r') memcpy(e, "\\r", 3);
      else snprintf(e, sizeof e, "\\u%04x", c);
      tpu_buf_adds(b, e);
      i++;
    } else {
      size_t k = utf8_len(p + i, n - i);
      if (k == 0) {
        tpu_buf_add(b, "\xef\xbf\xbd", 3);
        i++;
      } else {
        tpu_buf_add(b, (const char *)p + i, k);
        i += k;
      }
    }
  }
  tpu_buf_add(b, "\"", 1);
}


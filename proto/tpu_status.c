/*
 * tpu_status.c - the status table (tpu_status.h).
 */
#include "tpu_status.h"

typedef struct {
  const char *name, *words;
  int grpc, http;
} row_t;

static const row_t rows[TPU_CODE_ROWS] = {
#define TPU__CODE_ROW(name, num, grpc, http, words) [num] = {#name, words, grpc, http},
    TPU_CODE_TABLE(TPU__CODE_ROW)
#undef TPU__CODE_ROW
};

static const row_t *row(int code) {
  return code >= 0 && code < TPU_CODE_ROWS ? &rows[code] : 0;
}

int tpu_code_wire(int code) { return row(code) ? row(code)->grpc : TPU_CODE_UNKNOWN; }

const char *tpu_code_name(int code) {
  return row(code) ? rows[row(code)->grpc].name : "UNKNOWN";
}

int tpu_code_http(int code) { return row(code) ? row(code)->http : 500; }

const char *tpu_code_words(int code) { return row(code) ? row(code)->words : "unknown status"; }

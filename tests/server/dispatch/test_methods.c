/* test_methods.c - the method table (server/dispatch/methods.c): every method proto knows has a
 * row with every column its kind needs, the roles each needs, and the status table
 * (proto/tpu_status.h) the answers are mapped with. */
#include <string.h>

#include "call.h"
#include "tpu_envelope.h"
#include "tpu_status.h"
#include "tpu_test.h"

static void test_every_method_has_a_row(void) {
  size_t n = 0, proto_methods = 0;
  const tpu__method_t *t = tpu__methods(&n);
  CU_ASSERT_TRUE(n > 0);
  for (int id = 0; id < 64; id++) {
    const tpu_method_info_t *info = tpu_envelope_method_info(id);
    if (!info) continue;
    proto_methods++;
    const tpu__method_t *m = tpu__method_of(id);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(m->method, id);
    CU_ASSERT_STRING_EQUAL(m->name, info->name);
    CU_ASSERT_PTR_NOT_NULL(m->serve);
  }
  CU_ASSERT_EQUAL(n, proto_methods); /* no row for a method proto does not know */
  CU_ASSERT_PTR_NULL(tpu__method_of(0));
  CU_ASSERT_PTR_NULL(tpu__method_of(999));
  for (size_t i = 0; i < n; i++) {
    const tpu__method_t *m = &t[i];
    /* A method that computes has every column; one answered on the I/O thread has none of
     * the compute ones (nothing would call them). */
    CU_ASSERT_EQUAL(m->respond != NULL, m->computes);
    CU_ASSERT_EQUAL(m->digest != NULL, m->computes);
    CU_ASSERT_EQUAL(m->answer_size != NULL, m->computes);
    CU_ASSERT_EQUAL(m->release != NULL, m->computes);
    /* Audited: the calls that compute or change the server; the rest only read its state. */
    CU_ASSERT_EQUAL(m->audited, m->computes);
    CU_ASSERT_FALSE(m->health && m->audited);
  }
}

static void test_roles(void) {
  const tpu__method_t *ready = tpu__method_of(TPUD__METHOD__SERVER_READY);
  const tpu__method_t *live = tpu__method_of(TPUD__METHOD__SERVER_LIVE);
  CU_ASSERT_EQUAL(tpu__method_need(ready, 1), TPU_NEED_OPEN);
  CU_ASSERT_EQUAL(tpu__method_need(live, 1), TPU_NEED_OPEN);
  CU_ASSERT_EQUAL(tpu__method_need(live, 0), TPU_NEED_INFER);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MODEL_INFER), 1), TPU_NEED_INFER);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MATMUL), 1), TPU_NEED_INFER);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MODEL_METADATA), 1),
                  TPU_NEED_INFER);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MODEL_READY), 1),
                  TPU_NEED_INFER);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MODEL_LOAD), 1), TPU_NEED_ADMIN);
  CU_ASSERT_EQUAL(tpu__method_need(tpu__method_of(TPUD__METHOD__MODEL_UNLOAD), 1),
                  TPU_NEED_ADMIN);
}

static void test_status_table(void) {
  /* 0..16 travel as themselves and carry gRPC's names. */
  for (int c = 0; c < TPU_CODE_COUNT; c++) {
    CU_ASSERT_EQUAL(tpu_code_wire(c), c);
    CU_ASSERT_PTR_NOT_NULL(tpu_envelope_code_name(c));
  }
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_NOT_FOUND), "NOT_FOUND");
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_OK), 200);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_INVALID_ARGUMENT), 400);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_UNAUTHENTICATED), 401);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_PERMISSION_DENIED), 403);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_NOT_FOUND), 404);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_RESOURCE_EXHAUSTED), 413);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_UNIMPLEMENTED), 501);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_UNAVAILABLE), 503);
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_DEADLINE_EXCEEDED), 504);
  /* A busy server: RESOURCE_EXHAUSTED to gRPC and framed clients, 503 over HTTP. */
  CU_ASSERT_EQUAL(tpu_code_wire(TPU_CODE_OVERLOADED), TPU_CODE_RESOURCE_EXHAUSTED);
  CU_ASSERT_STRING_EQUAL(tpu_code_name(TPU_CODE_OVERLOADED), "RESOURCE_EXHAUSTED");
  CU_ASSERT_EQUAL(tpu_code_http(TPU_CODE_OVERLOADED), 503);
  /* Outside the table. */
  CU_ASSERT_STRING_EQUAL(tpu_code_name(-1), "UNKNOWN");
  CU_ASSERT_STRING_EQUAL(tpu_code_name(99), "UNKNOWN");
  CU_ASSERT_EQUAL(tpu_code_http(99), 500);
  CU_ASSERT_EQUAL(tpu_code_wire(99), TPU_CODE_UNKNOWN);
}

TPU_TEST_SUITE(dispatch_methods,
               {"every_method_has_a_row", test_every_method_has_a_row},
               {"roles", test_roles},
               {"status_table", test_status_table})

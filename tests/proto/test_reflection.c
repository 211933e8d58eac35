/*
 * test_reflection.c - proto/tpu_reflection: server reflection answers from the embedded
 * descriptors, as serialized messages in and out (no sockets).
 */
#include <stdlib.h>
#include <string.h>

#include "reflection.pb-c.h"
#include "tpu_reflection.h"
#include "tpu_test.h"

typedef Grpc__Reflection__V1__ServerReflectionRequest req_t;
typedef Grpc__Reflection__V1__ServerReflectionResponse resp_t;

static resp_t *ask(req_t *q) {
  size_t n = grpc__reflection__v1__server_reflection_request__get_packed_size(q);
  uint8_t *b = malloc(n + 1);
  grpc__reflection__v1__server_reflection_request__pack(q, b);
  uint8_t *out = NULL;
  size_t len = 0;
  int rc = tpu_reflection_answer(b, n, &out, &len);
  free(b);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  resp_t *r = grpc__reflection__v1__server_reflection_response__unpack(NULL, len, out);
  free(out);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  return r;
}

static resp_t *by_symbol(const char *sym) {
  req_t q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  q.host = "h";
  q.message_request_case =
      GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
  q.file_containing_symbol = (char *)sym;
  return ask(&q);
}

/* The FileDescriptorProto's name (field 1) as the response carries it. */
static int file_is(const resp_t *r, const char *name) {
  if (r->message_response_case !=
          GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE ||
      r->file_descriptor_response->n_file_descriptor_proto != 1)
    return 0;
  const ProtobufCBinaryData *f = &r->file_descriptor_response->file_descriptor_proto[0];
  size_t n = strlen(name);
  return f->len > n + 2 && f->data[0] == 0x0a && f->data[1] == n && !memcmp(f->data + 2, name, n);
}

static void test_reflection(void) {
  req_t q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
  q.host = "tpud.example";
  q.message_request_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
  q.list_services = "";
  resp_t *r = ask(&q);
  CU_ASSERT_STRING_EQUAL(r->valid_host, "tpud.example");
  CU_ASSERT_PTR_NOT_NULL(r->original_request);
  CU_ASSERT_EQUAL_FATAL(r->message_response_case,
                        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE);
  const char *want[] = {"inference.GRPCInferenceService", "tpud.TpudService", "grpc.health.v1.Health",
                        "grpc.reflection.v1.ServerReflection",
                        "grpc.reflection.v1alpha.ServerReflection"};
  for (size_t i = 0; i < 5; i++) {
    int found = 0;
    for (size_t k = 0; k < r->list_services_response->n_service; k++)
      found |= !strcmp(r->list_services_response->service[k]->name, want[i]);
    CU_ASSERT(found);
  }
  grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);

  struct {
    const char *sym, *file;
  } syms[] = {{"inference.GRPCInferenceService", "grpc_service.proto"},
              {"inference.GRPCInferenceService.ModelInfer", "grpc_service.proto"},
              {"inference.ModelInferRequest", "grpc_service.proto"},
              {"inference.ModelInferRequest.InferInputTensor", "grpc_service.proto"},
              {"inference.DataType", "grpc_service.proto"},
              {"tpud.Method", "tpud.proto"},
              {"tpud.TpudService.MatMul", "tpud.proto"},
              {"grpc.health.v1.HealthCheckResponse.ServingStatus", "health.proto"},
              {"grpc.reflection.v1alpha.ServerReflection", "reflection_v1alpha.proto"}};
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    r = by_symbol(syms[i].sym);
    if (!file_is(r, syms[i].file)) {
      printf("\n  %s: not answered with %s\n", syms[i].sym, syms[i].file);
      CU_FAIL("symbol lookup");
    }
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
  }
  const char *none[] = {"inference.NoSuch", "inference", "", "inference.ModelInferRequest.Nope",
                        "tpud.TpudService.Shutdown"};
  for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
    r = by_symbol(none[i]);
    CU_ASSERT_EQUAL(r->message_response_case,
                    GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE);
    if (r->error_response) CU_ASSERT_EQUAL(r->error_response->error_code, 5);
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
  }
  q.message_request_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
  q.file_by_filename = "health.proto";
  r = ask(&q);
  CU_ASSERT(file_is(r, "health.proto"));
  grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
  q.message_request_case = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST__NOT_SET;
  r = ask(&q);
  CU_ASSERT_EQUAL(r->error_response ? r->error_response->error_code : -1, 3);
  grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);

  uint8_t *out = (uint8_t *)1;
  size_t len = 1;
  static const uint8_t garbage[] = {0xff, 0xff, 0xff};
  CU_ASSERT_EQUAL(tpu_reflection_answer(garbage, sizeof garbage, &out, &len), -1);
  CU_ASSERT_PTR_NULL(out);
  CU_ASSERT(tpu_reflection_path((const uint8_t *)"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", 57));
  CU_ASSERT(!tpu_reflection_path((const uint8_t *)"/grpc.reflection.v1.ServerReflection/Other", 42));
}

TPU_TEST_SUITE(reflection, {"server reflection from the embedded descriptors", test_reflection})

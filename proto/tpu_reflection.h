/*
 * tpu_reflection.h - gRPC server reflection (grpc.reflection.v1 and v1alpha) over tpud's own
 * .proto files, as protocol code: a serialized ServerReflectionRequest in, a serialized
 * ServerReflectionResponse out. No sockets, no server: the gRPC front end (server/front/grpc.c)
 * carries the messages on the bidirectional stream.
 *
 * DESIGN
 * The build compiles each reflected .proto alone with protoc-c --descriptor_set_out and embeds
 * the sets (embed_descriptors.cmake): each holds exactly one FileDescriptorProto, which is what
 * reflection hands out. Their symbols (package-qualified messages, nested messages, enums,
 * services and methods) are read from those bytes on first use with a small wire-format walker,
 * so a symbol that exists is found and one that does not is NOT_FOUND. The files import
 * nothing, so a file is its own closure. Requests answered: list_services (every service of
 * every file, the reflection services included), file_by_filename, file_containing_symbol;
 * extension requests get NOT_FOUND (the files declare no extensions), a request naming
 * nothing INVALID_ARGUMENT, both as an ErrorResponse on the stream, as gRPC's servers do.
 */
#ifndef TPU_REFLECTION_H
#define TPU_REFLECTION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One embedded descriptor set: the .proto file's name and protoc-c's output for it. */
typedef struct {
  const char *name;
  const unsigned char *bytes;
  size_t len;
} tpu_reflection_set_t;

extern const tpu_reflection_set_t tpu__reflection_sets[];
extern const size_t tpu__reflection_nsets;

/*
 * Answers the serialized request req[0..len). On success returns 0 and *out (malloc'd, *outlen
 * bytes) is the serialized response, which may carry an ErrorResponse; -1 when the request is
 * not a ServerReflectionRequest at all (the caller ends the stream with INVALID_ARGUMENT) or
 * memory ran out (*out NULL then either way).
 */
int tpu_reflection_answer(const uint8_t *req, size_t len, uint8_t **out, size_t *outlen);

/* Whether `path` (":path" of a gRPC call) is ServerReflectionInfo of v1 or v1alpha. */
int tpu_reflection_path(const uint8_t *path, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TPU_REFLECTION_H */

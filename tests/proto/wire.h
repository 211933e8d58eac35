/*
 * wire.h - a tiny protobuf wire-format writer for tests.
 *
 * DESIGN
 * Tests that check field numbers and wire compatibility must not build their input with the
 * code under test (protobuf-c's pack or tpu_envelope's encoder), or a wrong number would agree
 * with itself. This writes tags, varints and length-delimited fields by hand, straight from the
 * protobuf encoding rules, into a fixed buffer.
 */
#ifndef TPU_TEST_WIRE_H
#define TPU_TEST_WIRE_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <string.h>

#define WIRE_VARINT 0
#define WIRE_I64 1
#define WIRE_LEN 2
#define WIRE_I32 5

typedef struct {
  uint8_t b[8192];
  size_t n;
} wire_t;

static inline void wire_raw(wire_t *w, const void *p, size_t n) {
  CU_ASSERT_FATAL(w->n + n <= sizeof w->b);
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

static inline void wire_varint(wire_t *w, uint64_t v) {
  do {
    uint8_t byte = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) byte |= 0x80;
    wire_raw(w, &byte, 1);
  } while (v);
}

static inline void wire_tag(wire_t *w, unsigned field, unsigned wire_type) {
  wire_varint(w, (uint64_t)field << 3 | wire_type);
}

/* Varint field (int32/int64/uint64/bool/enum; negative int64 as two's complement). */
static inline void wire_uint(wire_t *w, unsigned field, uint64_t v) {
  wire_tag(w, field, WIRE_VARINT);
  wire_varint(w, v);
}

static inline void wire_bytes(wire_t *w, unsigned field, const void *p, size_t n) {
  wire_tag(w, field, WIRE_LEN);
  wire_varint(w, n);
  wire_raw(w, p, n);
}

static inline void wire_str(wire_t *w, unsigned field, const char *s) {
  wire_bytes(w, field, s, strlen(s));
}

/* An embedded message (or packed repeated field) whose body was written to `sub`. */
static inline void wire_sub(wire_t *w, unsigned field, const wire_t *sub) {
  wire_bytes(w, field, sub->b, sub->n);
}

static inline void wire_fixed32(wire_t *w, unsigned field, uint32_t v) {
  uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  wire_tag(w, field, WIRE_I32);
  wire_raw(w, le, 4);
}

static inline void wire_fixed64(wire_t *w, unsigned field, uint64_t v) {
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
  wire_tag(w, field, WIRE_I64);
  wire_raw(w, le, 8);
}

static inline uint32_t wire_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline uint64_t wire_f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

#endif /* TPU_TEST_WIRE_H */

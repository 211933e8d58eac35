/*
 * replay.h - `tpuctl audit replay`: recomputes captured requests from the audit log and the
 * payload store, offline, on the model versions in a repository (issue 21).
 *
 * DESIGN
 * Reads the given log files (oldest first, as `audit verify` takes them), one line at a time.
 * Each request record selected (--seq A[..B], --request-id ID, default all) is checked and
 * replayed:
 *   - its line's hash (--key for HMAC logs): a record that fails it is not trusted;
 *   - its payload (payload.h): present, at its offset, of its seq, equal to payload_sha256,
 *     decrypting with --payload-key; its inputs equal to the record's input_sha256;
 *   - its conditions: the version directory <repository>/<model>/<version> loads (which checks
 *     the checkpoint against model.json), its checkpoint SHA-256 and precision are the
 *     record's, and the engine runs the record's kernel set (TPUD_ISA=<kernels>; a CPU that
 *     cannot run it makes the record not replayable);
 *   - then the inputs run through the model, alone (batch invariance: any batch gives the same
 *     bits on a kernel set), and the outputs' SHA-256 is compared with output_sha256.
 * Each record is reported as reproduced, MISMATCHED (with the first element that differs from
 * the captured outputs) or NOT REPLAYABLE (why). Request records that failed or were not
 * captured are counted as skipped unless selected by request id or seq.
 * Exit status: 0 every record selected reproduced; 1 any mismatched or not replayable, or none
 * matched the selection; 2 usage, or a log, key or repository that cannot be read.
 * Models and engines stay loaded for the run (one engine per kernel set, one model per version).
 *
 * AGAINST A SERVER (--server ADDR instead of --repository): each record's inputs are sent to
 * the server as a request for the record's model and version, and the answer's outputs are
 * compared as above. The server does not say which checkpoint or kernel set it runs, so those
 * conditions are not checked: a mismatch says so (and the replayed requests are new records in
 * the server's own log).
 */
#ifndef TPU_REPLAY_H
#define TPU_REPLAY_H

#include <stddef.h>
#include <stdio.h>

#include "payload.h"

/* A running server to replay against (--server ADDR), provided by the program (tpuctl: its
 * client library), so that this file has no sockets. */
typedef struct tpu_replay_remote {
  void *ctx;
  /* Sends the payload's inputs as one request for its model and version; on success outs[j]
   * (malloc'd, lens[j] bytes) holds the answer's output named p->out[j].name. Returns 0, or -1
   * with why. */
  int (*infer)(void *ctx, const tpu_payload_t *p, unsigned char **outs, size_t *lens, char *why,
               size_t whylen);
  void (*close)(void *ctx);
} tpu_replay_remote_t;
/* Connects to addr; 0, or -1 with why. */
typedef int (*tpu_replay_connect_fn)(const char *addr, tpu_replay_remote_t *out, char *why,
                                     size_t whylen);

/* argv[0] is "replay". connect: NULL when this program cannot reach a server. */
int tpu_replay_cli(int argc, char **argv, FILE *out, FILE *err, tpu_replay_connect_fn connect);

#define TPU_REPLAY_SYNOPSIS                                                                     \
  "audit replay (--repository DIR | --server ADDR) --payload-dir DIR [--payload-key FILE]\n" \
  "                    [--key FILE] [--seq A[..B]] [--request-id ID] [--quiet] FILE..."

#define TPU_REPLAY_HELP                                                                         \
  "Recomputes captured requests (tpud --payload-dir) from audit log FILEs, oldest first,\n"   \
  "offline: each model version is loaded from the repository with the record's kernel set\n" \
  "and its inputs run again; each record is reported reproduced (the output SHA-256 is the\n" \
  "record's), MISMATCHED (the first element that differs) or NOT REPLAYABLE (the payload\n"   \
  "is missing or changed, the version is gone or its checkpoint changed, another kernel\n"    \
  "set). Run `tpuctl audit verify` first: replay checks each record's hash, not the chain.\n" \
  "  --repository DIR    the model repository (<DIR>/<model>/<version>/model.json)\n"         \
  "  --server ADDR       replay against a running tpud instead (native protocol; --token,\n"  \
  "                      --tls-ca, --tls-cert, --tls-key and --timeout before `audit` apply);\n" \
  "                      it cannot check the server's checkpoint or kernel set\n"            \
  "  --payload-dir DIR   the payload store tpud wrote\n"                                      \
  "  --payload-key FILE  the AES-256-GCM key the entries were encrypted with\n"               \
  "  --key FILE          the audit log's HMAC key (--audit-key), to check record hashes\n"    \
  "  --seq A[..B]        only records A to B;  --request-id ID  only that request\n"          \
  "  --quiet             print only records that did not reproduce, and the summary\n"        \
  "Exit status: 0 all reproduced, 1 some did not (or none matched), 2 usage or I/O error.\n"

#endif /* TPU_REPLAY_H */

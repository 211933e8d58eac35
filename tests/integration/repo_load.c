/*
 * repo_load.c - steady inference load on model "digits" for tests/integration/test_repository.sh.
 *
 * DESIGN
 * THREADS threads, each with its own libtpuclient connection, send digits inferences (1 to 4
 * rows, no version: the server's choice) back to back until STOPFILE exists (or SECONDS pass),
 * then print one summary line on stdout:
 *   ok=N v1=N v2=N ... unloading=N notready=N other=N last=V
 * where vK counts OK answers from version K, `unloading` counts UNAVAILABLE answers that say
 * "is being unloaded", `notready` NOT_FOUND answers "has no ready version" (requests that
 * arrived after an unload), and `other` every other failure (each printed to stderr). Every
 * answer's output rows are checked to be probabilities (each in [0, 1], rows summing to 1).
 * The script decides which counts must be zero.
 *
 * Usage: repo_load PORT SECONDS STOPFILE THREADS
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tpuclient.h"

#define MAXV 16

static char addr[64];
static const char *stopfile;
static time_t end_time;
static _Atomic unsigned long ok, unloading, notready, other, per_version[MAXV];
static _Atomic unsigned long last_version;

static int stop_now(void) {
  struct stat sb;
  return time(NULL) >= end_time || stat(stopfile, &sb) == 0;
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 17u;
  tpu_client_t *c = NULL;
  float x[4 * 64];
  while (!stop_now()) {
    if (!c) {
      if (tpu_client_connect(addr, NULL, &c) != TPU_CLIENT_OK) {
        fprintf(stderr, "connect: %s\n", tpu_client_errmsg(c));
        atomic_fetch_add(&other, 1);
        tpu_client_free(c);
        c = NULL;
        usleep(100000);
        continue;
      }
    }
    size_t rows = 1 + rand_r(&seed) % 4;
    for (size_t i = 0; i < rows * 64; i++) x[i] = (float)(rand_r(&seed) % 17);
    int64_t shape[2] = {(int64_t)rows, 64};
    tpu_client_tensor_t in = {"x", "FP32", shape, 2, x, rows * 64 * sizeof(float)};
    Inference__ModelInferResponse *resp = NULL;
    tpu_client_status_t st = tpu_client_infer(c, "digits", NULL, &in, 1, 20000, &resp);
    const char *msg = tpu_client_errmsg(c);
    if (st == TPU_CLIENT_OK) {
      tpu_client_tensor_t out;
      int good = tpu_client_infer_output(resp, "probs", &out) == TPU_CLIENT_OK &&
                 out.nbytes == rows * 10 * sizeof(float);
      for (size_t r = 0; good && r < rows; r++) {
        double sum = 0;
        for (size_t k = 0; k < 10; k++) {
          float p;
          memcpy(&p, (const char *)out.data + (r * 10 + k) * sizeof(float), sizeof p);
          if (!(p >= 0.0f && p <= 1.0f)) good = 0;
          sum += p;
        }
        if (fabs(sum - 1.0) > 1e-3) good = 0;
      }
      unsigned long v = strtoul(resp->model_version ? resp->model_version : "0", NULL, 10);
      if (!good || v == 0 || v >= MAXV) {
        fprintf(stderr, "bad answer from version '%s'\n", resp->model_version);
        atomic_fetch_add(&other, 1);
      } else {
        atomic_fetch_add(&ok, 1);
        atomic_fetch_add(&per_version[v], 1);
        atomic_store(&last_version, v);
      }
      inference__model_infer_response__free_unpacked(resp, NULL);
    } else if (st == TPU_CLIENT_UNAVAILABLE && strstr(msg, "is being unloaded")) {
      atomic_fetch_add(&unloading, 1);
    } else if (st == TPU_CLIENT_NOT_FOUND && strstr(msg, "has no ready version")) {
      atomic_fetch_add(&notready, 1);
      usleep(2000);
    } else {
      fprintf(stderr, "infer failed: status %d: %s\n", (int)st, msg);
      atomic_fetch_add(&other, 1);
      if (st >= 100) { /* the connection is gone: reconnect */
        tpu_client_free(c);
        c = NULL;
      }
    }
  }
  tpu_client_free(c);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: repo_load PORT SECONDS STOPFILE THREADS\n");
    return 2;
  }
  snprintf(addr, sizeof addr, "127.0.0.1:%s", argv[1]);
  end_time = time(NULL) + atoi(argv[2]);
  stopfile = argv[3];
  int n = atoi(argv[4]);
  if (n < 1 || n > 64) n = 4;
  pthread_t th[64];
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  printf("ok=%lu", atomic_load(&ok));
  for (int v = 1; v < MAXV; v++)
    if (atomic_load(&per_version[v])) printf(" v%d=%lu", v, atomic_load(&per_version[v]));
  printf(" unloading=%lu notready=%lu other=%lu last=%lu\n", atomic_load(&unloading),
         atomic_load(&notready), atomic_load(&other), atomic_load(&last_version));
  return 0;
}

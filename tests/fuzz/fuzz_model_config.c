/*
 * fuzz_model_config.c - libFuzzer target: model.json, from bytes.
 *
 * DESIGN
 * The input is a model.json's text, given to tpu_model_config_parse (the function
 * tpu_model_config_load calls after reading the file). On success the documented invariants of
 * the config are checked: at least one layer, widths and batch sizes within their limits,
 * buckets strictly increasing and ending at max_batch_size, a plain checkpoint file name, a
 * lower-case 64-digit digest. On failure the message must be there and NUL-terminated.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size copy without a NUL: the parser takes (text, len) and must not read past len. */
  char *text = malloc(size ? size : 1);
  memcpy(text, data, size);
  tpu_model_config_t *cfg = NULL;
  char err[512];
  err[0] = 0;
  tpu_status_t rc = tpu_model_config_parse(text, size, "fuzz/model.json", &cfg, err, sizeof err);
  free(text);
  if (rc != TPU_OK) {
    if (cfg || !err[0] || !memchr(err, 0, sizeof err)) abort();
    return 0;
  }
  if (!cfg->input_name || !cfg->output_name || !cfg->checkpoint_file) abort();
  if (cfg->input_width < 1 || cfg->input_width > TPU_MODEL_MAX_WIDTH) abort();
  if (cfg->output_width < 1 || cfg->output_width > TPU_MODEL_MAX_WIDTH) abort();
  if (cfg->nlayers < 1 || cfg->nlayers > TPU_MODEL_MAX_LAYERS || !cfg->layers) abort();
  for (size_t i = 0; i < cfg->nlayers; i++)
    if (!cfg->layers[i].weight) abort();
  if (cfg->max_batch_size < 1 || cfg->max_batch_size > TPU_MODEL_MAX_BATCH) abort();
  if (cfg->nbuckets < 1 || cfg->nbuckets > TPU_MODEL_MAX_BUCKETS) abort();
  for (size_t i = 0; i < cfg->nbuckets; i++)
    if (cfg->buckets[i] < 1 || (i && cfg->buckets[i] <= cfg->buckets[i - 1])) abort();
  if (cfg->buckets[cfg->nbuckets - 1] != cfg->max_batch_size) abort();
  if (cfg->max_queue_delay_us > TPU_MODEL_MAX_QUEUE_DELAY_US) abort();
  const char *f = cfg->checkpoint_file;
  if (!*f || strchr(f, '/') || strchr(f, '\\') || strstr(f, "..")) abort();
  for (const char *p = f; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) abort();
  if (strlen(cfg->sha256) != 64) abort();
  for (int i = 0; i < 64; i++)
    if (!strchr("0123456789abcdef", cfg->sha256[i])) abort();
  if (!tpu_model_precision_name(cfg->precision)) abort();
  tpu_model_config_free(cfg);
  return 0;
}

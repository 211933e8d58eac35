/*
 * cpus.c - the CPUs tpud may use (cpus.h).
 */
#define _GNU_SOURCE
#include "cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The quota of one cgroup directory's cpu.max ("max 100000" or "150000 100000"), in CPUs;
 * 0 when there is none or the file cannot be read. */
static double cpu_max_at(const char *dir) {
  char path[4400];
  snprintf(path, sizeof path, "%s/cpu.max", dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char quota[32] = "";
  unsigned long long period = 0;
  int n = fscanf(f, "%31s %llu", quota, &period);
  fclose(f);
  if (n != 2 || period == 0 || strcmp(quota, "max") == 0) return 0;
  char *end;
  unsigned long long q = strtoull(quota, &end, 10);
  if (*end || q == 0) return 0;
  return (double)q / (double)period;
}

/* cgroup v1: cpu.cfs_quota_us over cpu.cfs_period_us ("-1": none). */
static double cfs_quota_at(const char *dir) {
  char path[4400];
  long long q = -1, p = 0;
  snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%lld", &q) != 1) q = -1;
  fclose(f);
  snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
  if (!(f = fopen(path, "r"))) return 0;
  if (fscanf(f, "%lld", &p) != 1) p = 0;
  fclose(f);
  return q > 0 && p > 0 ? (double)q / (double)p : 0;
}

/* This process's cgroup path from a /proc/self/cgroup file: the v2 line "0::/path", or with
 * v1 the line of the cpu controller ("N:cpu,cpuacct:/path"); *v1 says which. */
static int cgroup_path(const char *proc_cgroup, char *out, size_t len, int *v1) {
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return -1;
  char line[4096];
  int found = -1;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = *c2 = 0; /* line: hierarchy id, c1 + 1: controllers, c2 + 1: path */
    int is_v2 = strcmp(line, "0") == 0 && c2 == c1 + 1;
    int is_cpu = 0;
    for (char *tok = strtok(c1 + 1, ","); tok; tok = strtok(NULL, ","))
      if (strcmp(tok, "cpu") == 0) is_cpu = 1;
    if ((is_v2 || is_cpu) && strlen(c2 + 1) < len) {
      memcpy(out, c2 + 1, strlen(c2 + 1) + 1);
      *v1 = is_cpu;
      found = 0;
      if (is_cpu) break; /* a hybrid system's v1 cpu controller is the one that limits */
    }
  }
  fclose(f);
  return found;
}

void tpu_cpus_read_at(const char *proc_cgroup, const char *cgroup_root, tpu_cpus_t *out) {
  memset(out, 0, sizeof *out);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  out->online = n > 0 ? (unsigned)n : 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) out->affinity = (unsigned)CPU_COUNT(&set);

  /* The tightest quota from the process's cgroup up to the root. */
  char rel[2048];
  int v1 = 0;
  if (cgroup_path(proc_cgroup, rel, sizeof rel, &v1) == 0) {
    char dir[4200];
    for (;;) {
      snprintf(dir, sizeof dir, "%s%s%s", cgroup_root, v1 ? "/cpu" : "",
               strcmp(rel, "/") == 0 ? "" : rel);
      double q = v1 ? cfs_quota_at(dir) : cpu_max_at(dir);
      if (q > 0 && (out->quota == 0 || q < out->quota)) out->quota = q;
      char *slash = strrchr(rel, '/');
      if (!slash || strcmp(rel, "/") == 0) break;
      if (slash == rel) slash[1] = 0; /* "/a" -> "/" */
      else *slash = 0;
    }
  }
  unsigned u = out->affinity ? out->affinity : out->online;
  if (out->quota > 0) {
    unsigned c = (unsigned)out->quota; /* rounded up: a quota of 1.5 CPUs runs 2 threads */
    if ((double)c < out->quota) c++;
    if (c < u) u = c;
  }
  out->usable = u ? u : 1;
}

void tpu_cpus_read(tpu_cpus_t *out) {
  tpu_cpus_read_at("/proc/self/cgroup", "/sys/fs/cgroup", out);
}

void tpu_cpus_describe(const tpu_cpus_t *c, char *buf, size_t len) {
  char aff[24] = "unknown", quota[32] = "none";
  if (c->affinity) snprintf(aff, sizeof aff, "%u", c->affinity);
  if (c->quota > 0) snprintf(quota, sizeof quota, "%.2f", c->quota);
  snprintf(buf, len, "%u (online %u, affinity %s, cgroup quota %s)", c->usable, c->online, aff,
           quota);
}

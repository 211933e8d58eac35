/*
 * cpus.h - how many CPUs tpud may use: the online count, the affinity mask and the cgroup's
 * CPU quota (what a container's `cpus:` limit or a Kubernetes CPU limit sets).
 *
 * DESIGN
 * A process on a 64-core host limited to 2 CPUs by its cgroup should size itself for 2: more
 * compute threads than it can run only queue behind each other, and spinning ones take the
 * time the I/O threads need. So the usable count is the smallest of the affinity mask (or the
 * online count when the mask cannot be read) and the cgroup v2 `cpu.max` quota rounded up, the
 * tightest of the process's cgroup and its ancestors (a parent's limit binds its children); on
 * cgroup v1 (or a hybrid system's v1 cpu controller) cpu.cfs_quota_us / cpu.cfs_period_us under
 * <root>/cpu instead.
 * Reading never fails: what cannot be read is reported as absent, and usable is at least 1.
 */
#ifndef TPU_CPUS_H
#define TPU_CPUS_H

#include <stddef.h>

typedef struct {
  unsigned online;   /* sysconf(_SC_NPROCESSORS_ONLN), at least 1 */
  unsigned affinity; /* CPUs in the affinity mask (sched_getaffinity); 0 when unreadable */
  double quota;      /* cgroup CPU limit in CPUs (quota / period); 0 when none */
  unsigned usable;   /* min(affinity or online, ceil(quota)), at least 1 */
} tpu_cpus_t;

/* This process's CPUs (/proc/self/cgroup, /sys/fs/cgroup). */
void tpu_cpus_read(tpu_cpus_t *out);

/* The same with the cgroup files elsewhere, for tests: `proc_cgroup` stands for
 * /proc/self/cgroup and `cgroup_root` for /sys/fs/cgroup. online and affinity are this
 * process's. */
void tpu_cpus_read_at(const char *proc_cgroup, const char *cgroup_root, tpu_cpus_t *out);

/* Writes "2 (online 64, affinity 64, cgroup quota 1.5)" style text into buf. */
void tpu_cpus_describe(const tpu_cpus_t *c, char *buf, size_t len);

#endif /* TPU_CPUS_H */

/*
 * server.c - start-up, the listener, signals, graceful shutdown, and the model table.
 *
 * DESIGN
 * Owns the main thread's event_base: the native listener (accepted sockets go round robin to the
 * I/O threads, see front/framed.c), the HTTP listening socket (bound here; the I/O threads accept on it,
 * see http.c), SIGTERM/SIGINT (drain), SIGUSR1 (log the counters) and SIGHUP (rescan the model
 * repository). Models are the repository manager's (repository.h): it loads them at start,
 * before the ports are announced, then on its own thread, and publishes a reference-counted
 * table that I/O threads route with.
 *
 * Shutdown order (each step needs the next one still running):
 *   1. stop accepting; new requests get UNAVAILABLE; wait until nothing is in flight or the drain
 *      timeout passes;
 *   2. stop the repository thread, the batchers and the MatMul pool (computing what is queued,
 *      or failing it with UNAVAILABLE once the drain timeout has passed); their completions
 *      reach the I/O queues;
 *   3. stop the I/O threads: they answer those completions, flush, close, and exit.
 * SIGPIPE is ignored: a peer that vanishes must cost one connection, never the process.
 *
 * Start-up limits (fit_descriptors, fit_buffered): --max-connections must fit under
 * RLIMIT_NOFILE with room for every other descriptor tpud opens, so that accepting can never
 * starve a repository scan or the audit log; --max-buffered-bytes must hold one answer of
 * --max-message-bytes. Accept errors (EMFILE and the like, both ports: tpu__accept_failed) pause
 * the listener 100 ms, doubling to 1 s, rather than spin on a backlog that stays readable.
 * (No spare-descriptor trick, closing a kept /dev/null to accept and drop one client: with
 * connections fitted under the limit, EMFILE means something else holds the descriptors, and
 * the freed one would race the repository and audit threads that need it; the clients wait in
 * the backlog and are served when descriptors come back.)
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addr.h"
#include "audit_wire.h"
#include "auth_wire.h"
#include "clock.h"
#include "front.h"
#include "io.h"
#include "log.h"
#include "mmpool.h"
#include "server_int.h"

/* ---- models: the repository's (repository.c) ---- */

size_t tpu_server_ready_models(const tpu_server_t *srv) {
  return tpu__models_ready((tpu_server_t *)srv); /* takes a reference only */
}

/* ---- listener and signals (main thread) ---- */

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg) {
  tpu_server_t *srv = arg;
  srv->accept_backoff_ms = 0; /* accepting again: the next error starts the backoff anew */
  char peer[64];
  tpu_addr_format(sa, peer, sizeof peer);
  /* --max-connections bounds both ports together (http.c counts the same sum). */
  if (atomic_load(&srv->draining) ||
      tpu_stats_get(&tpu_stats.connections_open) +
              tpu_stats_get(&tpu_stats.http_connections_open) >=
          srv->cfg.max_connections) {
    tpu_stats_inc(&tpu_stats.connections_rejected, 1);
    /* A flood must not flood the log: one line a second at most, with the count. */
    static uint64_t last_us, suppressed;
    uint64_t now = tpu_now_us();
    if (now - last_us >= 1000000) {
      tpu_log_warn("connection from %s rejected: %s%s", peer,
                   atomic_load(&srv->draining) ? "server is draining" : "max-connections reached",
                   suppressed ? " (and more rejected in the last second; see "
                                "tpud_connections_rejected_total)" : "");
      last_us = now;
      suppressed = 0;
    } else {
      suppressed++;
    }
    evutil_closesocket(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* responses are latency-bound */
  tpu_stats_inc(&tpu_stats.connections_open, 1);
  tpu_stats_inc(&tpu_stats.connections_accepted, 1);
  tpu__framed_hand_off(srv, fd, peer);
}

static void on_accept_retry(evutil_socket_t fd, short what, void *arg) {
  tpu_server_t *srv = arg;
  if (srv->listener && !atomic_load(&srv->draining)) evconnlistener_enable(srv->listener);
}

/* libevent calls this for an accept error other than EAGAIN, EINTR and ECONNABORTED. Left
 * enabled, a listener whose backlog holds connections is readable again at once: pause it. */
static void on_accept_error(struct evconnlistener *l, void *arg) {
  tpu_server_t *srv = arg;
  int e = EVUTIL_SOCKET_ERROR();
  unsigned ms = tpu__accept_failed(TPU_ACCEPT_NATIVE, e, &srv->accept_backoff_ms);
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  evconnlistener_disable(l);
  evtimer_add(srv->accept_timer, &tv);
}

static void on_drain_timer(evutil_socket_t fd, short what, void *arg) {
  tpu_server_t *srv = arg;
  uint64_t n = atomic_load(&srv->inflight);
  if (n == 0 || tpu_now_us() >= srv->drain_deadline_us) {
    if (n) tpu_log_warn("drain timeout: %llu requests still in flight are abandoned",
                        (unsigned long long)n);
    event_base_loopexit(srv->base, NULL);
  }
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
  tpu_server_t *srv = arg;
  if (sig == SIGUSR1) {
    tpu_server_log_stats(srv);
    return;
  }
  if (sig == SIGHUP) { /* rescan the model repository and rotate the audit log (at once) */
    tpu__repo_rescan(srv->repo);
    tpu__audit_sighup(srv);
    tpu__auth_sighup(srv); /* certificates and tokens: new connections/requests get the new */
    return;
  }
  if (atomic_load(&srv->draining)) {
    tpu_log_warn("signal %d again: stopping without waiting for in-flight requests", (int)sig);
    srv->drain_deadline_us = 0;
    return;
  }
  atomic_store(&srv->draining, 1);
  tpu__repo_cancel_loads(srv->repo); /* a load in progress is abandoned, not waited for */
  if (srv->listener) evconnlistener_disable(srv->listener);
  if (srv->accept_timer) evtimer_del(srv->accept_timer);
  tpu__io_drain(srv->io, srv->nio);
  srv->drain_deadline_us = tpu_now_us() + (uint64_t)srv->cfg.drain_timeout_s * 1000000u;
  tpu_log_info("signal %d: draining: stopped accepting; %llu requests in flight (timeout %u s)",
               (int)sig, (unsigned long long)atomic_load(&srv->inflight),
               srv->cfg.drain_timeout_s);
  struct timeval tv = {.tv_sec = 0, .tv_usec = 5000};
  srv->drain_timer = event_new(srv->base, -1, EV_PERSIST, on_drain_timer, srv);
  if (!srv->drain_timer || event_add(srv->drain_timer, &tv) != 0)
    event_base_loopexit(srv->base, NULL);
}

static int bind_listener(tpu_server_t *srv, char *err, size_t errlen) {
  char spec[300];
  struct sockaddr_storage ss;
  socklen_t sslen;
  if (tpu_addr_parse(srv->cfg.listen, srv->cfg.port, &ss, &sslen, spec, sizeof spec, err,
                     errlen) != 0)
    return -1;
  srv->listener = evconnlistener_new_bind(srv->base, on_accept, srv,
                                          LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
                                              LEV_OPT_CLOSE_ON_EXEC,
                                          1024, (struct sockaddr *)&ss, (int)sslen);
  if (!srv->listener) {
    snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
    return -1;
  }
  evconnlistener_set_error_cb(srv->listener, on_accept_error);
  srv->accept_timer = evtimer_new(srv->base, on_accept_retry, srv);
  if (!srv->accept_timer) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  srv->port = tpu_addr_bound_port(evconnlistener_get_fd(srv->listener));
  return 0;
}

/* ---- start-up limits: descriptors and the buffered-answer budget ---- */

/* Descriptors open now (inherited ones included), from /proc/self/fd; 3 when it cannot say. */
static unsigned fds_open_now(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return 3;
  unsigned n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n > 0 ? n - 1 : 3; /* not the directory's own */
}

/* Descriptors tpud needs besides its connections, so that accepting can never take the ones the
 * rest of the server opens (a repository scan, a model file, the audit log's rotation). The
 * figures are what a running tpud holds (ls /proc/PID/fd) plus what it opens at times. */
static unsigned fds_reserved(const tpu_config_t *cfg, unsigned open_now) {
  unsigned n = open_now;     /* stdio, and whatever was inherited */
  n += 8;                    /* main loop: epoll, signal pipes, both listening sockets */
  n += 6 * cfg->io_threads;  /* each: epoll, libevent's pipes, queue eventfd, HTTP listener dup */
  n += 1 + cfg->io_threads;  /* a connection accepted over max-connections, closed at once */
  n += 16;                   /* repository: nested directories being scanned, model files */
  if (cfg->audit_log[0]) n += 8; /* log, head and its temporary, directory, rotation */
  n += 8;                    /* certificates, key, CA and tokens reloaded on SIGHUP */
  n += 16;                   /* spare: libraries, /proc reads, what a later change adds */
  return n;
}

/* RLIMIT_NOFILE: raises the soft limit to the hard one (what a server is expected to do), then
 * fits --max-connections under it. A default that does not fit is lowered, with a warning that
 * gives the numbers; a value given explicitly that does not fit refuses to start, since the
 * operator asked for that capacity. */
static int fit_descriptors(tpu_server_t *srv, char *err, size_t errlen) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0; /* nothing to fit against */
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit up = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) {
      tpu_log_info("descriptor limit (RLIMIT_NOFILE) raised from %llu to the hard limit %llu",
                   (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
      rl.rlim_cur = rl.rlim_max;
    }
  }
  if (rl.rlim_cur == RLIM_INFINITY) return 0;
  unsigned need = fds_reserved(&srv->cfg, fds_open_now());
  uint64_t limit = rl.rlim_cur;
  uint64_t fit = limit > need ? limit - need : 0;
  unsigned want = srv->cfg.max_connections;
  if (want <= fit) return 0;
  const char *how = "raise it (ulimit -n, systemd LimitNOFILE=, docker run --ulimit nofile=)";
  if (fit == 0 || tpu_config_given(&srv->cfg, "max-connections")) {
    snprintf(err, errlen, "--max-connections %u does not fit the descriptor limit: "
             "RLIMIT_NOFILE is %llu and tpud needs %u descriptors besides its connections "
             "(listeners, event loops, repository, audit log, a reserve), so %llu connections "
             "fit; %s or lower --max-connections",
             want, (unsigned long long)limit, need, (unsigned long long)fit, how);
    return -1;
  }
  srv->cfg.max_connections = (unsigned)fit;
  tpu_log_warn("max-connections lowered from %u to %llu: the descriptor limit (RLIMIT_NOFILE) "
               "is %llu and tpud needs %u descriptors besides its connections; %s to %llu to "
               "serve %u", want, (unsigned long long)fit, (unsigned long long)limit, need, how,
               (unsigned long long)want + need, want);
  return 0;
}

/* --max-buffered-bytes must hold one answer of --max-message-bytes, or such an answer could
 * never be admitted: a default is raised to it, a value given explicitly refuses to start. */
static int fit_buffered(tpu_server_t *srv, char *err, size_t errlen) {
  tpu_config_t *cfg = &srv->cfg;
  if (cfg->max_buffered_bytes >= cfg->max_message_bytes) return 0;
  if (tpu_config_given(cfg, "max-buffered-bytes")) {
    snprintf(err, errlen, "--max-buffered-bytes %llu is less than --max-message-bytes %llu: an "
             "answer of the largest message could never be sent; raise --max-buffered-bytes",
             (unsigned long long)cfg->max_buffered_bytes,
             (unsigned long long)cfg->max_message_bytes);
    return -1;
  }
  tpu_log_info("max-buffered-bytes raised from its default %llu to max-message-bytes %llu",
               (unsigned long long)cfg->max_buffered_bytes,
               (unsigned long long)cfg->max_message_bytes);
  cfg->max_buffered_bytes = cfg->max_message_bytes;
  return 0;
}

/* ---- lifecycle ---- */

/* The I/O threads, each serving the native port and (when bound) the HTTP port. */
static int start_io(tpu_server_t *srv) {
  srv->nio = srv->cfg.io_threads;
  if (!(srv->io = tpu__io_create(srv, srv->nio))) return -1;
  for (unsigned i = 0; i < srv->nio; i++) {
    if (tpu__framed_attach(&srv->io[i]) != 0) return -1;
    if (srv->http_fd >= 0 && tpu__http_attach(&srv->io[i]) != 0) return -1;
  }
  return tpu__io_run(srv->io, srv->nio);
}

/* SIGTERM/SIGINT while the models load at start-up, before the event loop owns the signals:
 * abandon the loads (their next check sees the flag) and stop once the loop runs. Only atomic
 * stores: async-signal-safe. */
static tpu_server_t *_Atomic starting;

static void on_startup_signal(int sig) {
  tpu_server_t *srv = atomic_load(&starting);
  if (!srv || atomic_load(&srv->stop_at_start)) {
    /* A second stop (or one after start-up failed): whatever is still running that cannot be
     * cancelled (packing one large layer), stop now, the default way. */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  atomic_store(&srv->load_cancel, 1);
  atomic_store(&srv->stop_at_start, 1);
}

int tpu_server_create(const tpu_config_t *cfg, tpu_engine_t *engine, tpu_server_t **out,
                      char *err, size_t errlen) {
  *out = NULL;
  tpu_server_t *srv = calloc(1, sizeof *srv);
  if (!srv) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  srv->cfg = *cfg;
  srv->engine = engine;
  tpu_engine_stats_t es;
  srv->kernels = tpu_engine_stats(engine, &es) == TPU_OK && es.isa ? es.isa : "unknown";
  srv->http_fd = -1;
  /* Before anything is opened: the count of descriptors open now is part of the reserve. */
  if (fit_descriptors(srv, err, errlen) != 0 || fit_buffered(srv, err, errlen) != 0) {
    free(srv);
    return -1;
  }
  signal(SIGPIPE, SIG_IGN);
  /* Worker threads inherit a mask without the shutdown signals, so libevent's handler in the
   * main thread is the one that sees them. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGUSR1);
  sigaddset(&block, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  int rc = -1;
  struct sigaction sa, old_term, old_int;
  srv->base = event_base_new();
  if (!srv->base) {
    snprintf(err, errlen, "cannot create the main event loop");
    goto out;
  }
  /* The audit log first (its writer inherits the signal mask), so model loads are recorded. */
  if (tpu__audit_start(srv, err, errlen) != 0) goto out;
  if (tpu__auth_start(srv, err, errlen) != 0) goto out; /* TLS contexts and tokens */
  /* The start-up loads may take long: a stop then abandons them (on_startup_signal) instead of
   * waiting. Only this thread takes the signals meanwhile (threads start with all blocked,
   * thread.h), and only until the event loop's handlers replace this one. */
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_startup_signal;
  sigemptyset(&sa.sa_mask);
  atomic_store(&starting, srv);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
  int repo_rc = tpu__repo_create(srv, &srv->repo, err, errlen); /* loads the models */
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  /* Blocked everywhere now (threads start blocked): a signal from here on waits, pending, for
   * the loop's handlers, which save and later restore these. */
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old_int, NULL);
  atomic_store(&starting, NULL);
  if (repo_rc != 0) goto out;
  if (tpu__mmpool_create(engine, cfg->threads, &srv->pool) != 0) {
    snprintf(err, errlen, "cannot start %u compute threads", cfg->threads);
    goto out;
  }
  if (tpu__http_bind(srv, err, errlen) != 0) goto out;
  /* Before the I/O threads start: they read srv->port (/v2/debug/config), which this sets. */
  if (bind_listener(srv, err, errlen) != 0) goto out;
  if (start_io(srv) != 0) {
    snprintf(err, errlen, "cannot start %u I/O threads", cfg->io_threads);
    goto out;
  }
  srv->sig_term = evsignal_new(srv->base, SIGTERM, on_signal, srv);
  srv->sig_int = evsignal_new(srv->base, SIGINT, on_signal, srv);
  srv->sig_usr1 = evsignal_new(srv->base, SIGUSR1, on_signal, srv);
  srv->sig_hup = evsignal_new(srv->base, SIGHUP, on_signal, srv);
  if (!srv->sig_term || !srv->sig_int || !srv->sig_usr1 || !srv->sig_hup ||
      event_add(srv->sig_term, NULL) || event_add(srv->sig_int, NULL) ||
      event_add(srv->sig_usr1, NULL) || event_add(srv->sig_hup, NULL)) {
    snprintf(err, errlen, "cannot install signal handlers");
    goto out;
  }
  if (atomic_load(&srv->stop_at_start)) {
    /* Stopped while loading: the signal was taken by on_startup_signal; send it again, now to
     * the loop (pending until the mask is restored below), so tpu_server_run drains at once. */
    tpu_log_info("a stop was requested during start-up: model loads were abandoned; stopping");
    raise(SIGTERM);
  }
  rc = 0;
out:
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    tpu_server_free(srv);
    return -1;
  }
  *out = srv;
  return 0;
}

unsigned tpu_server_port(const tpu_server_t *srv) { return srv->port; }

void tpu_server_log_stats(tpu_server_t *srv) {
  char line[1024];
  tpu_stats_format(line, sizeof line);
  tpu_log_info("stats: %s", line);
  tpu__models_t *t = tpu__models_acquire(srv);
  for (size_t i = 0; i < t->n; i++) {
    tpu__model_t *m = t->models[i];
    if (m->state != TPUD__MODEL_STATE__MODEL_STATE_READY) continue;
    tpu_stats_model_format(&m->stats, line, sizeof line);
    tpu_log_info("stats: %s: %s", m->label, line);
  }
  tpu__models_release(t);
}

static void stop_compute(tpu_server_t *srv, int abort) {
  tpu__repo_stop(srv->repo, abort); /* no more loads; every live version's batcher */
  if (srv->pool) tpu__mmpool_stop(srv->pool, abort);
}

int tpu_server_run(tpu_server_t *srv) {
  tpu_log_info("tpud listening on %s:%u (native%s)", srv->cfg.listen, srv->port,
               srv->tls ? ", tls" : "");
  if (srv->http_fd >= 0)
    tpu_log_info("tpud listening on %s:%u (http%s)", srv->cfg.listen, srv->http_port,
                 srv->http_tls ? ", tls" : "");
  char what[400];
  snprintf(what, sizeof what, "serving on %s: native port %u, http port %u", srv->cfg.listen,
           srv->port, srv->http_port);
  tpu__audit_event(srv, TPU_AUDIT_KIND_START, NULL, 0, what);
  event_base_dispatch(srv->base);
  uint64_t left = atomic_load(&srv->inflight);
  stop_compute(srv, left > 0);
  /* Every completion has been submitted to the audit log by now; their responses wait for
   * their records. Flush within what is left of the drain time (at least 1 s), then close
   * before the I/O threads stop: close may still complete calls to them. */
  uint64_t now = tpu_now_us();
  uint64_t flush_ms = srv->drain_deadline_us > now ? (srv->drain_deadline_us - now) / 1000 : 0;
  snprintf(what, sizeof what, "stopping: %llu requests were in flight at the drain deadline",
           (unsigned long long)left);
  tpu__audit_stop(srv, what, flush_ms < 1000 ? 1000 : (unsigned)flush_ms);
  tpu__io_stop(srv->io, srv->nio);
  tpu_server_log_stats(srv);
  tpu_log_info("tpud stopped");
  return 0;
}

void tpu_server_free(tpu_server_t *srv) {
  if (!srv) return;
  if (srv->listener) evconnlistener_free(srv->listener);
  srv->listener = NULL;
  stop_compute(srv, 1);
  tpu__audit_stop(srv, "stopping: start-up failed", 1000); /* no-op after tpu_server_run */
  tpu__io_free(srv->io, srv->nio);
  srv->io = NULL;
  if (srv->http_fd >= 0) close(srv->http_fd); /* the I/O threads closed their dups */
  tpu__repo_free(srv->repo); /* after the I/O threads: their calls released their models */
  tpu__auth_free(srv);       /* after the I/O threads: their SSLs hold their own contexts */
  tpu__mmpool_free(srv->pool);
  if (srv->drain_timer) event_free(srv->drain_timer);
  if (srv->accept_timer) event_free(srv->accept_timer);
  if (srv->sig_term) event_free(srv->sig_term);
  if (srv->sig_int) event_free(srv->sig_int);
  if (srv->sig_usr1) event_free(srv->sig_usr1);
  if (srv->sig_hup) event_free(srv->sig_hup);
  if (srv->base) event_base_free(srv->base);
  free(srv);
}

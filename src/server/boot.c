/* boot.c — the port opens before the model loads: a small "loading" HTTP daemon binds the
 * listening socket first (the boot log names the port; --port-file is still written only
 * when the server is ready, as tests expect), answers GET /health with 503 and the load
 * progress ({"status": "loading", "loading": {"phase", "done_bytes", "total_bytes"}}) and
 * every other route with 503 "the model is loading", while snug_server_run reads the weights
 * (through the page cache, counted, so the progress is real bytes and the first request does
 * not fault them in one page at a time), plans and starts the engine. Then the socket is
 * handed to the real daemon (MHD_quiesce_daemon → MHD_OPTION_LISTEN_SOCKET): connections that
 * arrive during the switch wait in the kernel's backlog, none is refused.
 * The listening socket is made here (listen_on): --host is a name or an IPv4 / IPv6 address,
 * resolved with getaddrinfo; the first address that binds is used ("::" also takes IPv4
 * clients: dual stack), and its numeric form names the server in the boot log.
 * Invariant: the progress fields are atomics written by the loading thread and read by the
 * daemon's thread; the socket belongs to exactly one daemon at a time.
 * Read next: http.c (snug_server_run), webui/index.html (shows the progress).
 */
#define _GNU_SOURCE
#include "server/server_impl.h"

#include "core/core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct snug_boot {
    struct MHD_Daemon *daemon;
    int port;
    char addr[INET6_ADDRSTRLEN + 2]; /* the bound address, numeric ("[::1]" for IPv6) */
    char model_id[256];
    _Atomic(const char *) phase;
    atomic_uint_least64_t done_bytes, total_bytes;
};

static enum MHD_Result send_503(struct MHD_Connection *c, json_t *body) {
    char *txt = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!txt) return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(txt);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_loading_request(void *cls, struct MHD_Connection *c, const char *url,
                                          const char *method, const char *version,
                                          const char *upload_data, size_t *upload_data_size,
                                          void **con_cls) {
    struct snug_boot *b = cls;
    if (!*con_cls) { /* first call: headers only */
        *con_cls = b;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body: not read while loading */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health"))
        return send_503(c, json_pack("{s:s, s:s, s:{s:s, s:I, s:I}}", "status", "loading", "model",
                                     b->model_id, "loading", "phase", atomic_load(&b->phase),
                                     "done_bytes", (json_int_t)atomic_load(&b->done_bytes),
                                     "total_bytes", (json_int_t)atomic_load(&b->total_bytes)));
    if (snug_srv_anthropic_route(url)) /* Anthropic's error shape on its routes */
        return send_503(c, json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                     snug_srv_anthropic_error_type(503), "message",
                                     "the model is loading; retry when GET /health says ok"));
    return send_503(c, json_pack("{s:{s:s, s:s, s:n, s:s}}", "error", "message",
                                 "the model is loading; retry when GET /health says ok", "type",
                                 "server_busy", "param", "code", "loading"));
}

/* A listening socket on host:port (host a name or a numeric IPv4 / IPv6 address): the first
 * address getaddrinfo gives that binds. Its numeric address goes to addr ("[...]" for IPv6) and
 * the bound port to *bound. -1 with err set when none binds. */
static int listen_on(const char *host, int port, char *addr, size_t addr_n, int *bound,
                     struct snug_err *err) {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, serv, &hints, &res);
    if (g != 0) {
        snug_err_set(err, SNUG_ERR_INVALID,
                     "--host %s: not an address or a name this machine resolves (%s)", host,
                     gai_strerror(g));
        return -1;
    }
    int fd = -1, last_errno = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int on = 1, off = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        /* "::" serves IPv4 clients too (dual stack); a specific IPv6 address is IPv6 only */
        if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0 ||
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
            last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snug_err_set(err, SNUG_ERR_IO, "cannot listen on %s port %d: %s", host, port,
                     last_errno == EADDRINUSE ? "the port is in use"
                     : last_errno             ? strerror(last_errno)
                                              : "no IPv4 or IPv6 address");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char num[INET6_ADDRSTRLEN] = "?";
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a6->sin6_addr, num, sizeof num);
            *bound = ntohs(a6->sin6_port);
        } else {
            const struct sockaddr_in *a4 = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a4->sin_addr, num, sizeof num);
            *bound = ntohs(a4->sin_port);
        }
    }
    snprintf(addr, addr_n, ss.ss_family == AF_INET6 ? "[%s]" : "%s", num);
    return fd;
}

int snug_boot_start(struct snug_boot **out, const struct snug_server_opts *opts,
                    const char *model_id, struct snug_err *err) {
    *out = NULL;
    struct snug_boot *b = snug_calloc(1, sizeof *b);
    if (!b) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory");
    snprintf(b->model_id, sizeof b->model_id, "%s", model_id);
    atomic_init(&b->phase, "opening the model");
    int fd = listen_on(opts->host, opts->port, b->addr, sizeof b->addr, &b->port, err);
    if (fd < 0) {
        snug_free(b);
        return err->status;
    }
    b->daemon =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC, 0, NULL,
                         NULL, on_loading_request, b, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
                         MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
    if (!b->daemon) {
        close(fd);
        snug_free(b);
        return snug_err_set(err, SNUG_ERR_IO, "cannot serve on %s port %d", opts->host, opts->port);
    }
    fprintf(stderr,
            "snug serve: port %d open; /health says \"loading\" until the model is ready "
            "(http://%s:%d)\n",
            b->port, b->addr, b->port);
    *out = b;
    return SNUG_OK;
}

const char *snug_boot_addr(const struct snug_boot *b) {
    return b ? b->addr : "";
}

int snug_boot_port(const struct snug_boot *b) {
    return b ? b->port : 0;
}

void snug_boot_phase(struct snug_boot *b, const char *phase) {
    if (b) atomic_store(&b->phase, phase);
}

struct read_progress {
    struct snug_boot *b;
    double last, delay_s;
};

static void on_read(void *user, uint64_t done, uint64_t total) {
    struct read_progress *p = user;
    struct snug_boot *b = p->b;
    if (!done) {
        atomic_store(&b->total_bytes, total);
        atomic_store(&b->phase, "reading the weights");
        return;
    }
    uint64_t step = done - atomic_load(&b->done_bytes);
    atomic_store(&b->done_bytes, done);
    if (p->delay_s > 0 && total)
        usleep((useconds_t)(p->delay_s * 1e6 * (double)step / (double)total));
    double now = snug_time_s();
    if (now - p->last >= 2.0) { /* plain lines: logs get no control characters */
        p->last = now;
        fprintf(stderr, "snug serve: reading the weights: %.0f / %.0f MiB (%.0f%%)\n",
                done / 1048576.0, total / 1048576.0, total ? 100.0 * done / total : 0);
    }
}

void snug_boot_read_weights(struct snug_boot *b, const char *path) {
    /* debugging only: SNUG_DEBUG_BOOT_DELAY_MS=N spreads N ms of sleep over the read, to see
     * (and test) the loading state on a small model */
    const char *dv = getenv("SNUG_DEBUG_BOOT_DELAY_MS");
    struct read_progress p = {.b = b, .last = snug_time_s(), .delay_s = dv ? atof(dv) / 1e3 : 0};
    snug_file_prefetch(path, on_read, &p);
}

int snug_boot_handoff(struct snug_boot *b) {
    if (!b || !b->daemon) return -1;
    MHD_socket fd = MHD_quiesce_daemon(b->daemon);
    MHD_stop_daemon(b->daemon); /* after quiesce the socket stays open */
    b->daemon = NULL;
    return (int)fd;
}

void snug_boot_free(struct snug_boot *b) {
    if (!b) return;
    if (b->daemon) MHD_stop_daemon(b->daemon);
    snug_free(b);
}

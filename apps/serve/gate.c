/* dcp-vk-serve's gate: the listening socket and the connections before libmicrohttpd has them.
 *
 * libmicrohttpd 0.9.75 answers HTTP it cannot parse (a malformed request line or header line, a
 * head larger than its connection memory, an unknown HTTP version) with fixed HTML bodies, and it
 * has no hook to replace them. So this thread accepts each connection itself, peeks at it
 * (recv MSG_PEEK: nothing is consumed) until its first request's head is whole, and checks it
 * (serve_head_check): a bad one is answered here with an OpenAI-style JSON error (400, 431, 505)
 * and the connection closed (after draining what the client still sends, so that its response is
 * not lost to a reset); a good one is handed, untouched, to libmicrohttpd (MHD_add_connection), which
 * reads the same bytes again. The head must fit the socket's receive buffer: --max-header-bytes is
 * at most 64 KiB and the listening socket's buffer is set to hold it.
 *
 * The gate also applies what libmicrohttpd applied at accept: --max-connections and
 * --max-connections-per-ip count the connections here and those handed over (a connection beyond
 * them is closed at once), and the head must arrive within --request-timeout of the accept (the
 * rest of the request within the same deadline, which the watcher of serve/http.c enforces).
 *
 * What it does not see: requests after the first on a kept-alive connection, and bodies (broken
 * chunked framing): libmicrohttpd still answers those in HTML when they are malformed.
 *
 * One thread, one epoll set: the listening socket (level-triggered) and the pending connections
 * (edge-triggered: a new segment wakes it, the bytes peeked before stay in the socket). */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/serve.h"

enum { GATE_TICK_MS = 100, GATE_EVENTS = 64 };
static const double LINGER_S = 2.0; /* an answered connection is drained this long at most */

/* ---- the head ------------------------------------------------------------------------------------ */

/* RFC 9110 tchar: the bytes of a method or field name. */
static bool tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int bad_line(serve_error *err, const char *what, const char *line, size_t n)
{
    if (n > 80) n = 80;
    serve_error_set(err, 400, "invalid_request_error", NULL, "bad_request", "%s: '%.*s'", what, (int)n, line);
    return -1;
}

static int too_large(serve_error *err, size_t limit)
{
    serve_error_set(err, 431, "invalid_request_error", NULL, "headers_too_large",
                    "the request line and headers are larger than %zu bytes (--max-header-bytes)", limit);
    return -1;
}

/* The request line [p, p + n) without its line end; complete: its line end was seen. */
static int check_request_line(const char *p, size_t n, bool complete, serve_head *hd, int *minor, serve_error *err)
{
    size_t i = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (i < n ? p[i] != ' ' || i == 0 : complete)
        return bad_line(err, "the request line does not start with a method and a space (METHOD TARGET HTTP/1.1)", p, n);
    if (i == n) return 1;
    snprintf(hd->method, sizeof hd->method, "%.*s", (int)(i < sizeof hd->method - 1 ? i : sizeof hd->method - 1), p);
    size_t t = ++i;
    while (i < n && (unsigned char)p[i] > 0x20 && p[i] != 0x7f) i++;
    if (i < n ? p[i] != ' ' || i == t : complete)
        return bad_line(err, "the request line's target is empty or holds a control byte, or no HTTP version follows it",
                        p, n);
    if (i == n) return 1;
    snprintf(hd->target, sizeof hd->target, "%.*s", (int)(i - t < sizeof hd->target - 1 ? i - t : sizeof hd->target - 1),
             p + t);
    const char *v = p + i + 1;
    const size_t vn = n - i - 1;
    static const char shape[] = "HTTP/#.#";
    for (size_t k = 0; k < vn; k++) {
        const bool ok = k < 8 && (shape[k] == '#' ? v[k] >= '0' && v[k] <= '9' : v[k] == shape[k]);
        if (!ok) return bad_line(err, "the request line's HTTP version is not HTTP/x.y", p, n);
    }
    if (!complete) return 1;
    if (vn != 8) return bad_line(err, "the request line's HTTP version is not HTTP/x.y", p, n);
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1')) {
        serve_error_set(err, 505, "invalid_request_error", NULL, "http_version_not_supported",
                        "HTTP version '%.8s' is not supported (HTTP/1.0 and HTTP/1.1 are)", v);
        return -1;
    }
    *minor = v[7] - '0';
    return 0;
}

/* A header line [p, p + n) without its line end; complete: its line end was seen. */
static int check_header_line(const char *p, size_t n, bool complete, serve_error *err)
{
    if (p[0] == ' ' || p[0] == '\t')
        return bad_line(err, "a header line starts with whitespace (obsolete line folding is not accepted)", p, n);
    size_t i = 0;
    while (i < n && tchar((unsigned char)p[i])) i++;
    if (i < n ? p[i] != ':' || i == 0 : complete)
        return bad_line(err, "a header line is not a field name, a colon and a value", p, n);
    for (size_t k = i; k < n; k++) {
        const unsigned char c = (unsigned char)p[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return bad_line(err, "a header's value holds a control byte", p, n);
    }
    return complete ? 0 : 1;
}

/* The value of a header line "name: value" with surrounding whitespace trimmed. */
static const char *header_value(const char *p, size_t n, size_t *vn)
{
    const char *c = memchr(p, ':', n), *e = p + n;
    const char *v = c + 1;
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
    *vn = (size_t)(e - v);
    return v;
}

static bool named(const char *p, size_t n, const char *name)
{
    const size_t k = strlen(name);
    return n > k && p[k] == ':' && strncasecmp(p, name, k) == 0;
}

int serve_head_check(const char *buf, size_t n, size_t limit, serve_head *hd, serve_error *err)
{
    memset(hd, 0, sizeof *hd);
    const size_t m = n < limit ? n : limit; /* the head must end within limit bytes */
    size_t i = 0;
    while (i < m && (buf[i] == '\r' || buf[i] == '\n')) i++; /* empty lines before a request are allowed */
    int minor = -1;
    bool host = false, first = true;
    while (i < m || first) {
        const char *nl = i < m ? memchr(buf + i, '\n', m - i) : NULL;
        const bool complete = nl != NULL;
        size_t len = complete ? (size_t)(nl - (buf + i)) : m - i;
        const char *line = buf + i;
        if (len && line[len - 1] == '\r') len--; /* its CRLF (or, not whole yet, the CR of it) */
        if (memchr(line, '\r', len)) return bad_line(err, "a line holds a CR that does not end it", line, len);
        if (memchr(line, 0, len)) return bad_line(err, "a line holds a NUL byte", line, len);
        if (first) {
            const int rc = len || complete ? check_request_line(line, len, complete, hd, &minor, err) : 1;
            if (rc) return rc < 0 || n <= limit ? rc : too_large(err, limit);
            first = false;
        } else if (!len && complete) { /* the empty line: the head is whole */
            if (minor == 1 && !host)
                return bad_line(err, "an HTTP/1.1 request needs a Host header", hd->target, strlen(hd->target));
            return 0;
        } else if (len) {
            const int rc = check_header_line(line, len, complete, err);
            if (rc) return rc < 0 || n <= limit ? rc : too_large(err, limit);
            size_t vn;
            const char *v = header_value(line, len, &vn);
            if (named(line, len, "host")) host = true;
            if (named(line, len, "origin")) {
                hd->origin = v;
                hd->origin_len = vn;
            }
            if (named(line, len, "content-length")) {
                size_t k = 0;
                while (k < vn && v[k] >= '0' && v[k] <= '9') k++;
                if (!vn || k < vn) return bad_line(err, "Content-Length is not a number", line, len);
                if (vn > 18) {
                    serve_error_set(err, 413, "invalid_request_error", NULL, "body_too_large",
                                    "the request body is %.*s bytes: too large", (int)(vn < 40 ? vn : 40), v);
                    return -1;
                }
            }
        }
        if (!complete) break;
        i += (size_t)(nl - (buf + i)) + 1;
    }
    return n > limit ? too_large(err, limit) : 1;
}

/* ---- connections ------------------------------------------------------------------------------- */

/* An accepted connection the gate still holds. */
typedef struct pend pend;
struct pend {
    pend *prev, *next;
    int fd;
    struct sockaddr_storage sa;
    socklen_t sa_len;
    char addr[INET6_ADDRSTRLEN];
    double t0, deadline;  /* CLOCK_MONOTONIC seconds: accepted; by when its head must be whole */
    bool closing;         /* answered: drained until the client closes or the linger ends */
};

struct serve_gate {
    serve_gate_config c;
    pthread_t thread;
    int ep;
    int lfd;              /* hub mutex: -1 once closed */
    bool quiesce;         /* hub mutex: stop listening */
    bool quit;            /* hub mutex: the thread ends */
    pend *pending;        /* the gate thread's */
    char *buf;            /* [limit + 1]: the peek buffer */
    size_t limit;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void unlink_pend(serve_gate *g, pend *p)
{
    epoll_ctl(g->ep, EPOLL_CTL_DEL, p->fd, NULL);
    if (p->prev) p->prev->next = p->next;
    else g->pending = p->next;
    if (p->next) p->next->prev = p->prev;
    pthread_mutex_lock(&g->c.h->mu);
    g->c.h->m.http_connections--;
    pthread_mutex_unlock(&g->c.h->mu);
}

static void drop(serve_gate *g, pend *p)
{
    unlink_pend(g, p);
    close(p->fd);
    free(p);
}

/* Reads and discards what the client sent; drops p at its end. */
static void drain(serve_gate *g, pend *p)
{
    for (;;) {
        ssize_t n = recv(p->fd, g->buf, g->limit + 1, 0);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        drop(g, p);
        return;
    }
}

static const char *reason(unsigned status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Answers p's bad head with err (JSON), then closes it once the client has finished sending. */
static void answer(serve_gate *g, pend *p, const serve_head *hd, const serve_error *err)
{
    serve_hub *h = g->c.h;
    char *body = serve_error_json(err);
    char cors[512] = "", obuf[256];
    const char *allow = serve_cors_origin(h->o, hd->origin, hd->origin_len, obuf, sizeof obuf);
    if (allow) snprintf(cors, sizeof cors, "Access-Control-Allow-Origin: %s\r\n%s", allow,
                        strcmp(allow, "*") ? "Vary: Origin\r\n" : "");
    else if (h->o->allowed_origins && strcmp(h->o->allowed_origins, "*")) snprintf(cors, sizeof cors, "Vary: Origin\r\n");
    const size_t blen = body ? strlen(body) : 0;
    const size_t cap = blen + sizeof cors + 256;
    char *resp = malloc(cap);
    if (resp) {
        int k = snprintf(resp, cap, "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                    "Connection: close\r\n%s\r\n%s", err->status, reason(err->status), blen, cors,
                         body ? body : "");
        size_t off = 0, len = k > 0 ? (size_t)k : 0;
        while (off < len) { /* a few hundred bytes into an empty send buffer: one call */
            ssize_t w = send(p->fd, resp + off, len - off, MSG_NOSIGNAL);
            if (w > 0) off += (size_t)w;
            else if (!(w < 0 && errno == EINTR)) break;
        }
    }
    free(resp);
    free(body);
    pthread_mutex_lock(&h->mu);
    h->m.http_requests++;
    h->m.http_errors++;
    pthread_mutex_unlock(&h->mu);
    if (g->c.log) g->c.log(g->c.user, p->addr, p->t0, hd, err->status);
    shutdown(p->fd, SHUT_WR);
    p->closing = true;
    p->deadline = now_s() + LINGER_S;
    drain(g, p);
}

/* An Origin header line anywhere in buf[0, n) (a head refused before its headers were checked,
 * so that an allowed origin still gets its CORS header); sets hd's origin. */
static void find_origin(const char *buf, size_t n, serve_head *hd)
{
    for (const char *p = buf, *e = buf + n; p < e;) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const size_t len = (size_t)((nl ? nl : e) - p) - (nl && nl > p && nl[-1] == '\r');
        if (named(p, len, "origin")) {
            hd->origin = header_value(p, len, &hd->origin_len);
            return;
        }
        if (!nl) return;
        p = nl + 1;
    }
}

/* New bytes (or the end) on p: check its head so far. */
static void inspect(serve_gate *g, pend *p, uint32_t events)
{
    if (p->closing) {
        drain(g, p);
        return;
    }
    ssize_t n;
    do n = recv(p->fd, g->buf, g->limit + 1, MSG_PEEK);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) { /* gone, before a whole request */
        drop(g, p);
        return;
    }
    serve_head hd;
    serve_error err;
    const int rc = serve_head_check(g->buf, (size_t)n, g->limit, &hd, &err);
    if (rc < 0) {
        if (!hd.origin) find_origin(g->buf, (size_t)n < g->limit ? (size_t)n : g->limit, &hd);
        answer(g, p, &hd, &err);
    } else if (rc == 0) {
        unlink_pend(g, p);
        g->c.hand(g->c.user, p->fd, (const struct sockaddr *)&p->sa, (unsigned)p->sa_len, p->deadline);
        free(p);
    } else if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) { /* the client ended half a request */
        drop(g, p);
    }
}

static void addr_text(const struct sockaddr_storage *sa, char *out, size_t cap)
{
    snprintf(out, cap, "?");
    if (sa->ss_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out, (socklen_t)cap);
}

static void accept_all(serve_gate *g)
{
    serve_hub *h = g->c.h;
    for (;;) {
        pend q = {0};
        q.sa_len = sizeof q.sa;
        int fd = accept4(g->lfd, (struct sockaddr *)&q.sa, &q.sa_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE) { /* out of files: the socket stays readable; do not spin */
                struct timespec ts = {0, 10 * 1000000L};
                nanosleep(&ts, NULL);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) { /* shut down (serve_gate_quiesce) */
                pthread_mutex_lock(&h->mu);
                epoll_ctl(g->ep, EPOLL_CTL_DEL, g->lfd, NULL);
                close(g->lfd);
                g->lfd = -1;
                pthread_mutex_unlock(&h->mu);
            }
            return;
        }
        addr_text(&q.sa, q.addr, sizeof q.addr);
        uint32_t same = 0;
        for (const pend *p = g->pending; p; p = p->next) same += strcmp(p->addr, q.addr) == 0;
        pthread_mutex_lock(&h->mu);
        if (g->c.max_per_ip) same += g->c.count_addr(g->c.user, q.addr);
        const bool over = h->m.http_connections >= g->c.max_conns || (g->c.max_per_ip && same >= g->c.max_per_ip);
        if (!over) h->m.http_connections++;
        pthread_mutex_unlock(&h->mu);
        pend *p = over ? NULL : malloc(sizeof *p);
        if (!p) {
            close(fd);
            if (!over) {
                pthread_mutex_lock(&h->mu);
                h->m.http_connections--;
                pthread_mutex_unlock(&h->mu);
            }
            continue;
        }
        *p = q;
        p->fd = fd;
        p->t0 = now_s();
        p->deadline = p->t0 + g->c.request_timeout;
        p->prev = NULL;
        p->next = g->pending;
        if (g->pending) g->pending->prev = p;
        g->pending = p;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.ptr = p};
        if (epoll_ctl(g->ep, EPOLL_CTL_ADD, fd, &ev) != 0) drop(g, p);
    }
}

static void *gate_main(void *arg)
{
    serve_gate *g = arg;
    serve_hub *h = g->c.h;
    struct epoll_event evs[GATE_EVENTS];
    for (;;) {
        pthread_mutex_lock(&h->mu);
        const bool quit = g->quit;
        pthread_mutex_unlock(&h->mu);
        if (quit) break;
        int n = epoll_wait(g->ep, evs, GATE_EVENTS, GATE_TICK_MS);
        for (int i = 0; i < n; i++) {
            if (!evs[i].data.ptr) {
                if (g->lfd >= 0) accept_all(g);
            } else {
                inspect(g, evs[i].data.ptr, evs[i].events);
            }
        }
        const double now = now_s();
        for (pend *p = g->pending, *next; p; p = next) {
            next = p->next;
            if (now <= p->deadline) continue;
            if (!p->closing) {
                pthread_mutex_lock(&h->mu);
                h->m.http_timeouts++;
                pthread_mutex_unlock(&h->mu);
            }
            drop(g, p);
        }
    }
    while (g->pending) drop(g, g->pending);
    return NULL;
}

serve_gate *serve_gate_start(const serve_gate_config *c, const char *prog)
{
    serve_gate *g = calloc(1, sizeof *g);
    if (!g) goto fail;
    g->ep = -1;
    g->c = *c;
    g->lfd = c->listen_fd;
    g->limit = c->h->o->max_header;
    g->buf = malloc(g->limit + 1);
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    if (!g->buf || g->ep < 0) {
        fprintf(stderr, "%s: cannot start the connection gate: %s\n", prog, g->buf ? strerror(errno) : "out of memory");
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(g->ep, EPOLL_CTL_ADD, g->lfd, &ev) != 0 || pthread_create(&g->thread, NULL, gate_main, g) != 0) {
        fprintf(stderr, "%s: cannot start the connection gate thread\n", prog);
        goto fail;
    }
    return g;
fail:
    if (g) {
        if (g->ep >= 0) close(g->ep);
        free(g->buf);
        free(g);
    }
    close(c->listen_fd);
    return NULL;
}

void serve_gate_quiesce(serve_gate *g)
{
    pthread_mutex_lock(&g->c.h->mu);
    /* The thread's accept fails from now on; it closes the socket. */
    if (g->lfd >= 0) shutdown(g->lfd, SHUT_RDWR);
    pthread_mutex_unlock(&g->c.h->mu);
}

void serve_gate_stop(serve_gate *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->c.h->mu);
    g->quit = true;
    pthread_mutex_unlock(&g->c.h->mu);
    pthread_join(g->thread, NULL);
    if (g->lfd >= 0) close(g->lfd);
    close(g->ep);
    free(g->buf);
    free(g);
}

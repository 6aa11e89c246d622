/* File-descriptor passing over abstract Unix sockets (see src/comm/fdx.h). */
#define _GNU_SOURCE /* struct ucred, SO_PEERCRED */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "comm/fdx.h"
#include "common/error.h"

struct dcp_fdx {
    int fd; /* listening socket */
};

static socklen_t address(const char *name, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n > sizeof a->sun_path - 2) n = sizeof a->sun_path - 2;
    memcpy(a->sun_path + 1, name, n); /* sun_path[0] = 0: the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

dcp_status dcp_fdx_open(dcp_fdx **out, char name[DCP_FDX_NAME_MAX])
{
    *out = NULL;
    dcp_fdx *x = calloc(1, sizeof *x);
    if (!x) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    x->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (x->fd < 0) {
        free(x);
        return dcp_fail(DCP_ERR_IO, "socket(AF_UNIX): %s", strerror(errno));
    }
    for (int attempt = 0; attempt < 8; attempt++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) break;
        snprintf(name, DCP_FDX_NAME_MAX, "dcp-vk-fdx-%ld-%016llx", (long)getpid(), (unsigned long long)r);
        struct sockaddr_un a;
        socklen_t len = address(name, &a);
        if (bind(x->fd, (struct sockaddr *)&a, len) == 0) {
            if (listen(x->fd, 256) != 0) break;
            *out = x;
            return DCP_OK;
        }
        if (errno != EADDRINUSE) break;
    }
    dcp_status st = dcp_fail(DCP_ERR_IO, "abstract Unix socket for passing descriptors: %s", strerror(errno));
    dcp_fdx_close(x);
    return st;
}

void dcp_fdx_close(dcp_fdx *x)
{
    if (!x) return;
    if (x->fd >= 0) close(x->fd);
    free(x);
}

dcp_status dcp_fdx_send(const char *name, const dcp_fdx_msg *msgs, const int *fds, int n)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return dcp_fail(DCP_ERR_IO, "socket(AF_UNIX): %s", strerror(errno));
    struct sockaddr_un a;
    socklen_t len = address(name, &a);
    dcp_status st = DCP_OK;
    if (connect(s, (struct sockaddr *)&a, len) != 0)
        st = dcp_fail(DCP_ERR_IO, "connecting to the descriptor socket %s: %s", name, strerror(errno));
    for (int i = 0; st == DCP_OK && i < n; i++) {
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof u);
        struct iovec iov = {(void *)&msgs[i], sizeof msgs[i]};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fds[i], sizeof(int));
        if (sendmsg(s, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof msgs[i])
            st = dcp_fail(DCP_ERR_IO, "sending a descriptor to %s: %s", name, strerror(errno));
    }
    close(s);
    return st;
}

/* Waits until fd is readable (timeout_s seconds). */
static dcp_status wait_readable(int fd, int timeout_s, const char *what)
{
    struct pollfd p = {fd, POLLIN, 0};
    int r;
    do r = poll(&p, 1, timeout_s * 1000);
    while (r < 0 && errno == EINTR);
    if (r == 0) return dcp_fail(DCP_ERR_IO, "%s: nothing after %d s (a peer process failed?)", what, timeout_s);
    if (r < 0) return dcp_fail(DCP_ERR_IO, "%s: poll: %s", what, strerror(errno));
    return DCP_OK;
}

dcp_status dcp_fdx_recv(dcp_fdx *x, int connections, const pid_t *pids, int npids, int timeout_s, dcp_fdx_msg **msgs,
                        int **fds, int *n)
{
    dcp_status st = DCP_OK;
    int cap = 0, count = 0;
    dcp_fdx_msg *m = NULL;
    int *f = NULL;
    for (int k = 0; k < connections && st == DCP_OK; k++) {
        if ((st = wait_readable(x->fd, timeout_s, "waiting for a descriptor connection")) != DCP_OK) break;
        int c = accept4(x->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            st = dcp_fail(DCP_ERR_IO, "accept on the descriptor socket: %s", strerror(errno));
            break;
        }
        struct ucred cr;
        socklen_t cl = sizeof cr;
        int known = 0;
        if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.uid == geteuid())
            for (int i = 0; i < npids; i++) known |= pids[i] == cr.pid;
        if (!known) {
            close(c);
            st = dcp_fail(DCP_ERR_IO, "descriptor socket: a connection from process %ld (uid %ld), not a peer", (long)cr.pid,
                          (long)cr.uid);
            break;
        }
        for (;;) {
            if ((st = wait_readable(c, timeout_s, "reading descriptors")) != DCP_OK) break;
            dcp_fdx_msg msg;
            union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
            } u;
            struct iovec iov = {&msg, sizeof msg};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
            ssize_t r = recvmsg(c, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
            if (r == 0) break; /* the sender closed: all its messages are in */
            int got = -1;
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) memcpy(&got, CMSG_DATA(cm), sizeof got);
            if (r != (ssize_t)sizeof msg || got < 0) {
                if (got >= 0) close(got);
                st = dcp_fail(DCP_ERR_IO, "descriptor socket: a short message (%zd bytes)%s", r,
                              got < 0 ? " without a descriptor" : "");
                break;
            }
            if (count == cap) {
                cap = cap ? 2 * cap : 16;
                dcp_fdx_msg *m2 = realloc(m, cap * sizeof *m);
                int *f2 = m2 ? realloc(f, cap * sizeof *f) : NULL;
                if (m2) m = m2;
                if (f2) f = f2;
                if (!m2 || !f2) {
                    close(got);
                    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
                    break;
                }
            }
            m[count] = msg;
            f[count++] = got;
        }
        close(c);
    }
    if (st != DCP_OK) {
        for (int i = 0; i < count; i++) close(f[i]);
        free(m);
        free(f);
        return st;
    }
    *msgs = m;
    *fds = f;
    *n = count;
    return DCP_OK;
}

/* POSIX shared-memory segments (see src/comm/shm.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/shm.h"
#include "common/error.h"

static dcp_status map(int fd, uint64_t size, const char *name, dcp_shm *out)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return dcp_fail(DCP_ERR_IO, "mmap of shared memory %s (%llu bytes): %s", name, (unsigned long long)size,
                        strerror(errno));
    out->ptr = p;
    out->size = size;
    return DCP_OK;
}

dcp_status dcp_shm_create(uint64_t size, dcp_shm *out)
{
    memset(out, 0, sizeof *out);
    if (size == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "shared memory of 0 bytes");
    for (int attempt = 0; attempt < 8; attempt++) {
        uint64_t r[2] = {0, 0};
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
            return dcp_fail(DCP_ERR_IO, "getrandom for a shared-memory name: %s", strerror(errno));
        snprintf(out->name, sizeof out->name, "/dcp-vk-%ld-%016llx%08llx", (long)getpid(), (unsigned long long)r[0],
                 (unsigned long long)(r[1] & 0xffffffffu));
        int fd = shm_open(out->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) return dcp_fail(DCP_ERR_IO, "shm_open(%s, O_CREAT | O_EXCL): %s", out->name, strerror(errno));
        out->owner = 1;
        dcp_status st = DCP_OK;
        if (ftruncate(fd, (off_t)size) != 0)
            st = dcp_fail(DCP_ERR_IO, "ftruncate of shared memory %s to %llu bytes: %s", out->name,
                          (unsigned long long)size, strerror(errno));
        if (st == DCP_OK) st = map(fd, size, out->name, out);
        close(fd);
        if (st != DCP_OK) dcp_shm_close(out);
        return st;
    }
    return dcp_fail(DCP_ERR_IO, "no unused shared-memory name after 8 attempts");
}

dcp_status dcp_shm_open(const char *name, uint64_t size, dcp_shm *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    int fd = shm_open(name, O_RDWR | O_NOFOLLOW, 0);
    if (fd < 0) return dcp_fail(DCP_ERR_IO, "shm_open(%s): %s", name, strerror(errno));
    struct stat sb;
    dcp_status st = DCP_OK;
    if (fstat(fd, &sb) != 0)
        st = dcp_fail(DCP_ERR_IO, "fstat of shared memory %s: %s", name, strerror(errno));
    else if (sb.st_uid != geteuid() || (sb.st_mode & 077))
        st = dcp_fail(DCP_ERR_IO, "shared memory %s belongs to uid %ld with mode %o: not this user's private segment",
                      name, (long)sb.st_uid, (unsigned)(sb.st_mode & 0777));
    else if ((uint64_t)sb.st_size != size)
        st = dcp_fail(DCP_ERR_IO, "shared memory %s holds %lld bytes, expected %llu", name, (long long)sb.st_size,
                      (unsigned long long)size);
    if (st == DCP_OK) st = map(fd, size, name, out);
    close(fd);
    return st;
}

void dcp_shm_unlink(dcp_shm *s)
{
    if (s->owner) shm_unlink(s->name);
    s->owner = 0;
}

void dcp_shm_close(dcp_shm *s)
{
    if (s->ptr) munmap(s->ptr, s->size);
    s->ptr = NULL;
    dcp_shm_unlink(s);
}

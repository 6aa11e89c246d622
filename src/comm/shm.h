/* POSIX shared memory between the processes of a node, for the communicator's hostmem transport
 * across processes: one segment, created safely by one process (shm_open O_CREAT | O_EXCL, mode
 * 0600, a name nobody else can predict), mapped by the others, unlinked once all have mapped it so
 * that nothing is left behind whatever happens next. No MPI here: the caller passes the name. */
#ifndef DCP_COMM_SHM_H
#define DCP_COMM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/status.h"

enum { DCP_SHM_NAME_MAX = 64 };

typedef struct dcp_shm {
    void *ptr;      /* the mapping (page aligned), NULL when none */
    uint64_t size;  /* bytes */
    char name[DCP_SHM_NAME_MAX];
    int owner;      /* 1 in the creating process until dcp_shm_unlink */
} dcp_shm;

/* Creates and maps a new zeroed segment of size bytes with a fresh unpredictable name. */
dcp_status dcp_shm_create(uint64_t size, dcp_shm *out);
/* Maps the segment `name` created by another process of the same user; its size must be `size`. */
dcp_status dcp_shm_open(const char *name, uint64_t size, dcp_shm *out);
/* Removes the name (the creator, once every process has mapped it); the mappings stay. */
void dcp_shm_unlink(dcp_shm *s);
/* Unmaps (and unlinks if still owned). */
void dcp_shm_close(dcp_shm *s);

#endif

/* Transport choice per pair of ranks (see src/comm/select.h). */
#include <stdio.h>

#include "comm/select.h"
#include "common/error.h"

static const char *dmabuf_note(const dcp_comm_pair_facts *f)
{
    return f->dmabuf == DCP_DMABUF_REFUSED || f->dmabuf == DCP_DMABUF_SLOWER ? f->dmabuf_why : NULL;
}

/* Can the pair use t? 1 yes (why: the reason it works), 0 no (why: the reason it does not). */
static int usable(const dcp_comm_pair_facts *f, dcp_transport t, char *why, size_t cap)
{
    switch (t) {
    case DCP_TRANSPORT_DEVGROUP:
        if (!f->same_proc) {
            snprintf(why, cap, "the ranks are in different processes (a device group is one VkDevice)");
            return 0;
        }
        if (!f->devgroup_ok) {
            snprintf(why, cap, "%s", f->devgroup_why[0] ? f->devgroup_why : "not one device-group VkDevice");
            return 0;
        }
        snprintf(why, cap, "one device-group VkDevice, peer copies into the receiver's memory");
        return 1;
    case DCP_TRANSPORT_PEER:
        if (!f->same_physical) {
            snprintf(why, cap, "different physical devices (opaque fds import only on the same device and driver UUIDs)");
            return 0;
        }
        if (!f->opaque_ok) {
            snprintf(why, cap, "the receiver cannot export or the sender cannot import opaque-fd memory "
                               "(VK_KHR_external_memory_fd)");
            return 0;
        }
        snprintf(why, cap, "same physical device (equal device and driver UUIDs): the receiver's buffer exported as an "
                           "opaque fd%s, GPU copies into it",
                 f->same_proc ? "" : " over a Unix socket");
        return 1;
    case DCP_TRANSPORT_DMABUF:
        if (f->dmabuf == DCP_DMABUF_OK) {
            snprintf(why, cap, "dma-buf accepted by the sender (%s)", f->dmabuf_why);
            return 1;
        }
        if (f->dmabuf == DCP_DMABUF_SLOWER) {
            snprintf(why, cap, "dma-buf imported but slower than host memory (%s)", f->dmabuf_why);
            return 0;
        }
        snprintf(why, cap, "%s", f->dmabuf == DCP_DMABUF_REFUSED ? f->dmabuf_why : "dma-buf was not negotiated for this pair");
        return 0;
    case DCP_TRANSPORT_HOSTMEM:
        if (!f->host_ok) {
            snprintf(why, cap, "a device lacks VK_EXT_external_memory_host");
            return 0;
        }
        snprintf(why, cap, "host memory imported into both devices (%s); the sender writes, the receiver reads",
                 f->multi_proc ? "a POSIX shared-memory segment of the node" : "one allocation");
        return 1;
    case DCP_TRANSPORT_STAGING:
        snprintf(why, cap, f->same_proc ? "mapped host-visible buffers, memcpy on the host"
                                        : "across processes the host path is MPI");
        return 1;
    case DCP_TRANSPORT_MPI:
        snprintf(why, cap, f->same_proc ? "in one process the host path is staging (memcpy)"
                                        : "host-visible staging and MPI between the processes");
        return 1;
    default:
        snprintf(why, cap, "unknown transport %d", (int)t);
        return 0;
    }
}

dcp_status dcp_comm_choose_pair(const dcp_comm_pair_facts *f, dcp_transport forced, dcp_transport *out, char *why,
                                size_t cap)
{
    char r[512];
    if (!f->same_node) {
        *out = DCP_TRANSPORT_MPI;
        snprintf(why, cap, "the ranks are on different nodes: MPI carries the blocks");
        return DCP_OK;
    }
    if (forced != DCP_TRANSPORT_AUTO) {
        if (!usable(f, forced, r, sizeof r)) {
            snprintf(why, cap, "%s", r);
            return dcp_fail(DCP_ERR_UNSUPPORTED, "transport %s was forced but cannot be used: %s",
                            dcp_transport_name(forced), r);
        }
        /* The host path is staging inside a process and MPI between processes. */
        if (forced == DCP_TRANSPORT_STAGING || forced == DCP_TRANSPORT_MPI)
            *out = f->same_proc ? DCP_TRANSPORT_STAGING : DCP_TRANSPORT_MPI;
        else
            *out = forced;
        snprintf(why, cap, "forced (%s): %s", dcp_transport_name(forced), r);
        return DCP_OK;
    }
    if (f->self) {
        *out = DCP_TRANSPORT_SELF;
        snprintf(why, cap, "the rank's own block: read in place or copied locally");
        return DCP_OK;
    }
    static const dcp_transport order[] = {DCP_TRANSPORT_DEVGROUP, DCP_TRANSPORT_PEER, DCP_TRANSPORT_DMABUF,
                                          DCP_TRANSPORT_HOSTMEM, DCP_TRANSPORT_STAGING};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        if (!usable(f, order[k], r, sizeof r)) continue;
        *out = order[k] == DCP_TRANSPORT_STAGING && !f->same_proc ? DCP_TRANSPORT_MPI : order[k];
        const char *note = order[k] == DCP_TRANSPORT_HOSTMEM || order[k] == DCP_TRANSPORT_STAGING ? dmabuf_note(f) : NULL;
        if (note)
            snprintf(why, cap, "%s; dma-buf not used: %s", r, note);
        else
            snprintf(why, cap, "%s", r);
        return DCP_OK;
    }
    return dcp_fail(DCP_ERR_INTERNAL, "no transport for a pair");
}

dcp_dmabuf_verdict dcp_comm_dmabuf_probe_verdict(double dmabuf_ns, double host_ns, uint64_t bytes, char *why,
                                                 size_t cap)
{
    double gd = dmabuf_ns > 0 ? bytes / dmabuf_ns : 0, gh = host_ns > 0 ? bytes / host_ns : 0; /* bytes/ns = GB/s */
    int faster = dmabuf_ns > 0 && dmabuf_ns < host_ns;
    snprintf(why, cap, "probe of %llu bytes: dma-buf %.2f GB/s, host memory %.2f GB/s: %s", (unsigned long long)bytes, gd,
             gh, faster ? "dma-buf is faster" : "host memory is faster, falling back to it");
    return faster ? DCP_DMABUF_OK : DCP_DMABUF_SLOWER;
}

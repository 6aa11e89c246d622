/* What each transport is (its name and where its memory lives, who copies) and the transport
 * choice per pair of ranks (see src/comm/select.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/select.h"
#include "common/error.h"

/* Where the memory lives, who copies: one row per transport (docs/design.md section 8). Columns:
 * name, forcible, put area, receiver may read in place, who copies otherwise, how a sending GPU
 * reaches the inbox, the inbox's export handle. */
static const dcp_transport_info transports[] = {
    [DCP_TRANSPORT_AUTO] = {"auto", 1, DCP_PUT_ANYWHERE, 0, DCP_COPIER_NONE, DCP_REACH_NONE, 0},
    [DCP_TRANSPORT_DEVGROUP] = {"devgroup", 1, DCP_PUT_DEVICE, 0, DCP_COPIER_SENDER_GPU, DCP_REACH_PEER_VIEW, 0},
    [DCP_TRANSPORT_HOSTMEM] = {"hostmem", 1, DCP_PUT_SEGMENT, 1, DCP_COPIER_RECEIVER_GPU, DCP_REACH_NONE, 0},
    [DCP_TRANSPORT_STAGING] = {"staging", 1, DCP_PUT_HOST, 0, DCP_COPIER_HOST, DCP_REACH_NONE, 0},
    [DCP_TRANSPORT_MPI] = {"mpi", 1, DCP_PUT_HOST, 0, DCP_COPIER_NET, DCP_REACH_NONE, 0},
    [DCP_TRANSPORT_PEER] = {"peer", 1, DCP_PUT_DEVICE, 0, DCP_COPIER_SENDER_GPU, DCP_REACH_FD, DCP_HANDLE_OPAQUE_FD},
    [DCP_TRANSPORT_DMABUF] = {"dmabuf", 1, DCP_PUT_DEVICE, 0, DCP_COPIER_SENDER_GPU, DCP_REACH_FD, DCP_HANDLE_DMA_BUF},
    [DCP_TRANSPORT_MIXED] = {"mixed", 0, DCP_PUT_ANYWHERE, 0, DCP_COPIER_NONE, DCP_REACH_NONE, 0},
    [DCP_TRANSPORT_SELF] = {"self", 0, DCP_PUT_ANYWHERE, 1, DCP_COPIER_SENDER_GPU, DCP_REACH_OWN, 0},
};
enum { TRANSPORT_COUNT = sizeof transports / sizeof transports[0] };

const dcp_transport_info *dcp_transport_info_of(dcp_transport t)
{
    static const dcp_transport_info unknown = {"unknown", 0, DCP_PUT_ANYWHERE, 0, DCP_COPIER_NONE, DCP_REACH_NONE, 0};
    return (int)t >= 0 && (int)t < TRANSPORT_COUNT ? &transports[t] : &unknown;
}

const char *dcp_transport_name(dcp_transport t) { return dcp_transport_info_of(t)->name; }

dcp_status dcp_transport_parse(const char *name, dcp_transport *out)
{
    for (int t = 0; t < TRANSPORT_COUNT; t++)
        if (name && transports[t].forcible && strcmp(name, transports[t].name) == 0) {
            *out = (dcp_transport)t;
            return DCP_OK;
        }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                    "transport \"%s\" is not one of auto, devgroup, peer, dmabuf, hostmem, staging, mpi",
                    name ? name : "(null)");
}

dcp_status dcp_comm_forced_transport(dcp_transport asked, dcp_transport *out)
{
    dcp_transport t = asked;
    if (t == DCP_TRANSPORT_AUTO) {
        const char *env = getenv("DCP_VK_TRANSPORT");
        if (env && *env) {
            dcp_status st = dcp_transport_parse(env, &t);
            if (st != DCP_OK) return dcp_fail_context(st, "$DCP_VK_TRANSPORT");
        }
    }
    if (!dcp_transport_info_of(t)->forcible)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "communicator: transport %d cannot be asked for", (int)t);
    *out = t;
    return DCP_OK;
}

int dcp_comm_dmabuf_wanted(const dcp_comm_pair_facts *f, dcp_transport forced)
{
    return f->same_node &&
           (forced == DCP_TRANSPORT_DMABUF || (forced == DCP_TRANSPORT_AUTO && !f->self && !f->same_physical));
}

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

/* The devices of this process's TP ranks (cli/run.h run_open_devices): the rank split over the MPI
 * processes, the device list, and the Vulkan context, agreed by every process. */
#include <stdio.h>
#include <stdlib.h>

#include "dcpvk/vk.h"
#include "cli/run.h"

int run_open_devices(const run_world *w, const run_options *o, const char *prog, int lead, uint32_t *first,
                     uint32_t *count, dcp_context **ctx)
{
    *ctx = NULL;
    int rc = run_world_agree(w, run_world_split(w, o->tp, o->dcp, first, count, prog));
    if (rc) return rc;
    static char list[4096];
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o->devices;
    const char *env = getenv("DCP_VK_DEVICES");
    const int have_list = o->devices || (env && *env);
    if (w->nproc > 1 && have_list) {
        int drc = run_world_devices(w, o->devices ? o->devices : env, *first, *count, o->tp, list, sizeof list, prog);
        if ((rc = run_world_agree(w, drc))) return rc;
        cc.devices = list;
    } else if (!have_list && o->tp > 1) {
        /* No list: one physical device per rank when there are enough, else logical devices of
         * physical device 0. */
        dcp_context *probe = NULL;
        int phys = 0;
        if (dcp_context_create(&cc, &probe) == DCP_OK) phys = dcp_context_physical_device_count(probe);
        dcp_context_destroy(probe);
        size_t n = 0;
        for (uint32_t r = 0; r < *count && n < sizeof list; r++)
            n += (size_t)snprintf(list + n, sizeof list - n, r ? ",%u" : "%u", phys >= (int)o->tp ? *first + r : 0u);
        cc.devices = list;
        if (phys < (int)o->tp && lead)
            fprintf(stderr, "%s: %d physical device(s) for %u TP ranks: running the ranks on %u logical devices "
                            "of physical device 0 (--devices or DCP_VK_DEVICES choose others)\n",
                    prog, phys, o->tp, o->tp);
    }
    int crc = 0;
    dcp_status st = dcp_context_create(&cc, ctx);
    if (st != DCP_OK) {
        if (w->nproc > 1)
            fprintf(stderr, "%s: process %d: creating the Vulkan devices: %s: %s\n", prog, w->proc,
                    dcp_status_string(st), dcp_last_error());
        else
            fprintf(stderr, "%s: creating the Vulkan devices: %s: %s\n", prog, dcp_status_string(st), dcp_last_error());
        crc = st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    } else if (dcp_context_device_count(*ctx) < (int)*count) {
        fprintf(stderr, "%s: --tensor-parallel-size %u needs %u devices; the device list gives %d (--devices or "
                        "DCP_VK_DEVICES, e.g. 0,0,0,0 for four logical devices on device 0)\n",
                prog, o->tp, *count, dcp_context_device_count(*ctx));
        crc = DCP_EXIT_USAGE;
    }
    return run_world_agree(w, crc);
}

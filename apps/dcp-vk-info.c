/* dcp-vk-info: lists the Vulkan devices dcp-vk sees and the properties it records, and how a
 * communicator over the listed devices (one process) would exchange: each pair's transport and why,
 * and whether a step's rounds can wait on each other on the GPU. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "dcpvk/comm.h"
#include "dcpvk/vk.h"

static void usage(FILE *f)
{
    dcp_cli_print_text(f, "usage: dcp-vk-info [--devices LIST] [--json]\n"
               "  --devices LIST  comma-separated physical-device indices; repeats make several logical\n"
               "                  devices on one physical device (default: $DCP_VK_DEVICES, else all)\n"
               "  --json          print the devices as one JSON object (default: text)\n"
               "  --version       print the library version\n"
               "  --help          this help\n");
}

static void print_uuid(const uint8_t *u)
{
    for (int i = 0; i < 16; i++) printf("%s%02x", (i == 4 || i == 6 || i == 8 || i == 10) ? "-" : "", u[i]);
}

/* "opaque-fd,dma-buf" style names of DCP_HANDLE_* bits ("none"). */
static const char *handles(uint32_t h, char *buf, size_t cap)
{
    static const char *const names[4] = {"opaque-fd", "dma-buf", "sync-fd", "host"};
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < 4; k++)
        if (h & (1u << k)) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", names[k]);
    if (!n) snprintf(buf, cap, "none");
    return buf;
}

/* The transports a communicator over every listed device would use (auto). */
static void print_transports(dcp_context *ctx, int json)
{
    int n = dcp_context_device_count(ctx);
    dcp_device *devs[256];
    for (int i = 0; i < n && i < 256; i++) devs[i] = dcp_context_device(ctx, i);
    dcp_comm *comm = NULL;
    dcp_status st = dcp_comm_init_local(devs, n < 256 ? n : 256, NULL, &comm);
    if (st != DCP_OK) {
        if (json) {
            printf(", \"transports\": null, \"transports_error\": ");
            dcp_cli_json_string(stdout, dcp_last_error(), strlen(dcp_last_error()));
        } else {
            printf("transports: cannot open a communicator over the devices: %s\n", dcp_last_error());
        }
        return;
    }
    char why[256];
    const char *sync = dcp_comm_gpu_rounds(comm, why, sizeof why) ? "gpu" : "host";
    if (json) {
        printf(", \"transports\": [");
        for (int s = 0; s < dcp_comm_size(comm); s++)
            for (int d = 0; d < dcp_comm_size(comm); d++) {
                const char *why = dcp_comm_pair_reason(comm, s, d);
                printf("%s{\"src\": %d, \"dst\": %d, \"transport\": \"%s\", \"reason\": ", s || d ? ", " : "", s, d,
                       dcp_transport_name(dcp_comm_pair_transport(comm, s, d)));
                dcp_cli_json_string(stdout, why, strlen(why));
                printf("}");
            }
        printf("], \"step_rounds\": \"%s\", \"step_rounds_reason\": ", sync);
        dcp_cli_json_string(stdout, why, strlen(why));
    } else {
        char buf[8192];
        printf("transports between the listed devices (one process, auto; $DCP_VK_TRANSPORT forces one):\n%s\n",
               dcp_comm_describe(comm, buf, sizeof buf));
        printf("step rounds: %s waits (%s)\n", sync, why);
    }
    dcp_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    dcp_set_log_callback(dcp_cli_log_stderr, NULL);
    const char *devices = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--devices") == 0) {
            if (!(devices = dcp_cli_value("dcp-vk-info", argc, argv, &i))) return DCP_EXIT_USAGE;
        } else if (strcmp(argv[i], "--version") == 0) {
            dcp_cli_print_version("dcp-vk-info");
            return dcp_cli_finish_stdout("dcp-vk-info", DCP_EXIT_OK);
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return dcp_cli_finish_stdout("dcp-vk-info", DCP_EXIT_OK);
        } else {
            fprintf(stderr, "dcp-vk-info: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return DCP_EXIT_USAGE;
        }
    }
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    cfg.devices = devices;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&cfg, &ctx);
    if (st != DCP_OK) {
        dcp_cli_report("dcp-vk-info", "opening devices", st);
        return st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    int n = dcp_context_device_count(ctx);
    if (json) printf("{\"physical_devices\": %d, \"devices\": [", dcp_context_physical_device_count(ctx));
    for (int i = 0; i < n; i++) {
        const dcp_device_info *d = dcp_device_get_info(dcp_context_device(ctx, i));
        unsigned maj = d->api_version >> 22, min = (d->api_version >> 12) & 0x3ff, pat = d->api_version & 0xfff;
        if (json) {
            printf("%s{\"index\": %d, \"physical_index\": %d, \"name\": ", i ? ", " : "", i, d->physical_index);
            dcp_cli_json_string(stdout, d->name, strlen(d->name));
            printf(", \"type\": \"%s\", \"vendor_id\": %u, \"device_id\": %u, \"driver\": ", d->type,
                   d->vendor_id, d->device_id);
            dcp_cli_json_string(stdout, d->driver_name, strlen(d->driver_name));
            printf(", \"driver_info\": ");
            dcp_cli_json_string(stdout, d->driver_info, strlen(d->driver_info));
            printf(", \"api_version\": \"%u.%u.%u\", \"device_uuid\": \"", maj, min, pat);
            print_uuid(d->device_uuid);
            printf("\", \"subgroup_size\": %u, \"min_storage_offset_alignment\": %llu, \"max_storage_buffer_range\": %llu, "
                   "\"max_allocation_size\": %llu, \"max_shared_memory\": %u, "
                   "\"max_workgroup_invocations\": %u, \"timestamp_period_ns\": %g, "
                   "\"external_memory_host\": %s, \"device_group_size\": %u, \"kv_multi_segment\": %s, "
                   "\"matmul_layout\": \"%s\", \"memory_heaps\": [",
                   d->subgroup_size, (unsigned long long)d->min_storage_offset_alignment,
                   (unsigned long long)d->max_storage_buffer_range,
                   (unsigned long long)d->max_allocation_size, d->max_shared_memory,
                   d->max_workgroup_invocations, d->timestamp_period_ns,
                   d->has_external_memory_host ? "true" : "false", d->physical_group_size,
                   d->kv_multi_segment ? "true" : "false", d->matmul_lane_rows ? "rows" : "split");
            for (uint32_t h = 0; h < d->heap_count; h++)
                printf("%s{\"size\": %llu, \"device_local\": %s}", h ? ", " : "",
                       (unsigned long long)d->heap_size[h], d->heap_device_local[h] ? "true" : "false");
            char h1[64], h2[64], h3[64], h4[64];
            printf("], \"driver_uuid\": \"");
            print_uuid(d->driver_uuid);
            printf("\", \"memory_export\": \"%s\", \"memory_import\": \"%s\", \"semaphore_export\": \"%s\", "
                   "\"semaphore_import\": \"%s\", \"timeline_semaphores\": %s, \"group_vkdevice_devices\": %u, "
                   "\"group_device_index\": %u}",
                   handles(d->mem_export, h1, sizeof h1), handles(d->mem_import, h2, sizeof h2),
                   handles(d->sem_export, h3, sizeof h3), handles(d->sem_import, h4, sizeof h4),
                   d->timeline_semaphore ? "true" : "false", d->group_device_count, d->group_device_index);
        } else {
            printf("device %d (physical %d): %s [%s]\n", i, d->physical_index, d->name, d->type);
            printf("  vendor 0x%04x device 0x%04x, driver %s (%s), Vulkan %u.%u.%u\n", d->vendor_id,
                   d->device_id, d->driver_name, d->driver_info, maj, min, pat);
            printf("  uuid ");
            print_uuid(d->device_uuid);
            printf("\n  subgroup %u, shared memory %u B, workgroup <= %u invocations, matmul lanes %s\n",
                   d->subgroup_size, d->max_shared_memory, d->max_workgroup_invocations,
                   d->matmul_lane_rows ? "own rows" : "split rows");
            printf("  max storage-buffer range %llu B, offset alignment %llu B, max allocation %llu B\n",
                   (unsigned long long)d->max_storage_buffer_range, (unsigned long long)d->min_storage_offset_alignment,
                   (unsigned long long)d->max_allocation_size);
            printf("  timestamps %s, external host memory %s, device group of %u, KV pools over %s\n",
                   d->timestamp_period_ns > 0 ? "yes" : "no", d->has_external_memory_host ? "yes" : "no",
                   d->physical_group_size, d->kv_multi_segment ? "several buffers" : "one buffer");
            for (uint32_t h = 0; h < d->heap_count; h++)
                printf("  heap %u: %.2f GiB%s\n", h, (double)d->heap_size[h] / (1024.0 * 1024 * 1024),
                       d->heap_device_local[h] ? " device-local" : "");
            char h1[64], h2[64], h3[64], h4[64];
            printf("  driver uuid ");
            print_uuid(d->driver_uuid);
            printf("\n  external memory: export %s, import %s; external semaphores: export %s, import %s; "
                   "timeline semaphores %s\n",
                   handles(d->mem_export, h1, sizeof h1), handles(d->mem_import, h2, sizeof h2),
                   handles(d->sem_export, h3, sizeof h3), handles(d->sem_import, h4, sizeof h4),
                   d->timeline_semaphore ? "yes" : "no");
            if (d->group_device_count)
                printf("  device-group VkDevice of %u physical device(s), device index %u\n", d->group_device_count,
                       d->group_device_index);
        }
    }
    if (json) printf("]");
    print_transports(ctx, json);
    if (json) printf("}\n");
    dcp_context_destroy(ctx);
    return dcp_cli_finish_stdout("dcp-vk-info", DCP_EXIT_OK);
}

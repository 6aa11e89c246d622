/* dcp-vk-info: lists the Vulkan devices dcp-vk sees and the properties it records. */
#include <stdio.h>
#include <string.h>

#include "common/cli.h"
#include "dcpvk/vk.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: dcp-vk-info [--devices LIST] [--json]\n"
               "  --devices LIST  comma-separated physical-device indices; repeats make several logical\n"
               "                  devices on one physical device (default: $DCP_VK_DEVICES, else all)\n"
               "  --json          print the devices as one JSON object (default: text)\n"
               "  --help          this help\n");
}

static void print_uuid(const uint8_t *u)
{
    for (int i = 0; i < 16; i++) printf("%s%02x", (i == 4 || i == 6 || i == 8 || i == 10) ? "-" : "", u[i]);
}

int main(int argc, char **argv)
{
    const char *devices = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--devices") == 0) {
            if (!(devices = dcp_cli_value("dcp-vk-info", argc, argv, &i))) return DCP_EXIT_USAGE;
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
            printf("\", \"subgroup_size\": %u, \"max_storage_buffer_range\": %llu, "
                   "\"max_allocation_size\": %llu, \"max_shared_memory\": %u, "
                   "\"max_workgroup_invocations\": %u, \"timestamp_period_ns\": %g, "
                   "\"external_memory_host\": %s, \"device_group_size\": %u, \"kv_multi_segment\": %s, "
                   "\"memory_heaps\": [",
                   d->subgroup_size, (unsigned long long)d->max_storage_buffer_range,
                   (unsigned long long)d->max_allocation_size, d->max_shared_memory,
                   d->max_workgroup_invocations, d->timestamp_period_ns,
                   d->has_external_memory_host ? "true" : "false", d->physical_group_size,
                   d->kv_multi_segment ? "true" : "false");
            for (uint32_t h = 0; h < d->heap_count; h++)
                printf("%s{\"size\": %llu, \"device_local\": %s}", h ? ", " : "",
                       (unsigned long long)d->heap_size[h], d->heap_device_local[h] ? "true" : "false");
            printf("]}");
        } else {
            printf("device %d (physical %d): %s [%s]\n", i, d->physical_index, d->name, d->type);
            printf("  vendor 0x%04x device 0x%04x, driver %s (%s), Vulkan %u.%u.%u\n", d->vendor_id,
                   d->device_id, d->driver_name, d->driver_info, maj, min, pat);
            printf("  uuid ");
            print_uuid(d->device_uuid);
            printf("\n  subgroup %u, shared memory %u B, workgroup <= %u invocations\n", d->subgroup_size,
                   d->max_shared_memory, d->max_workgroup_invocations);
            printf("  max storage-buffer range %llu B, max allocation %llu B\n",
                   (unsigned long long)d->max_storage_buffer_range, (unsigned long long)d->max_allocation_size);
            printf("  timestamps %s, external host memory %s, device group of %u, KV pools over %s\n",
                   d->timestamp_period_ns > 0 ? "yes" : "no", d->has_external_memory_host ? "yes" : "no",
                   d->physical_group_size, d->kv_multi_segment ? "several buffers" : "one buffer");
            for (uint32_t h = 0; h < d->heap_count; h++)
                printf("  heap %u: %.2f GiB%s\n", h, (double)d->heap_size[h] / (1024.0 * 1024 * 1024),
                       d->heap_device_local[h] ? " device-local" : "");
        }
    }
    if (json) printf("]}\n");
    dcp_context_destroy(ctx);
    return dcp_cli_finish_stdout("dcp-vk-info", DCP_EXIT_OK);
}

/* A program built out of the source tree against an installed dcp-vk (tests/install/check.cmake
 * builds it with find_package(dcpvk) and with pkg-config): prints the library's version and the
 * Vulkan devices it opens, then runs a copy on device 0 and checks the bytes that come back. Exit
 * 0 on success; 1 with a message when anything fails, in particular when there is no device. */
#include <stdio.h>
#include <string.h>

#include <dcpvk/dcpvk.h>

static int fail(const char *what, dcp_status st)
{
    fprintf(stderr, "consumer: %s: %s: %s\n", what, dcp_status_string(st), dcp_last_error());
    return 1;
}

int main(void)
{
    printf("dcp-vk %s (headers %s)\n", dcp_version(), DCPVK_VERSION_STRING);
    if (strcmp(dcp_version(), DCPVK_VERSION_STRING) != 0) {
        fprintf(stderr, "consumer: library %s does not match headers %s\n", dcp_version(), DCPVK_VERSION_STRING);
        return 1;
    }
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&cc, &ctx);
    if (st != DCP_OK) return fail("opening Vulkan devices", st);
    int n = dcp_context_device_count(ctx);
    printf("devices: %d\n", n);
    if (n < 1) {
        fprintf(stderr, "consumer: no Vulkan device\n");
        dcp_context_destroy(ctx);
        return 1;
    }
    dcp_device *dev = dcp_context_device(ctx, 0);
    printf("device 0: %s\n", dcp_device_get_info(dev)->name);

    /* upload 256 words, copy them on the device into a second buffer, download, compare */
    enum { WORDS = 256 };
    unsigned in[WORDS], out[WORDS];
    for (unsigned i = 0; i < WORDS; i++) in[i] = i * 2654435761u;
    memset(out, 0, sizeof out);
    dcp_buffer *a = NULL, *b = NULL;
    dcp_cmd *cmd = NULL;
    int rc = 1;
    if ((st = dcp_buffer_create(dev, sizeof in, DCP_MEMORY_DEVICE, &a)) ||
        (st = dcp_buffer_create(dev, sizeof in, DCP_MEMORY_DEVICE, &b)) ||
        (st = dcp_buffer_upload(a, 0, in, sizeof in)) || (st = dcp_cmd_create(dev, &cmd)) ||
        (st = dcp_cmd_copy(cmd, a, 0, b, 0, sizeof in)) || (st = dcp_cmd_run(cmd)) ||
        (st = dcp_buffer_download(b, 0, out, sizeof out))) {
        rc = fail("copy on device 0", st);
    } else if (memcmp(in, out, sizeof in) != 0) {
        fprintf(stderr, "consumer: the device copy differs from what was uploaded\n");
    } else {
        printf("device copy of %zu bytes: ok\n", sizeof in);
        rc = 0;
    }
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(b);
    dcp_buffer_destroy(a);
    if (dcp_context_validation_count(ctx) != 0) { /* with DCP_VK_VALIDATION=1 */
        fprintf(stderr, "consumer: %llu validation messages\n", (unsigned long long)dcp_context_validation_count(ctx));
        rc = 1;
    }
    dcp_context_destroy(ctx);
    return rc;
}

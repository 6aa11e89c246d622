/* dcp-vk-bench: measures dcp-vk. Subcommands: attn (paged decode attention). */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "common/cli.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: dcp-vk-bench <command> [options]\n"
               "commands:\n"
               "  attn      paged flash-decoding attention: step time, KV read rate against a\n"
               "            streaming-read shader and vkCmdCopyBuffer on the same device\n"
               "run 'dcp-vk-bench <command> --help' for the options of a command\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? DCP_EXIT_USAGE : DCP_EXIT_OK;
    }
    if (strcmp(argv[1], "attn") == 0) return dcp_bench_attn(argc - 1, argv + 1);
    fprintf(stderr, "dcp-vk-bench: unknown command '%s' (allowed: attn)\n", argv[1]);
    return DCP_EXIT_USAGE;
}

/* dcp-vk-bench: measures dcp-vk. Subcommands: attn (paged decode attention, single-device or DCP),
 * capacity (longest context that fits a KV budget, plain TP against DCP), matmul (weight read rate
 * of each weight type), ops (the other model kernels), yardsticks (the device's ceilings), comm
 * (exchange latency per collective and transport). */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"

static void usage(FILE *f)
{
    dcp_cli_print_text(f, "usage: dcp-vk-bench <command> [options]\n"
               "commands:\n"
               "  attn      paged flash-decoding attention: step time, KV read rate against a\n"
               "            streaming-read shader and vkCmdCopyBuffer on the same device; with --dcp N\n"
               "            the DCP step over N devices or MPI ranks (a2a or ag_rs)\n"
               "  capacity  longest context that fits a KV budget per device, KV duplicated as\n"
               "            under plain TP against sharded with DCP, counted by the placement rule\n"
               "  matmul    weight read rate of the matmul shader for each weight type (F32 .. IQ4_XS)\n"
               "            at batch 1, 8, 32 against the streaming-read yardsticks of the same device\n"
               "  ops       the model kernels other than matmul and attention (norms, RoPE and the KV store,\n"
               "            SwiGLU, MLA and MoE kernels, ...) against the roofline of the same device\n"
               "  spec      decode tokens/s with and without speculative decoding (n-gram drafts on a\n"
               "            self-quoting prompt, a draft model): speedup and acceptance\n"
               "  yardsticks  the device's ceilings: streaming-read rate, FMA rate, the cost of an empty\n"
               "            dispatch and of a host wait\n"
               "  comm      latency and bandwidth of every collective (and the DCP exchanges) over every\n"
               "            transport, 1 KB to 16 MB, in one process or under mpiexec; a model decode step\n"
               "            split into compute and exchange\n"
               "run 'dcp-vk-bench <command> --help' for the options of a command;\n"
               "'dcp-vk-bench --version' prints the library version\n");
}

int main(int argc, char **argv)
{
    dcp_set_log_callback(dcp_cli_log_stderr, NULL);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? DCP_EXIT_USAGE : dcp_cli_finish_stdout("dcp-vk-bench", DCP_EXIT_OK);
    }
    if (strcmp(argv[1], "--version") == 0) {
        dcp_cli_print_version("dcp-vk-bench");
        return dcp_cli_finish_stdout("dcp-vk-bench", DCP_EXIT_OK);
    }
    /* Every command's output is checked at the end: a failed write (a full disk, /dev/full) exits 1. */
    if (strcmp(argv[1], "attn") == 0) return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_attn(argc - 1, argv + 1));
    if (strcmp(argv[1], "capacity") == 0)
        return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_capacity(argc - 1, argv + 1));
    if (strcmp(argv[1], "matmul") == 0)
        return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_matmul(argc - 1, argv + 1));
    if (strcmp(argv[1], "ops") == 0) return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_ops(argc - 1, argv + 1));
    if (strcmp(argv[1], "spec") == 0) return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_spec(argc - 1, argv + 1));
    if (strcmp(argv[1], "yardsticks") == 0)
        return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_yardsticks_cmd(argc - 1, argv + 1));
    if (strcmp(argv[1], "comm") == 0) return dcp_cli_finish_stdout("dcp-vk-bench", dcp_bench_comm(argc - 1, argv + 1));
    fprintf(stderr, "dcp-vk-bench: unknown command '%s' (allowed: attn, capacity, matmul, ops, spec, yardsticks, comm)\n",
            argv[1]);
    return DCP_EXIT_USAGE;
}

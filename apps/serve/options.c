/* dcp-vk-serve options: its own (listening, limits, API key) are taken out here; every other option
 * goes to dcp-vk-run's parser (cli/options.c), so the model, TP/DCP, device and KV options are the
 * same in both apps. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "serve/serve.h"

static int quiet_msgs;

static int bad(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(const char *prog, const char *fmt, ...)
{
    if (!quiet_msgs) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: ", prog);
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
    }
    return DCP_EXIT_USAGE;
}

static int parse_u32(const char *prog, const char *name, const char *v, uint32_t min, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || errno || v[0] == '-' || x < min || x > max) {
        if (!quiet_msgs)
            fprintf(stderr, "%s: option %s: '%s' is not an integer in [%u, %u]\n", prog, name, v, min, max);
        return DCP_EXIT_USAGE;
    }
    *out = (uint32_t)x;
    return 0;
}

void serve_print_help(const char *prog)
{
    dcp_cli_print_text(stdout, "usage: %s -m MODEL.gguf [options]\n"
           "\n"
           "Serves a GGUF llama-family model over HTTP with the OpenAI API: POST /v1/completions and\n"
           "/v1/chat/completions (\"stream\": true sends server-sent events), GET /v1/models and\n"
           "/v1/models/{id}, /health and /metrics (Prometheus); HEAD where GET. Requests run together (continuous batching): each step decodes every\n"
           "running request and adds chunks of new prompts. Stop with SIGTERM or Ctrl-C: new requests\n"
           "are refused, those in flight finish (up to --shutdown-timeout), exit code 0. Exit codes:\n"
           "0 ok, 1 runtime failure, 2 usage or configuration error (a --host / --port that cannot be\n"
           "listened on, such as a port in use, included).\n"
           "\n"
           "Server:\n"
           "      --host ADDR                      address to listen on (default 127.0.0.1)\n"
           "      --port N                         TCP port, 0 = any free one (default 8080); the\n"
           "                                       port is printed on stderr when listening\n"
           "      --api-key KEY                    require 'Authorization: Bearer KEY' on /v1/\n"
           "                                       (default $DCP_VK_API_KEY, else none)\n"
           "      --served-model-name NAME         the model's id in the API (default: the file's\n"
           "                                       name without .gguf)\n"
           "      --chat-template NAME             chat format: chatml, llama2, llama2-sys,\n"
           "                                       llama2-sys-bos, llama2-sys-strip, mistral-v1,\n"
           "                                       mistral-v3, mistral-v3-tekken, mistral-v7, phi3,\n"
           "                                       llama3, gemma, deepseek, deepseek2, deepseek3,\n"
           "                                       zephyr (default: recognised from the model's\n"
           "                                       tokenizer.chat_template; none: chat requests get\n"
           "                                       400, completions work)\n"
           "      --max-seqs N                     requests running at once (default 16)\n"
           "      --kv-pages N                     KV pages per rank pool, shared by the running\n"
           "                                       requests (default 0: --max-seqs full contexts)\n"
           "      --max-body-bytes N               largest request body (default 1048576)\n"
           "      --max-prompt-tokens N            longest prompt (default 0: the context)\n"
           "      --max-tokens-limit N             largest max_tokens (default 0: the context)\n"
           "      --max-prompt-logprobs-entries N  prompt_logprobs -1 (the whole vocabulary) only while\n"
           "                                       prompt tokens x vocabulary <= N (default 262144)\n"
           "      --max-queued N                   requests waiting beyond --max-seqs; more get 429\n"
           "                                       (default 64)\n"
           "      --shutdown-timeout S             seconds in-flight requests may take to finish\n"
           "                                       after SIGTERM before they are cancelled (default 30)\n"
           "\n"
           "Connections (libmicrohttpd, an epoll loop per worker thread; idle sockets hold no thread):\n"
           "      --http-threads N                 worker threads (default 4)\n"
           "      --max-connections N              open connections at most; the open-file limit is\n"
           "                                       raised to fit (default 4096)\n"
           "      --max-connections-per-ip N       open connections from one client address; more\n"
           "                                       are closed at once (default 128; 0: no limit)\n"
           "      --idle-timeout S                 a connection silent for S seconds is closed, not\n"
           "                                       while its request waits for the model (default 15)\n"
           "      --request-timeout S              a request's headers and body must all arrive within\n"
           "                                       S seconds (of the connection, then of each request\n"
           "                                       line), else the connection is closed (default 10)\n"
           "      --max-header-bytes N             a request's line and headers at most; more get 431\n"
           "                                       (1024 to 65536, default 16384)\n"
           "      --allowed-origins LIST           CORS: origins browsers may call from, comma-\n"
           "                                       separated (https://app.example.com,...), or '*';\n"
           "                                       preflight OPTIONS answered (default none: no CORS\n"
           "                                       headers)\n"
           "      --log-format text|json           one access-log line per request on stderr: client,\n"
           "                                       method, path, status, prompt and completion tokens,\n"
           "                                       time in ms, finish reason, how it ended (default text)\n"
           "      --enable-prefix-caching, --no-enable-prefix-caching\n"
           "                                       automatic prefix caching (vLLM's flags): a request\n"
           "                                       starts with the cached KV of the longest prefix of\n"
           "                                       its prompt that an earlier request computed (whole\n"
           "                                       blocks of block-size x DCP tokens) and prefills the\n"
           "                                       rest; the tokens are the same (default on; under\n"
           "                                       mpiexec every process keeps the same cache)\n"
           "      --kv-offloading-size GIB         KV offload (vLLM's flag): host memory for cached\n"
           "                                       blocks evicted from the device pages; a later hit\n"
           "                                       copies them back instead of prefilling (default 0:\n"
           "                                       off; needs prefix caching; under mpiexec the size\n"
           "                                       is the whole TP group's, each process holding its\n"
           "                                       ranks' share)\n"
           "      --kv-offloading-backend native   the offload's backend (default native: host-visible\n"
           "                                       memory of each rank's device, copies on its queue)\n"
           "\n"
           "Request fields: model, prompt (completions) or messages (chat), max_tokens (chat also\n"
           "max_completion_tokens), temperature, top_p, top_k, min_p, seed (-1: a random seed),\n"
           "logit_bias, presence_penalty, frequency_penalty, repetition_penalty, min_tokens, stream,\n"
           "stream_options (with stream only), stop, stop_token_ids, include_stop_str_in_output,\n"
           "ignore_eos, logprobs (completions: 0 .. 20; chat: a bool, with top_logprobs 0 .. 20),\n"
           "n (choices, 1 .. 16: the prompt prefilled once, choice i seeded from (seed, i)),\n"
           "response_format (text, json_object, or json_schema with type, enum, const, required,\n"
           "properties, additionalProperties, items, minItems, maxItems: constrained decoding; at most\n"
           "4 whitespace bytes between tokens; max_tokens may cut the value: finish_reason length),\n"
           "user, prompt_logprobs (-1 .. 20: vLLM's per prompt token {id: {logprob, rank,\n"
           "decoded_token}}, -1 the whole vocabulary (see --max-prompt-logprobs-entries); in the choice\n"
           "for completions, beside the choices for chat, in a stream's first chunk; max_tokens may be\n"
           "0); completions also echo (the prompt first; with logprobs its tokens' entries first, the\n"
           "first null; max_tokens may be 0), both with n 1 only; the prompt's logprobs are the\n"
           "raw model's (no bias, penalties or temperature). Any other field is refused with a 400\n"
           "naming it; known ones this server does not implement (best_of, suffix, tools, guided\n"
           "decoding, ...) are accepted only with their neutral value (best_of: 1, suffix: \"\", ...).\n"
           "\n"
           "Model and parallelism (as dcp-vk-run):\n"
           "  -m, --model FILE                     GGUF model (required)\n"
           "  -c, --ctx-size N                     context tokens per request, 0 = the model's, at\n"
           "                                       most 4096 (default 0)\n"
           "  -n, --n-predict N                    max_tokens of requests that give none (default 64)\n"
           "      --temp T, --top-k K, --top-p P, --seed S\n"
           "                                       sampling of requests that give none (defaults\n"
           "                                       0.8, 40, 0.95, 0; requests usually give their own)\n"
           "      --tensor-parallel-size T         TP ranks (default 1)\n"
           "      --decode-context-parallel-size D DCP ranks per group, divides T (default 1)\n"
           "      --dcp-comm-backend a2a|ag_rs     DCP exchange pattern (default a2a)\n"
           "      --cp-kv-cache-interleave-size I  tokens per rank in turn, divides the block size\n"
           "                                       (default 1)\n"
           "      --dcp-q-replicate                each rank computes its group's queries itself\n"
           "                                       (default off)\n"
           "      --block-size B                   tokens per KV page (default 16)\n"
           "      --kv-dtype f16|f32|q8_0          KV cache element type (default f16)\n"
           "      --prefill-chunk N                rows per step: decode rows of the running\n"
           "                                       requests plus prompt chunks (default 128)\n"
           "      --speculative-config JSON        speculative decoding, vLLM's fields: {\"method\":\n"
           "                                       \"ngram\", \"num_speculative_tokens\": K,\n"
           "                                       \"prompt_lookup_max\": N, \"prompt_lookup_min\": M}\n"
           "                                       drafts from the request's own tokens, or {\"model\":\n"
           "                                       \"draft.gguf\", \"num_speculative_tokens\": K} a draft\n"
           "                                       model of the same vocabulary on the same devices and\n"
           "                                       TP/DCP layout. K + 1 rows of each request are verified\n"
           "                                       in one step; greedy requests give exactly the tokens\n"
           "                                       they give without it, sampled ones the same\n"
           "                                       distribution (one process only; default none)\n"
           "      --devices LIST                   Vulkan devices, e.g. 0,0,0,0 (default\n"
           "                                       $DCP_VK_DEVICES, else every device once)\n"
           "      --version                        print the library version\n"
           "  -h, --help                           this help\n"
           "\n"
           "Under `mpiexec -n P` the TP ranks spread over the processes as in dcp-vk-run; process 0\n"
           "serves HTTP and schedules, the others run the same steps.\n",
           prog);
}

int serve_parse(int argc, char **argv, serve_options *o)
{
    const char *prog = argv[0];
    const char *env_key = getenv("DCP_VK_API_KEY");
    *o = (serve_options){.host = "127.0.0.1", .port = 8080, .api_key = env_key && *env_key ? env_key : NULL,
                         .served_name = NULL, .chat_template = NULL, .max_seqs = 16, .kv_pages = 0,
                         .max_body = 1u << 20, .max_prompt = 0, .max_tokens_limit = 0,
                         .max_plp_entries = 1u << 18, .max_queued = 64,
                         .shutdown_timeout = 30, .http_threads = 4, .max_connections = 4096,
                         .max_conns_per_ip = 128, .idle_timeout = 15, .request_timeout = 10, .max_header = 16384,
                         .allowed_origins = NULL, .log_json = false, .prefix_caching = true,
                         .kv_offload_bytes = 0,
                         .help = 0, .version = 0};
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return DCP_EXIT_RUNTIME;
    int nrest = 0, rc = 0;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
#define IS(s) (strcmp(a, s) == 0)
        static const char *const own[] = {"--host", "--port", "--api-key", "--served-model-name", "--chat-template",
                                          "--max-seqs", "--kv-pages", "--max-body-bytes", "--max-prompt-tokens",
                                          "--max-tokens-limit", "--max-prompt-logprobs-entries", "--max-queued", "--shutdown-timeout",
                                          "--http-threads", "--max-connections", "--max-connections-per-ip",
                                          "--idle-timeout", "--request-timeout", "--max-header-bytes",
                                          "--allowed-origins", "--log-format", "--kv-offloading-size",
                                          "--kv-offloading-backend", NULL};
        int mine = 0;
        for (int k = 0; own[k]; k++) mine |= IS(own[k]);
        if (IS("-p") || IS("--prompt") || IS("--json")) {
            rc = bad(prog, "option %s is dcp-vk-run's: requests carry their prompts here (see --help)", a);
            break;
        }
        if (IS("-h") || IS("--help")) {
            o->help = 1;
            continue;
        }
        if (IS("--enable-prefix-caching") || IS("--no-enable-prefix-caching")) {
            o->prefix_caching = IS("--enable-prefix-caching");
            continue;
        }
        if (!mine) { /* dcp-vk-run's (or unknown: run_parse says so) */
            rest[nrest++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            rc = bad(prog, "option %s needs a value (see --help)", a);
            break;
        }
        const char *v = argv[++i];
        if (IS("--host")) o->host = v;
        else if (IS("--port")) rc = parse_u32(prog, a, v, 0, 65535, &o->port);
        else if (IS("--api-key")) o->api_key = v;
        else if (IS("--served-model-name")) o->served_name = v;
        else if (IS("--chat-template")) {
            o->chat_template = v;
            if (dcp_chat_template_from_name(v) == DCP_CHAT_UNKNOWN)
                rc = bad(prog, "option --chat-template: '%s' is not a known family (see --help for the names)", v);
        } else if (IS("--max-seqs")) rc = parse_u32(prog, a, v, 1, 4096, &o->max_seqs);
        else if (IS("--kv-pages")) rc = parse_u32(prog, a, v, 0, 1u << 30, &o->kv_pages);
        else if (IS("--max-body-bytes")) rc = parse_u32(prog, a, v, 64, 1u << 30, &o->max_body);
        else if (IS("--max-prompt-tokens")) rc = parse_u32(prog, a, v, 0, 1u << 24, &o->max_prompt);
        else if (IS("--max-tokens-limit")) rc = parse_u32(prog, a, v, 0, 1u << 24, &o->max_tokens_limit);
        else if (IS("--max-prompt-logprobs-entries")) rc = parse_u32(prog, a, v, 1, 1u << 30, &o->max_plp_entries);
        else if (IS("--max-queued")) rc = parse_u32(prog, a, v, 0, 1u << 20, &o->max_queued);
        else if (IS("--shutdown-timeout")) rc = parse_u32(prog, a, v, 0, 86400, &o->shutdown_timeout);
        else if (IS("--http-threads")) rc = parse_u32(prog, a, v, 1, 256, &o->http_threads);
        else if (IS("--max-connections")) rc = parse_u32(prog, a, v, 16, 1u << 20, &o->max_connections);
        else if (IS("--max-connections-per-ip")) rc = parse_u32(prog, a, v, 0, 1u << 20, &o->max_conns_per_ip);
        else if (IS("--idle-timeout")) rc = parse_u32(prog, a, v, 1, 86400, &o->idle_timeout);
        else if (IS("--request-timeout")) rc = parse_u32(prog, a, v, 1, 86400, &o->request_timeout);
        else if (IS("--max-header-bytes")) rc = parse_u32(prog, a, v, 1024, 65536, &o->max_header);
        else if (IS("--allowed-origins")) {
            o->allowed_origins = v;
            if (!*v || (strchr(v, '*') && strcmp(v, "*")))
                rc = bad(prog, "option --allowed-origins: '%s' is not '*' or a comma-separated list of origins "
                         "(e.g. https://app.example.com,http://localhost:3000)", v);
        } else if (IS("--log-format")) {
            if (strcmp(v, "text") && strcmp(v, "json"))
                rc = bad(prog, "option --log-format: '%s' is not allowed (allowed: text json)", v);
            o->log_json = strcmp(v, "json") == 0;
        } else if (IS("--kv-offloading-size")) {
            char *end;
            errno = 0;
            const double gib = strtod(v, &end);
            if (!*v || *end || errno || !(gib >= 0.0 && gib <= 65536.0)) /* !(...) also refuses NaN */
                rc = bad(prog, "option --kv-offloading-size: '%s' is not a size in GiB in [0, 65536] (e.g. 8 or 0.5)", v);
            else o->kv_offload_bytes = (uint64_t)(gib * (double)(1ull << 30));
        } else if (IS("--kv-offloading-backend")) {
            if (strcmp(v, "native"))
                rc = bad(prog, "option --kv-offloading-backend: '%s' is not allowed (allowed: native)", v);
        }
#undef IS
    }
    if (!rc && o->kv_offload_bytes && !o->prefix_caching)
        rc = bad(prog, "option --kv-offloading-size: offloads the prefix cache's blocks, and "
                 "--no-enable-prefix-caching turned that off");
    if (!rc) rc = run_parse(nrest, rest, &o->run);
    if (!rc && o->run.help) o->help = 1;
    if (!rc && o->run.version) o->version = 1;
    if (!rc && !o->help && !o->version && !o->run.model) rc = bad(prog, "-m MODEL.gguf is required (see --help)");
    free(rest);
    return rc;
}

void serve_quiet(int quiet) { quiet_msgs = quiet; }

/* Chat prompts: the common chat template families, recognised from a model's
 * `tokenizer.chat_template` text (a Jinja template, which dcp-vk does not execute: the family is
 * recognised by the markers it contains, the way llama.cpp does), and rendered by our own code.
 * Families: chatml, llama-2 (and its system-prompt, BOS-in-history and stripped variants),
 * llama-3, phi-3, mistral (v1, v3, v3-tekken, v7), gemma, deepseek (coder), deepseek-v2 (and
 * deepseek-llm chat), deepseek-v3, zephyr.
 *
 * The rendered text contains the family's special markers as text ("<|im_start|>"): tokenize it
 * with DCP_TOKENIZE_PARSE_SPECIAL, and with DCP_TOKENIZE_ADD_BOS when the vocabulary wants BOS (the
 * renderings do not include the first BOS). Thread-safe (no state). */
#ifndef DCPVK_CHAT_H
#define DCPVK_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "dcpvk/export.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_chat_template {
    DCP_CHAT_UNKNOWN = 0,
    DCP_CHAT_CHATML,
    DCP_CHAT_LLAMA2,           /* [INST] ... [/INST], no system prompt */
    DCP_CHAT_LLAMA2_SYS,       /* with <<SYS>> */
    DCP_CHAT_LLAMA2_SYS_BOS,   /* and <s> before each later [INST] */
    DCP_CHAT_LLAMA2_SYS_STRIP, /* and contents stripped of surrounding white space */
    DCP_CHAT_MISTRAL_V1,
    DCP_CHAT_MISTRAL_V3,
    DCP_CHAT_MISTRAL_V3_TEKKEN,
    DCP_CHAT_MISTRAL_V7,
    DCP_CHAT_PHI3,
    DCP_CHAT_LLAMA3,
    DCP_CHAT_GEMMA,
    DCP_CHAT_DEEPSEEK,         /* deepseek-coder instruct (### Instruction / ### Response) */
    DCP_CHAT_DEEPSEEK2,        /* DeepSeek-V2, deepseek-llm chat (User: / Assistant:) */
    DCP_CHAT_DEEPSEEK3,        /* DeepSeek-V3 (<｜User｜> / <｜Assistant｜>) */
    DCP_CHAT_ZEPHYR,
    DCP_CHAT_COUNT
} dcp_chat_template;

/* The family of a template text, or of a family name (dcp_chat_template_name's, e.g. "chatml",
 * "llama3"); DCP_CHAT_UNKNOWN when neither (NULL included). */
DCP_API dcp_chat_template dcp_chat_template_detect(const char *tmpl);
/* The family of a name only; DCP_CHAT_UNKNOWN for another name. */
DCP_API dcp_chat_template dcp_chat_template_from_name(const char *name);
/* "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
 * "mistral-v3", "mistral-v3-tekken", "mistral-v7", "phi3", "llama3", "gemma", "deepseek",
 * "deepseek2", "deepseek3", "zephyr"; "unknown". */
DCP_API const char *dcp_chat_template_name(dcp_chat_template t);
/* The text of the marker that ends an assistant turn ("<|im_end|>", "<|eot_id|>", ...), or NULL
 * when the family ends turns with the vocabulary's EOS. A server stops generation at its token. */
DCP_API const char *dcp_chat_template_end_of_turn(dcp_chat_template t);

typedef struct dcp_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} dcp_chat_message;

/* Renders messages [n] in family t; with add_assistant, ends with the opening of the assistant's
 * turn (the generation prompt). *out receives a malloc'd NUL-terminated string of *len bytes
 * (free() it). DCP_ERR_UNSUPPORTED for DCP_CHAT_UNKNOWN; DCP_ERR_INVALID_ARGUMENT for a role other
 * than the three (naming it and the message index) or no messages; DCP_ERR_OUT_OF_MEMORY. */
DCP_API dcp_status dcp_chat_apply(dcp_chat_template t, const dcp_chat_message *messages, size_t n, bool add_assistant,
                                  char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif

/* Chat template families (include/dcpvk/chat.h): recognition from template texts (markers of each
 * family; the real phi-3 template of the phi-3 vocabulary file) and from names, the rendering of one
 * conversation (system, user, assistant, user with surrounding spaces) in every family, written out
 * by hand from the families' published formats, and refusals. Host only. */
#include <stdlib.h>
#include <string.h>

#include "dcpvk/chat.h"
#include "dcpvk/gguf.h"
#include "testutil.h"

#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DS_USER "<\xef\xbd\x9c" "User\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

static void test_detect(void **state)
{
    (void)state;
    static const struct {
        const char *tmpl;
        dcp_chat_template want;
    } cases[] = {
        {"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}",
         DCP_CHAT_CHATML},
        {"{{'<|im_start|>' + m['role'] + '<|im_sep|>'}}", DCP_CHAT_UNKNOWN}, /* phi-4 */
        {"{{ '[SYSTEM_PROMPT]' + system }}{{ '[INST]' + content + '[/INST]' }}", DCP_CHAT_MISTRAL_V7},
        {"{{ bos_token }}{% if system_message %}{{ ' [INST] ' + system_message }}{% endif %}", DCP_CHAT_MISTRAL_V1},
        {"{{ '[AVAILABLE_TOOLS]' }}{{ '[INST]' + message['content'] + '[/INST]' }}", DCP_CHAT_MISTRAL_V3},
        {"{{ \"[AVAILABLE_TOOLS]\" }}{{ \"[INST]\" + message[\"content\"] + \"[/INST]\" }}",
         DCP_CHAT_MISTRAL_V3_TEKKEN},
        {"{{ '[INST] ' + message['content'] + ' [/INST]' }}", DCP_CHAT_LLAMA2},
        {"{{ '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}{{ '[INST] ' + content + ' [/INST]' }}",
         DCP_CHAT_LLAMA2_SYS},
        {"{{ bos_token + '[INST] ' + content + ' [/INST]' }}{{ '<<SYS>>' }}", DCP_CHAT_LLAMA2_SYS_BOS},
        {"{{ '[INST] ' + message['content'].strip() + ' [/INST]' }}{{ content.strip() }}<<SYS>>",
         DCP_CHAT_LLAMA2_SYS_STRIP},
        {"mistral", DCP_CHAT_LLAMA2}, /* a text starting so, without the markers of the newer ones */
        {"{{'<|user|>\\n' + message['content'] + '<|endoftext|>\\n'}}", DCP_CHAT_ZEPHYR},
        {"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}", DCP_CHAT_GEMMA},
        {"{{'### Instruction:\\n' + message['content'] + '\\n'}}{{'<|EOT|>'}}", DCP_CHAT_DEEPSEEK},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", DCP_CHAT_LLAMA3},
        {"{{ 'User: ' + message['content'] + '\\n\\n' }}{{ 'Assistant: ' + message['content'] + eos_token }}",
         DCP_CHAT_DEEPSEEK2},
        {"{{'" DS_USER "' + content}}{{'" DS_ASSISTANT "' + content + '" DS_EOS "'}}", DCP_CHAT_DEEPSEEK3},
        {"{{ messages | tojson }}", DCP_CHAT_UNKNOWN},
        {"", DCP_CHAT_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dcp_chat_template got = dcp_chat_template_detect(cases[i].tmpl);
        if (got != cases[i].want)
            fail_msg("template %zu '%s': %s, want %s", i, cases[i].tmpl, dcp_chat_template_name(got),
                     dcp_chat_template_name(cases[i].want));
    }
    assert_int_equal(dcp_chat_template_detect(NULL), DCP_CHAT_UNKNOWN);
    for (int t = DCP_CHAT_UNKNOWN + 1; t < DCP_CHAT_COUNT; t++) {
        assert_int_equal(dcp_chat_template_from_name(dcp_chat_template_name((dcp_chat_template)t)), t);
        assert_int_equal(dcp_chat_template_detect(dcp_chat_template_name((dcp_chat_template)t)), t);
    }
    assert_int_equal(dcp_chat_template_from_name("chatml2"), DCP_CHAT_UNKNOWN);
    /* A real template: the phi-3 vocabulary file's. */
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open(dcp_test_data_path("ggml-vocab-phi-3.gguf"), &g), DCP_OK);
    const char *tmpl;
    size_t len;
    assert_int_equal(dcp_gguf_get_string(g, "tokenizer.chat_template", &tmpl, &len), DCP_OK);
    assert_int_equal(dcp_chat_template_detect(tmpl), DCP_CHAT_PHI3);
    dcp_gguf_close(g);
    assert_string_equal(dcp_chat_template_end_of_turn(DCP_CHAT_CHATML), "<|im_end|>");
    assert_string_equal(dcp_chat_template_end_of_turn(DCP_CHAT_LLAMA3), "<|eot_id|>");
    assert_string_equal(dcp_chat_template_end_of_turn(DCP_CHAT_PHI3), "<|end|>");
    assert_null(dcp_chat_template_end_of_turn(DCP_CHAT_LLAMA2));
}

static const dcp_chat_message conv[] = {
    {"system", "You are kind."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", " How are you? "}};

static void test_render(void **state)
{
    (void)state;
    static const struct {
        dcp_chat_template t;
        const char *want;
    } cases[] = {
        {DCP_CHAT_CHATML, "<|im_start|>system\nYou are kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n How are you? <|im_end|>\n"
                          "<|im_start|>assistant\n"},
        {DCP_CHAT_LLAMA2, "[INST] You are kind.\nHi [/INST]Hello!</s>[INST]  How are you?  [/INST]"},
        {DCP_CHAT_LLAMA2_SYS, "[INST] <<SYS>>\nYou are kind.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST]  How are you?  "
                              "[/INST]"},
        {DCP_CHAT_LLAMA2_SYS_BOS, "[INST] <<SYS>>\nYou are kind.\n<</SYS>>\n\nHi [/INST]Hello!</s><s>[INST]  How are "
                                  "you?  [/INST]"},
        {DCP_CHAT_LLAMA2_SYS_STRIP, "[INST] <<SYS>>\nYou are kind.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] How are "
                                    "you? [/INST]"},
        {DCP_CHAT_MISTRAL_V1, " [INST] You are kind.\n\nHi [/INST] Hello!</s> [INST]  How are you?  [/INST]"},
        {DCP_CHAT_MISTRAL_V3, "[INST] You are kind.\n\nHi[/INST] Hello!</s>[INST]  How are you? [/INST]"},
        {DCP_CHAT_MISTRAL_V3_TEKKEN, "[INST]You are kind.\n\nHi[/INST]Hello!</s>[INST] How are you? [/INST]"},
        {DCP_CHAT_MISTRAL_V7, "[SYSTEM_PROMPT] You are kind.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST]  How "
                              "are you? [/INST]"},
        {DCP_CHAT_PHI3, "<|system|>\nYou are kind.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
                        "<|user|>\n How are you? <|end|>\n<|assistant|>\n"},
        {DCP_CHAT_ZEPHYR, "<|system|>\nYou are kind.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\n"
                          "Hello!<|endoftext|>\n<|user|>\n How are you? <|endoftext|>\n<|assistant|>\n"},
        {DCP_CHAT_LLAMA3, "<|start_header_id|>system<|end_header_id|>\n\nYou are kind.<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {DCP_CHAT_GEMMA, "<start_of_turn>user\nYou are kind.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
                         "<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n"},
        {DCP_CHAT_DEEPSEEK, "You are kind.### Instruction:\nHi\n### Response:\nHello!\n<|EOT|>\n### Instruction:\n How "
                            "are you? \n### Response:\n"},
        {DCP_CHAT_DEEPSEEK2, "You are kind.\n\nUser: Hi\n\nAssistant: Hello!" DS_EOS "User:  How are you? \n\n"
                             "Assistant:"},
        {DCP_CHAT_DEEPSEEK3, "You are kind.\n\n" DS_USER "Hi" DS_ASSISTANT "Hello!" DS_EOS DS_USER " How are you? "
                             DS_ASSISTANT},
    };
    assert_int_equal(sizeof cases / sizeof cases[0], DCP_CHAT_COUNT - 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        size_t len;
        assert_int_equal(dcp_chat_apply(cases[i].t, conv, 4, true, &out, &len), DCP_OK);
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("%s:\n got '%s'\nwant '%s'", dcp_chat_template_name(cases[i].t), out, cases[i].want);
        assert_int_equal(len, strlen(out));
        free(out);
    }
    /* Without the generation prompt. */
    char *out;
    size_t len;
    assert_int_equal(dcp_chat_apply(DCP_CHAT_CHATML, conv + 1, 1, false, &out, &len), DCP_OK);
    assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n");
    free(out);
}

static void test_refused(void **state)
{
    (void)state;
    char *out;
    size_t len;
    assert_int_equal(dcp_chat_apply(DCP_CHAT_UNKNOWN, conv, 4, true, &out, &len), DCP_ERR_UNSUPPORTED);
    assert_null(out);
    assert_int_equal(dcp_chat_apply(DCP_CHAT_CHATML, conv, 0, true, &out, &len), DCP_ERR_INVALID_ARGUMENT);
    const dcp_chat_message bad[] = {{"user", "a"}, {"robot", "b"}};
    assert_int_equal(dcp_chat_apply(DCP_CHAT_LLAMA3, bad, 2, true, &out, &len), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "message 1 has role 'robot'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* chat.h — renders an OpenAI chat request (messages, tools, kwargs) into the Qwen3.5/3.6 prompt
 * text, natively in C, byte-identical to the model's Jinja chat template rendered the Hugging
 * Face way (the Qwen3.6 chat template (docs/chat-format.md), docs/qwen35.md §5.2).
 * Owns: nothing global; every call is pure (JSON in, a snug_malloc'd string out).
 * Invariant: whatever the template raises on (raise_exception or a Jinja type error), the
 * renderer rejects with SNUG_ERR_INVALID and the template's message — the server answers 400.
 * Read next: outparse.h (the other direction: parsing what the model writes), chat.c.
 */
#ifndef SNUG_SERVER_CHAT_H
#define SNUG_SERVER_CHAT_H

#include "snug.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Template switches (the template's kwargs). */
struct snug_chat_opts {
    /* false renders the generation prompt as "<think>\n\n</think>\n\n" (thinking off);
     * true as "<think>\n" (the model reasons first). Template: `enable_thinking is false`. */
    bool enable_thinking;
    /* true keeps the reasoning of every assistant turn in the history; false keeps only the
     * reasoning of turns after the last real user query (the template's default). */
    bool preserve_thinking;
    /* append "<|im_start|>assistant\n" + the thinking prefix. */
    bool add_generation_prompt;
    /* "Picture N: " / "Video N: " before each image / video placeholder (N counts over the
     * conversation). Template: `if add_vision_id` (Jinja truth of the kwarg); default off. */
    bool add_vision_id;
    /* continue the final assistant message: it is rendered open (no "<|im_end|>"), no generation
     * prompt follows, and the model's output continues its text (vLLM's continue_final_message,
     * Anthropic's assistant prefill). The final message must be an assistant turn. */
    bool continue_final;
};

/* Defaults: enable_thinking = `thinking_default` (the server flag), preserve_thinking false,
 * add_generation_prompt true. */
struct snug_chat_opts snug_chat_default_opts(bool thinking_default);

/* Read the request's overrides into *opts (which holds the defaults on entry):
 *   "add_generation_prompt": bool                       (top level, as vLLM)
 *   "chat_template_kwargs": {"enable_thinking": bool, "preserve_thinking": bool,
 *                            "add_vision_id": any (Jinja truth)}
 *   "continue_final_message": bool                      (top level, as vLLM)
 * Jinja semantics are kept: thinking is off only for a JSON `false`, preserve_thinking is on
 * only for a JSON `true`. A chat_template_kwargs that is not an object → SNUG_ERR_INVALID. */
int snug_chat_opts_from_request(struct snug_chat_opts *opts, const json_t *request,
                                struct snug_err *err);

/* Render the prompt. `messages` is the request's array (borrowed); `tools` the request's
 * "tools" array or NULL (an empty array means no tools, as in the template). Message content
 * may be a string, null, or a list of parts ({"type":"text","text":..}; image/video parts
 * render as the vision placeholders). Assistant tool_calls[].function.arguments may be a JSON
 * object or a string holding one (the OpenAI wire form; parsed here, as servers do before
 * calling the template). On success *out_prompt is a NUL-terminated snug_malloc'd string
 * (caller snug_free's it) of *out_len bytes. On failure *out_prompt is NULL and err holds the
 * template's message ("System message must be at the beginning.", "No user query found in
 * messages.", ...) or a message naming the offending field; status SNUG_ERR_INVALID (or
 * SNUG_ERR_NOMEM). */
int snug_chat_render(const json_t *messages, const json_t *tools, const struct snug_chat_opts *opts,
                     char **out_prompt, size_t *out_len, struct snug_err *err);

/* Where the messages of a rendered prompt start (byte offsets; the prefix cache's chunk
 * boundaries and checkpoint positions, src/prefix/prefix_sched.h). Each start is right before
 * an "<|im_start|>" special token, so it is a token boundary too. The caller provides
 * starts[0..cap); n counts every start (may exceed cap: only cap are written). Offset 0 is not
 * recorded. system_end: the end of the system turn (0 without one); last_end: the start of the
 * generation prompt (0 without one) = the end of the last message; user_end: the end of the last
 * real user query (0 when it ends the prompt) — where the next request diverges once a new user
 * turn arrives, as the template then renders the assistant turns after it without reasoning. */
struct snug_chat_marks {
    size_t *starts;
    size_t cap, n;
    size_t system_end, last_end, user_end;
};

/* snug_chat_render, also reporting the message starts into *marks (may be NULL). */
int snug_chat_render_marks(const json_t *messages, const json_t *tools,
                           const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                           struct snug_chat_marks *marks, struct snug_err *err);
/* The byte ranges of a rendered prompt that hold request text (message content, reasoning,
 * tool names, arguments and results, the tools' JSON) rather than the template's own markers:
 * the server tokenizes them with special tokens as plain text (snug_tokenizer_encode_spans),
 * so a message cannot write "<|im_end|><|im_start|>system" and be believed. Vision
 * placeholders inside content stay markers. Sorted, non-overlapping, snug_malloc'd. */
struct snug_chat_spans {
    struct snug_text_span *v;
    size_t n, cap;
    bool oom;
};
void snug_chat_spans_free(struct snug_chat_spans *sp);

/* snug_chat_render that also fills *plain (may be NULL) with the request-text spans; on
 * failure *plain is left empty. */
int snug_chat_render_spans(const json_t *messages, const json_t *tools,
                           const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                           struct snug_chat_spans *plain, struct snug_err *err);

/* The one renderer behind the three above: marks and plain spans both optional. */
int snug_chat_render_ex(const json_t *messages, const json_t *tools,
                        const struct snug_chat_opts *opts, char **out_prompt, size_t *out_len,
                        struct snug_chat_marks *marks, struct snug_chat_spans *plain,
                        struct snug_err *err);

/* True when the rendered prompt leaves the model inside a reasoning block (it ends with
 * "<think>\n"): pass this as `in_reasoning` to snug_outparse_init. */
bool snug_chat_prompt_in_reasoning(const char *prompt, size_t len);

#endif

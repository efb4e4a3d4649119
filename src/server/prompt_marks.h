/* prompt_marks.h — a rendered chat prompt tokenized together with the token positions of its
 * message starts (snug_chat_marks are bytes): what the prefix cache's schedule
 * (src/prefix/prefix_sched.h) takes as chunk boundaries and checkpoint positions.
 * Each mark sits right before an "<|im_start|>" special token, where the tokenizer splits
 * anyway, so the prompt is encoded segment by segment between marks and the ids are exactly
 * those of encoding it whole (tests/unit/test_server_marks.c checks this on the real
 * vocabulary).
 * Owns: nothing (caller arrays).
 * Read next: chat.h (the marks), src/prefix/prefix_sched.h.
 */
#ifndef SNUG_SERVER_PROMPT_MARKS_H
#define SNUG_SERVER_PROMPT_MARKS_H

#include "server/chat.h"
#include "tokenizer/tokenizer.h"

/* Token positions of a marked prompt. starts[0..n) ascending (n may exceed cap as in
 * snug_chat_marks; only the first cap are written). */
struct snug_prompt_marks {
    int32_t *starts;
    int32_t cap, n;
    int32_t system_end, last_end, user_end; /* 0 when absent (chat.h snug_chat_marks) */
};

/* Encode prompt[0..len) (special tokens parsed) into ids[0..cap) (*n_ids the count; as
 * snug_tokenizer_encode: SNUG_ERR_BUDGET with the count needed when it does not fit) and map
 * the byte marks to token positions in *out. Marks past the written starts (n > cap) are
 * ignored. */
int snug_prompt_encode_marked(const struct snug_tokenizer *tok, const char *prompt, size_t len,
                              const struct snug_chat_marks *marks, snug_token *ids, size_t cap,
                              size_t *n_ids, struct snug_prompt_marks *out, struct snug_err *err);
/* The same with the request text's plain spans (chat.h snug_chat_spans; NULL = none): inside
 * them special-token text is encoded as plain text (snug_tokenizer_encode_spans). */
int snug_prompt_encode_marked_spans(const struct snug_tokenizer *tok, const char *prompt,
                                    size_t len, const struct snug_chat_marks *marks,
                                    const struct snug_chat_spans *plain, snug_token *ids,
                                    size_t cap, size_t *n_ids, struct snug_prompt_marks *out,
                                    struct snug_err *err);

#endif /* SNUG_SERVER_PROMPT_MARKS_H */

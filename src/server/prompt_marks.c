/* prompt_marks.c — segment-wise encoding of a marked prompt (see prompt_marks.h). */
#include "server/prompt_marks.h"

#include "core/core.h"

int snug_prompt_encode_marked(const struct snug_tokenizer *tok, const char *prompt, size_t len,
                              const struct snug_chat_marks *marks, snug_token *ids, size_t cap,
                              size_t *n_ids, struct snug_prompt_marks *out, struct snug_err *err) {
    size_t n_marks = marks ? SNUG_MIN(marks->n, marks->cap) : 0;
    size_t total = 0, from = 0;
    bool over = false;
    if (out) out->n = out->system_end = out->last_end = 0;
    for (size_t k = 0; k <= n_marks; k++) {
        size_t to = k < n_marks ? marks->starts[k] : len;
        if (to < from || to > len) return snug_err_set(err, SNUG_ERR_INVALID, "bad prompt mark");
        size_t got = 0;
        size_t room = over || total >= cap ? 0 : cap - total;
        int rc = snug_tokenizer_encode(tok, prompt + from, to - from, true,
                                       room ? ids + total : NULL, room, &got, err);
        if (rc == SNUG_ERR_BUDGET || (rc == SNUG_OK && got > room))
            over = true;
        else if (rc)
            return rc;
        /* token position of this byte mark */
        total += got;
        if (k < n_marks && out) {
            if (out->n < out->cap) out->starts[out->n] = (int32_t)total;
            out->n++;
            if (to == marks->system_end) out->system_end = (int32_t)total;
            if (to == marks->last_end) out->last_end = (int32_t)total;
        }
        from = to;
    }
    if (out && marks && marks->system_end && !out->system_end) {
        /* the system turn ends where the first message starts; without messages at the end */
        if (marks->system_end == len) out->system_end = (int32_t)total;
    }
    *n_ids = total;
    if (over)
        return snug_err_set(err, SNUG_ERR_BUDGET, "prompt of %zu tokens does not fit %zu", total,
                            cap);
    return SNUG_OK;
}

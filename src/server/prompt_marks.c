/* prompt_marks.c — segment-wise encoding of a marked prompt (see prompt_marks.h). */
#include "server/prompt_marks.h"

#include "core/core.h"

int snug_prompt_encode_marked(const struct snug_tokenizer *tok, const char *prompt, size_t len,
                              const struct snug_chat_marks *marks, snug_token *ids, size_t cap,
                              size_t *n_ids, struct snug_prompt_marks *out, struct snug_err *err) {
    return snug_prompt_encode_marked_spans(tok, prompt, len, marks, NULL, ids, cap, n_ids, out,
                                           err);
}

/* Encode prompt[from, to) with the plain spans that fall in it, shifted to the segment (spans
 * never cross a mark: marks sit before template markers, outside request text). */
static int encode_segment(const struct snug_tokenizer *tok, const char *prompt, size_t from,
                          size_t to, const struct snug_chat_spans *plain, size_t *span_i,
                          snug_token *ids, size_t room, size_t *got, struct snug_err *err) {
    if (!plain || plain->n == 0)
        return snug_tokenizer_encode(tok, prompt + from, to - from, true, ids, room, got, err);
    struct snug_text_span local[64] = {{0, 0}};
    size_t k = 0, first = *span_i;
    while (*span_i < plain->n && plain->v[*span_i].off < to) (*span_i)++;
    size_t n = *span_i - first;
    struct snug_text_span *sp = n <= 64 ? local : snug_malloc(n * sizeof *sp);
    if (!sp) return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory tokenizing the prompt");
    for (size_t i = first; i < *span_i; i++) {
        size_t a = SNUG_MAX(plain->v[i].off, from);
        size_t b = SNUG_MIN(plain->v[i].off + plain->v[i].len, to);
        if (b > a) sp[k++] = (struct snug_text_span){a - from, b - a};
    }
    /* a span running past `to` continues in the next segment */
    if (*span_i > first && plain->v[*span_i - 1].off + plain->v[*span_i - 1].len > to) (*span_i)--;
    int rc = snug_tokenizer_encode_spans(tok, prompt + from, to - from, sp, k, ids, room, got, err);
    if (sp != local) snug_free(sp);
    return rc;
}

int snug_prompt_encode_marked_spans(const struct snug_tokenizer *tok, const char *prompt,
                                    size_t len, const struct snug_chat_marks *marks,
                                    const struct snug_chat_spans *plain, snug_token *ids,
                                    size_t cap, size_t *n_ids, struct snug_prompt_marks *out,
                                    struct snug_err *err) {
    size_t span_i = 0;
    size_t n_marks = marks ? SNUG_MIN(marks->n, marks->cap) : 0;
    size_t total = 0, from = 0;
    bool over = false;
    if (out) out->n = out->system_end = out->last_end = out->user_end = 0;
    for (size_t k = 0; k <= n_marks; k++) {
        size_t to = k < n_marks ? marks->starts[k] : len;
        if (to < from || to > len) return snug_err_set(err, SNUG_ERR_INVALID, "bad prompt mark");
        size_t got = 0;
        size_t room = over || total >= cap ? 0 : cap - total;
        int rc = encode_segment(tok, prompt, from, to, plain, &span_i, room ? ids + total : NULL,
                                room, &got, err);
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
            if (to == marks->user_end) out->user_end = (int32_t)total;
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

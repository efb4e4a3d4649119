/* outparse.h — the incremental parser for what a Qwen3.5/3.6 model writes: it splits the
 * detokenized text stream into reasoning, content and tool calls, as events.
 * Formats (docs/qwen35.md §5.2): reasoning ends at "</think>" (it starts inside
 * reasoning when the prompt ended with "<think>\n"); tool calls are
 *   <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>\n</tool_call>
 * A parameter value is raw text and may hold tag-like text (a patch that edits such code):
 * "</parameter>" ends it after a newline, or elsewhere only before the next tag or the end.
 * Drift tolerated: missing closing tags at the end of generation (or before the next tag when
 * it opens a line), a
 * JSON {"name":..,"arguments":..} body inside <tool_call>, "<function=" without "<tool_call>",
 * a "<tool_call>" inside reasoning (closes it), no newline after "</think>", extra whitespace.
 * Invariants: the events do not depend on how the text is split into pieces; no tag, and no
 * prefix of one, ever reaches a content run ("<" is held back until resolved); reasoning never
 * contains "</think>"; every argument string is a JSON object; leading/trailing whitespace of
 * each reasoning/content run is dropped and content runs (the text between tool calls or
 * dropped tags) are joined by one "\n", so the concatenated content holds no tag either; text
 * events never split a UTF-8 sequence (given valid UTF-8 in). Read next: outparse.c; chat.h for the
 * prompt side.
 */
#ifndef SNUG_SERVER_OUTPARSE_H
#define SNUG_SERVER_OUTPARSE_H

#include "snug.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum snug_outparse_kind {
    SNUG_OUTPARSE_REASONING = 0,  /* text: a reasoning delta */
    SNUG_OUTPARSE_CONTENT = 1,    /* text: a content delta */
    SNUG_OUTPARSE_TOOL_START = 2, /* index, name: a tool call begins (index 0, 1, ...) */
    SNUG_OUTPARSE_TOOL_ARGS = 3,  /* index, text: a delta of the call's arguments JSON; the
                                     deltas of one call concatenate to TOOL_END's text */
    SNUG_OUTPARSE_TOOL_END = 4,   /* index, name, text: the complete arguments JSON object,
                                     typed by the tool's schema (see below) */
    SNUG_OUTPARSE_END = 5,        /* after snug_outparse_finish: nothing follows */
};

/* One event. Pointers are borrowed: valid only during the callback. `text` is not
 * NUL-terminated for REASONING/CONTENT/TOOL_ARGS deltas (use len); name and TOOL_END's text
 * are NUL-terminated. */
struct snug_outparse_event {
    enum snug_outparse_kind kind;
    int index;        /* tool-call index (TOOL_*), else -1 */
    const char *name; /* function name (TOOL_START, TOOL_END), else NULL; printable ASCII
                         (other bytes of a generated name are replaced by '_') */
    const char *text;
    size_t len;
};

typedef void (*snug_outparse_emit_fn)(void *user, const struct snug_outparse_event *ev);

struct snug_outparse;

/* Make a parser. `tools` is the request's "tools" array (or NULL); it is referenced (json_incref)
 * for the parser's lifetime, and types arguments: a parameter whose schema admits a string
 * (type "string" or a list containing it, an anyOf/oneOf alternative that does, or an
 * all-string enum without a type) stays a JSON string; any other parameter (typed number,
 * integer, boolean, object, array, or not in the schema) becomes the JSON value its text parses
 * as, else a string ("True"/"False" also read as booleans when the schema says boolean).
 * `in_reasoning`: the prompt ended with "<think>\n" (snug_chat_prompt_in_reasoning).
 * `emit` is called synchronously from feed/finish. */
int snug_outparse_init(struct snug_outparse **out, const json_t *tools, bool in_reasoning,
                       snug_outparse_emit_fn emit, void *user, struct snug_err *err);

/* The request allows no tool call (no tools, or tool_choice "none": src/server/toolpolicy.h):
 * from now on only "</think>" is a tag, and text the model writes in the call format
 * ("<tool_call>", "<function=...") stays reasoning or content — it never becomes a call. Call
 * before the first feed. */
void snug_outparse_no_calls(struct snug_outparse *p);

/* Size the parser's buffers now (pending input, held whitespace, event scratch, names, the
 * open call's arguments) for `bytes` each, so feeds whose pending text stays under that
 * append without allocating (beyond it they grow, amortised). SNUG_ERR_NOMEM on failure. */
int snug_outparse_reserve(struct snug_outparse *p, size_t bytes);

/* Feed the next piece of generated text (any split, any bytes). Emits the events that became
 * certain. Returns SNUG_OK or SNUG_ERR_NOMEM (then the parser is unusable). */
int snug_outparse_feed(struct snug_outparse *p, const char *text, size_t len, struct snug_err *err);

/* End of generation: resolve everything held back (an open parameter / call is closed as if
 * its tags were there), emit the rest, then END. Feeding after finish is an error. */
int snug_outparse_finish(struct snug_outparse *p, struct snug_err *err);

/* Number of tool calls started so far (the server's finish_reason is "tool_calls" when > 0). */
int snug_outparse_n_tool_calls(const struct snug_outparse *p);

void snug_outparse_free(struct snug_outparse *p);

/* ---- non-streaming helper ---------------------------------------------------------------- */

struct snug_outparse_tool_call {
    char *name;      /* NUL-terminated, owned by the result */
    char *arguments; /* the arguments JSON object as a string, owned by the result */
};

struct snug_outparse_result {
    char *reasoning; /* NUL-terminated (possibly ""), reasoning_len bytes */
    size_t reasoning_len;
    char *content; /* NUL-terminated (possibly ""), content_len bytes */
    size_t content_len;
    struct snug_outparse_tool_call *tool_calls; /* [n_tool_calls] */
    int n_tool_calls;
};

/* Parse a whole generated text at once (same events as streaming, collected). On success the
 * caller frees *out with snug_outparse_result_free; on failure *out is left empty. */
int snug_outparse_text(const json_t *tools, bool in_reasoning, const char *text, size_t len,
                       struct snug_outparse_result *out, struct snug_err *err);

void snug_outparse_result_free(struct snug_outparse_result *r);

#endif

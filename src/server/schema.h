/* schema.h — the JSON helpers the chat side needs: a growable byte buffer, serialisation that
 * matches Python's json.dumps(x, ensure_ascii=False) byte for byte (the template's `tojson`),
 * and typing of a tool-call argument's text by the tool's JSON schema.
 * Owns: only the buffers it grows (snug_malloc'd). Invariant: a buffer that failed to grow
 * keeps `oom` set and ignores further appends, so callers check once at the end.
 * Read next: chat.c and outparse.c, the users.
 */
#ifndef SNUG_SERVER_SCHEMA_H
#define SNUG_SERVER_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A growable byte string, always NUL-terminated once anything was appended. Zero = empty. */
struct snug_sbuf {
    char *data;
    size_t len, cap;
    bool oom;
};

void snug_sbuf_append(struct snug_sbuf *b, const char *s, size_t n);
void snug_sbuf_puts(struct snug_sbuf *b, const char *s);
void snug_sbuf_putc(struct snug_sbuf *b, char c);
void snug_sbuf_reset(struct snug_sbuf *b); /* len = 0, keeps the memory */
/* Make room for n more bytes now (false on out-of-memory), so later appends up to that
 * size do not allocate. */
bool snug_sbuf_reserve(struct snug_sbuf *b, size_t n);
void snug_sbuf_free(struct snug_sbuf *b);
/* Hand the bytes over (NUL-terminated, snug_malloc'd, "" when empty; NULL on oom) and empty b. */
char *snug_sbuf_take(struct snug_sbuf *b, size_t *out_len);

/* Append `v` as Python's json.dumps(v, ensure_ascii=False) writes it: separators ", " and
 * ": ", keys in the object's order, reals as repr(float), only '"', '\\' and control
 * characters escaped. Invalid UTF-8 bytes in strings become U+FFFD. */
void snug_json_dumps(struct snug_sbuf *b, const json_t *v);
/* Append the JSON string literal for n bytes of s (same escaping as above). */
void snug_json_dumps_str(struct snug_sbuf *b, const char *s, size_t n);

/* A JSON string from bytes that may not be valid UTF-8: valid sequences kept, every other byte
 * (and NUL) becomes U+FFFD. Never NULL unless out of memory (then an empty string is tried). */
json_t *snug_json_string_lossy(const char *s, size_t n);

/* The schema of function `name`'s parameter `param` in an OpenAI tools array (borrowed), or
 * NULL when the tool or the parameter is not declared. */
const json_t *snug_schema_find_param(const json_t *tools, const char *name, const char *param);

/* Append the JSON value for a tool-call parameter whose raw text is `text` (n bytes), typed by
 * `schema` (may be NULL): see snug_outparse_init for the rules. */
void snug_schema_typed_value(struct snug_sbuf *b, const json_t *schema, const char *text, size_t n);

#endif

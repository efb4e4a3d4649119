/* schema.h — the JSON helpers the chat side needs: serialisation into the core's growable
 * byte string (struct snug_sbuf, core.h) that matches Python's json.dumps(x,
 * ensure_ascii=False) byte for byte (the template's `tojson`), and typing of a tool-call
 * argument's text by the tool's JSON schema. Owns nothing. Invariant: a writer whose buffer
 * failed to grow leaves `oom` set, so callers check once at the end.
 * Read next: chat.c and outparse.c, the users.
 */
#ifndef SNUG_SERVER_SCHEMA_H
#define SNUG_SERVER_SCHEMA_H

#include "core/core.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

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

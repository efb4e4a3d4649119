/* normalize.c — the volatile-span rules and their application (see normalize.h). */
#include "server/normalize.h"

#include "core/core.h"

#include <string.h>

const struct snug_norm_rule SNUG_NORM_RULES[] = {
    {"claude-code-billing", "x-anthropic-billing-header:"},
};
const size_t SNUG_NORM_N_RULES = sizeof SNUG_NORM_RULES / sizeof SNUG_NORM_RULES[0];

static bool rule_line(const char *p, size_t n) {
    for (size_t r = 0; r < SNUG_NORM_N_RULES; r++) {
        size_t l = strlen(SNUG_NORM_RULES[r].line_prefix);
        if (n >= l && !memcmp(p, SNUG_NORM_RULES[r].line_prefix, l)) return true;
    }
    return false;
}

size_t snug_norm_text(char *s, size_t n, int *n_removed) {
    size_t w = 0, i = 0;
    while (i < n) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) + 1 : n; /* the line with its '\n' */
        if (rule_line(s + i, end - i)) {
            (*n_removed)++;
        } else {
            memmove(s + w, s + i, end - i);
            w += end - i;
        }
        i = end;
    }
    return w;
}

/* Normalise one JSON string in place (replacing it when it changes). */
static int norm_string(json_t *holder_obj, const char *key, json_t *str) {
    size_t n = json_string_length(str);
    const char *v = json_string_value(str);
    if (!memchr(v, 'x', n)) return 0;
    bool any = false;
    for (size_t r = 0; r < SNUG_NORM_N_RULES && !any; r++)
        any = strstr(v, SNUG_NORM_RULES[r].line_prefix) != NULL;
    if (!any) return 0;
    char *buf = snug_malloc(n + 1);
    if (!buf) return SNUG_ERR_NOMEM;
    memcpy(buf, v, n);
    int removed = 0;
    size_t m = snug_norm_text(buf, n, &removed);
    int rc = removed;
    if (removed) {
        json_t *ns = json_stringn(buf, m);
        if (!ns || json_object_set_new(holder_obj, key, ns)) rc = SNUG_ERR_NOMEM;
    }
    snug_free(buf);
    return rc;
}

int snug_prompt_normalize(json_t *messages) {
    if (!json_is_array(messages)) return 0;
    int total = 0;
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "system")) continue;
        json_t *c = json_object_get(m, "content");
        int rc = 0;
        if (json_is_string(c)) {
            rc = norm_string(m, "content", c);
        } else if (json_is_array(c)) {
            size_t k;
            json_t *part;
            json_array_foreach(c, k, part) {
                json_t *t = json_object_get(part, "text");
                if (!json_is_string(t)) continue;
                int r = norm_string(part, "text", t);
                if (r < 0) return r;
                rc += r;
            }
        }
        if (rc < 0) return rc;
        total += rc;
    }
    return total;
}

/* fuzz_server_http.c — libFuzzer target for the HTTP layer's decisions before and while a body
 * is read (gate.c) and for error building: the input is split at '\n' into url, method,
 * Authorization, Origin, Content-Type, an API key and a body. Checks: a refusal is one of
 * 401/403/404/405/415 with a message that always becomes a JSON string (request text is
 * echoed: invalid UTF-8 must be repaired, a cut character dropped); with a key set only the
 * exact "Bearer <key>" passes (but /health); a Content-Length is "over the limit" exactly when
 * it is decimal and larger (an independent reading); the body is kept whole up to the limit
 * and dropped past it, however it is split.
 * Seeds: tests/fuzz/corpus-server-http/. Run: scripts/fuzz.sh (all targets) or
 * build-fuzz/fuzz_server_http tests/fuzz/corpus-server-http.
 * Read next: src/server/gate.h. */
#include "core/core.h"
#include "server/gate.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An independent reading of a Content-Length header: decimal digits between optional blanks,
 * and is the value over limit? (-1: not such a header) */
static int decimal_over(const char *c, size_t limit) {
    if (!c) return -1;
    while (*c == ' ' || *c == '\t') c++;
    if (*c < '0' || *c > '9') return -1;
    char *endp;
    errno = 0;
    unsigned long long v = strtoull(c, &endp, 10);
    bool range = errno == ERANGE;
    while (*endp == ' ' || *endp == '\t') endp++;
    if (*endp) return -1;
    return range || v > (unsigned long long)limit;
}

static bool origin_never(const void *ctx, const char *origin) {
    (void)ctx;
    return origin && !strcmp(origin, "http://allowed.example");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    /* fields 0..5 end at '\n'; field 6 (the body) is the rest */
    const char *f[7] = {"", "", "", "", "", "", ""};
    char *p = buf, *end = buf + size;
    int i = 0;
    for (; i < 6; i++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        f[i] = p;
        if (!nl) {
            p = end;
            break;
        }
        *nl = 0;
        p = nl + 1;
    }
    f[6] = p;
    size_t body_len = (size_t)(end - p);
    for (int k = 2; k <= 5; k++)
        if (!f[k][0]) f[k] = NULL; /* an empty line: the header is absent */
    struct snug_gate_request q = {.url = f[0],
                                  .method = f[1],
                                  .authorization = f[2],
                                  .origin = f[3],
                                  .content_type = f[4],
                                  .x_api_key = f[2], /* the same bytes as Anthropic's header */
                                  .host = f[3]};     /* and as the Host (same-origin check) */
    size_t limit = 64 + (size % 200);
    struct snug_gate_policy pol = {.api_key = f[5], .origin_ok = origin_never};
    struct snug_server_error e;
    enum snug_route r;
    const char *allow = NULL;
    int st = snug_gate_check(&q, &pol, &r, &e, &allow);
    if (r < 0 || r >= ROUTE_COUNT) __builtin_trap();
    if (st) {
        if (st != 401 && st != 403 && st != 404 && st != 405 && st != 415) __builtin_trap();
        if (e.http_status != st || !e.msg[0]) __builtin_trap();
        if ((st == 405) != (allow != NULL)) __builtin_trap();
        json_t *j = snug_json_string_lossy(e.msg, strlen(e.msg));
        if (!j || !json_string_value(j)) __builtin_trap();
        json_decref(j);
    } else if (f[5] && r != ROUTE_HEALTH) { /* let through: one of the two key headers */
        bool bearer = q.authorization && !strncmp(q.authorization, "Bearer ", 7) &&
                      !strcmp(q.authorization + 7, f[5]);
        bool xkey = q.x_api_key && !strcmp(q.x_api_key, f[5]);
        if (!bearer && !xkey) __builtin_trap();
    }
    /* the Content-Length bytes (the Content-Type field's) against the limit */
    if (snug_gate_announced_over(f[4], limit) != (decimal_over(f[4], limit) == 1)) __builtin_trap();
    /* error building from arbitrary text: the message stays valid UTF-8 up to its cut */
    snug_server_error_set(&e, 400, "invalid_request_error", f[0], "echo: %s", f[6]);
    json_t *j = snug_json_string_lossy(e.msg, strlen(e.msg));
    if (!j) __builtin_trap();
    json_decref(j);
    /* the body in chunks of sizes taken from its own bytes, against a small limit */
    struct snug_sbuf b = {0};
    bool too_big = false;
    size_t off = 0;
    while (off < body_len) {
        size_t n = 1 + ((unsigned char)f[6][off] % 37);
        if (n > body_len - off) n = body_len - off;
        snug_gate_body_add(&b, &too_big, limit, f[6] + off, n);
        off += n;
    }
    if (too_big != (body_len > limit)) __builtin_trap();
    if (!too_big && body_len && (b.len != body_len || memcmp(b.data, f[6], body_len)))
        __builtin_trap();
    snug_sbuf_free(&b);
    free(buf);
    return 0;
}

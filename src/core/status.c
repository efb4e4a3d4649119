/* status.c — error recording for `struct snug_err` (see include/snug.h).
 * Owns nothing; messages are truncated to fit the fixed buffer, never allocated. */
#include "snug.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int snug_err_set(struct snug_err *err, int status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

int snug_err_prefix(struct snug_err *err, const char *fmt, ...) {
    if (!err) return SNUG_ERR_INTERNAL;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    old[sizeof old - 1] = '\0';
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3, olen = strlen(old);
    if (olen > room) olen = room;
    memcpy(err->msg + n + 2, old, olen);
    err->msg[n + 2 + olen] = 0;
    return err->status;
}

const char *snug_status_str(int status) {
    switch (status) {
    case SNUG_OK:
        return "ok";
    case SNUG_ERR_IO:
        return "io";
    case SNUG_ERR_FORMAT:
        return "format";
    case SNUG_ERR_NOMEM:
        return "nomem";
    case SNUG_ERR_INVALID:
        return "invalid";
    case SNUG_ERR_UNSUPPORTED:
        return "unsupported";
    case SNUG_ERR_BUDGET:
        return "budget";
    case SNUG_ERR_INTERNAL:
        return "internal";
    default:
        return "unknown";
    }
}

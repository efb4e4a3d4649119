/* snug.h — the public C API of libsnug.
 *
 * A short tour:
 *   struct snug_err err = {0};
 *   struct snug_model *m;
 *   if (snug_model_load(&m, &(struct snug_model_params){.path = "m.gguf"}, &err) != SNUG_OK)
 *       fprintf(stderr, "%s\n", err.msg);
 *
 * Conventions (see ../shared/style.md): every fallible function returns an `enum snug_status`
 * (0 = ok, negative = failure) and writes a message a user can act on into a caller-owned
 * `struct snug_err`. The library never prints to stdout and never exits. Whoever `_init`s or
 * `_load`s, `_free`s; `_free(NULL)` is a no-op.
 *
 * Module headers (src/<module>/<module>.h) hold the internal APIs; read ARCHITECTURE.md next.
 */
#ifndef SNUG_H
#define SNUG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Values are stable (they appear in logs and exit codes): append only. */
enum snug_status {
    SNUG_OK = 0,
    SNUG_ERR_IO = -1,          /* a file could not be opened, read, mapped or written */
    SNUG_ERR_FORMAT = -2,      /* a file or input is malformed (GGUF, JSON, ids, ...) */
    SNUG_ERR_NOMEM = -3,       /* the system refused an allocation */
    SNUG_ERR_INVALID = -4,     /* a caller passed an invalid argument */
    SNUG_ERR_UNSUPPORTED = -5, /* well-formed but not supported (architecture, tensor type) */
    SNUG_ERR_BUDGET = -6,      /* the memory plan does not fit the budget / context exceeded */
    SNUG_ERR_INTERNAL = -7,    /* a broken invariant that was caught and reported */
};

/* Error detail, owned by the caller. `msg` is always NUL-terminated. */
struct snug_err {
    int status;
    char msg[512];
};

/* Record an error: formats `fmt` into err->msg (if err is non-NULL) and returns `status`,
 * so callers can write `return snug_err_set(err, SNUG_ERR_FORMAT, "...", ...);`. */
int snug_err_set(struct snug_err *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Prefix an existing error message with context ("loading x.gguf: <old message>"). */
int snug_err_prefix(struct snug_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A short name for a status code ("ok", "io", "format", ...). */
const char *snug_status_str(int status);

typedef int32_t snug_token;
typedef int32_t snug_pos;

#ifdef __cplusplus
}
#endif
#endif /* SNUG_H */

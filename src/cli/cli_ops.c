/* cli_ops.c — what `snug verify`, `snug stress` and `snug bench` share: the connection flags
 * (--url, --model, --api-key, --timeout), opening the client, and the terminal progress bar.
 * Read next: src/suite/suite.h. */
#include "cli.h"
#include "suite/suite.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int cli_conn_open(const struct cli_conn *cc, struct snug_suite_client *c, const char *cmd) {
    struct snug_err err = {0};
    if (snug_suite_client_init(c, cc->url, cc->model, cc->key, &err)) return cli_fail(cmd, &err);
    c->timeout_s = cc->timeout_s;
    return 0;
}

void cli_progress(void *user, const char *label, int done, int total) {
    (void)user;
    if (!isatty(2)) return;
    int w = 24, f = total ? done * w / total : 0;
    fprintf(stderr, "\r[%.*s%*s] %d/%d %-28s", f, "########################", w - f, "", done,
            total, label);
    if (done == total) fprintf(stderr, "\r%*s\r", 64, "");
    fflush(stderr);
}

bool cli_conn_opt(const struct cli_args *p, int id, const struct cli_val *v, struct cli_conn *cc) {
    if (id == CLI_O_URL) cc->url = v->s;
    if (id == CLI_O_MODEL) cc->model = v->s;
    if (id == CLI_O_API_KEY) cc->key = v->s;
    if (id == CLI_O_TIMEOUT) {
        if (!(v->f > 0)) return cli_args_bad(p, v, "expected a number of seconds > 0"), false;
        cc->timeout_s = v->f;
    }
    return true;
}

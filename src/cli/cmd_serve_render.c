/* cmd_serve_render.c — `snug serve --render-only REQUEST.json`: renders a chat request's
 * prompt with the server's renderer (src/server/chat.h) and prints it, for the golden tests
 * against jinja2 (tests/py/test_chat_template.py). Lives in the CLI because it prints to
 * stdout; cmd_serve calls it and returns its exit status. Read next: src/server/chat.h.
 */
#include "core/core.h"
#include "cli.h"
#include "server/chat.h"

#include <stdio.h>
#include <string.h>

int cmd_serve_render(int argc, char **argv) {
    const char *path = NULL;
    bool thinking = true;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--render-only") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--no-thinking"))
            thinking = false;
    }
    if (!path) {
        fprintf(stderr, "usage: snug serve --render-only REQUEST.json [--no-thinking]\n");
        return 2;
    }
    json_error_t jerr;
    json_t *req = !strcmp(path, "-") ? json_loadf(stdin, JSON_ALLOW_NUL, &jerr)
                                     : json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!req) {
        fprintf(stderr, "error: %s: %s (line %d)\n", path, jerr.text, jerr.line);
        return 2;
    }
    struct snug_err err = {0};
    struct snug_chat_opts opts = snug_chat_default_opts(thinking);
    char *prompt = NULL;
    size_t len = 0;
    int st = snug_chat_opts_from_request(&opts, req, &err);
    if (!st)
        st = snug_chat_render(json_object_get(req, "messages"), json_object_get(req, "tools"),
                              &opts, &prompt, &len, &err);
    json_decref(req);
    if (st) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    fwrite(prompt, 1, len, stdout);
    fflush(stdout);
    snug_free(prompt);
    return 0;
}

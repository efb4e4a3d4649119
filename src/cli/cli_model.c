/* cli_model.c — where `snug run` / `snug serve` find a model when no -m is given: the demo
 * model trained by the project (docs/demo-model.md), looked up next to the binary, in the
 * source tree the binary was built from, then in the install prefix. Invariant: returns a
 * path only to a file that exists and is readable; otherwise explains every place it looked,
 * so the user knows what to pass instead. Read next: cmd_run.c, cmd_serve.c.
 */
#define _DEFAULT_SOURCE /* readlink, PATH_MAX */
#include "cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SNUG_SOURCE_DIR
#define SNUG_SOURCE_DIR "."
#endif
#ifndef SNUG_INSTALL_DATADIR
#define SNUG_INSTALL_DATADIR "/usr/local/share/snug"
#endif

#define DEMO_FILE "snug-demo-q8_0.gguf"

/* Add "<dir><tail>" to the candidates unless it does not fit. */
static void add_candidate(char (*cand)[PATH_MAX], int *n, const char *dir, const char *tail) {
    size_t a = strlen(dir), b = strlen(tail);
    if (a + b + 1 > PATH_MAX) return;
    memcpy(cand[*n], dir, a);
    memcpy(cand[*n] + a, tail, b + 1);
    (*n)++;
}

const char *cli_default_model(const char *cmd) {
    static char cand[4][PATH_MAX];
    char exe[PATH_MAX];
    int n = 0;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        add_candidate(cand, &n, exe, "/" DEMO_FILE);              /* next to the binary */
        add_candidate(cand, &n, exe, "/../data/demo/" DEMO_FILE); /* a build/ folder */
    }
    add_candidate(cand, &n, SNUG_SOURCE_DIR, "/data/demo/" DEMO_FILE); /* the source tree */
    add_candidate(cand, &n, SNUG_INSTALL_DATADIR, "/" DEMO_FILE);      /* make install */
    static char real[PATH_MAX];
    for (int i = 0; i < n; i++)
        if (access(cand[i], R_OK) == 0) return realpath(cand[i], real) ? real : cand[i];
    fprintf(stderr,
            "snug %s: no -m MODEL.gguf given, and the demo model (" DEMO_FILE ") is in none of:\n",
            cmd);
    for (int i = 0; i < n; i++) fprintf(stderr, "  %s\n", cand[i]);
    fprintf(stderr, "pass -m path/to/model.gguf (or restore data/demo/ from the source tree)\n");
    return NULL;
}

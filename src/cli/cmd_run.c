/* cmd_run.c — `snug run` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug run: not implemented yet\n");
    return 2;
}

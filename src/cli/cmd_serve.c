/* cmd_serve.c — `snug serve` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug serve: not implemented yet\n");
    return 2;
}

/* cmd_gen.c — `snug gen` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_gen(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug gen: not implemented yet\n");
    return 2;
}

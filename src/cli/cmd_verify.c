/* cmd_verify.c — `snug verify` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_verify(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug verify: not implemented yet\n");
    return 2;
}

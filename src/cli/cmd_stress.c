/* cmd_stress.c — `snug stress` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_stress(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug stress: not implemented yet\n");
    return 2;
}

/* cmd_plan.c — `snug plan` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_plan(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug plan: not implemented yet\n");
    return 2;
}

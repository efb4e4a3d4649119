/* cmd_info.c — `snug info` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug info: not implemented yet\n");
    return 2;
}

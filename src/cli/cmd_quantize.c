/* cmd_quantize.c — `snug quantize` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug quantize: not implemented yet\n");
    return 2;
}

/* cmd_tokenize.c — `snug tokenize` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug tokenize: not implemented yet\n");
    return 2;
}

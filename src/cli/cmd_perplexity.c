/* cmd_perplexity.c — `snug perplexity` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_perplexity(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug perplexity: not implemented yet\n");
    return 2;
}

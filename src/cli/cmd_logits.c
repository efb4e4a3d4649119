/* cmd_logits.c — `snug logits` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug logits: not implemented yet\n");
    return 2;
}

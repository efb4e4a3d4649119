/* cmd_bench.c — `snug bench` (not yet written). */
#include "cli.h"

#include <stdio.h>

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "snug bench: not implemented yet\n");
    return 2;
}

/* cli_cache.h — the prefix cache's flags, shared by `snug serve` and `snug plan`:
 *   --cache-ram SIZE|auto          host-RAM tier (serve: auto by default, plan_cache.h's rule;
 *                                  0 = no prefix cache; plan: none unless given)
 *   --cache-dir DIR                disk tier folder (survives restarts; needs --cache-ram)
 *   --cache-disk SIZE              disk tier budget (default 4 x --cache-ram)
 *   --cache-checkpoint-every N     checkpoint interval in tokens during prefill (default 4096)
 *   --no-prompt-normalize          (serve) keep agent clients' volatile spans
 * Read next: src/plan/plan_cache.h, docs/prefix-cache.md. */
#ifndef SNUG_CLI_CACHE_H
#define SNUG_CLI_CACHE_H

#include "plan/plan_cache.h"

#define CLI_CACHE_USAGE                                                                            \
    "  --cache-ram SIZE|auto  prefix cache in host RAM (checkpoints reused across requests;\n"     \
    "                    serve: auto by default, a quarter of the host memory left for it, at\n"   \
    "                    most 16 GiB; 0 = off); --cache-dir DIR adds a disk tier that survives\n"  \
    "                    restarts, --cache-disk SIZE its budget (default 4 x RAM);\n"              \
    "                    --cache-checkpoint-every N tokens (default 4096)\n"

/* 1: argv[*i] was a cache flag (consumed with its value); -1: a bad value (message printed);
 * 0: not a cache flag. */
int cli_cache_flag(int argc, char **argv, int *i, const char *cmd, struct snug_plan_cache_flags *f);

#endif

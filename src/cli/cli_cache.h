/* cli_cache.h — the prefix cache's flags, shared by `snug serve` and `snug plan`:
 *   --cache-ram SIZE               host-RAM tier (default 0 = no prefix cache)
 *   --cache-dir DIR                disk tier folder (survives restarts; needs --cache-ram)
 *   --cache-disk SIZE              disk tier budget (default 4 x --cache-ram)
 *   --cache-checkpoint-every N     checkpoint interval in tokens during prefill (default 4096)
 *   --no-prompt-normalize          (serve) keep agent clients' volatile spans
 * Read next: src/plan/plan_cache.h, docs/prefix-cache.md. */
#ifndef SNUG_CLI_CACHE_H
#define SNUG_CLI_CACHE_H

#include "plan/plan_cache.h"

#define CLI_CACHE_USAGE                                                                            \
    "  --cache-ram SIZE  prefix cache in host RAM (checkpoints reused across requests; off by\n"   \
    "                    default); --cache-dir DIR adds a disk tier that survives restarts,\n"     \
    "                    --cache-disk SIZE its budget (default 4 x RAM);\n"                        \
    "                    --cache-checkpoint-every N tokens (default 4096)\n"

/* 1: argv[*i] was a cache flag (consumed with its value); -1: a bad value (message printed);
 * 0: not a cache flag. */
int cli_cache_flag(int argc, char **argv, int *i, const char *cmd, struct snug_plan_cache_flags *f);
/* The new parser's form: applies the CLI_OPTS_CACHE flags (cli.h), ignores other ids. */
struct cli_val;
bool cli_cache_opt(int id, const struct cli_val *v, struct snug_plan_cache_flags *f);

#endif

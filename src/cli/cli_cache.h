/* cli_cache.h — applying the prefix cache's flags (--cache-ram, --cache-dir, --cache-disk,
 * --cache-checkpoint-every: the CLI_OPTS_CACHE rows of cli.h), shared by `snug serve` and
 * `snug plan`. Read next: src/plan/plan_cache.h, docs/prefix-cache.md. */
#ifndef SNUG_CLI_CACHE_H
#define SNUG_CLI_CACHE_H

#include "plan/plan_cache.h"

/* Applies the CLI_OPTS_CACHE flags (their rows: cli.h), ignores other ids. */
struct cli_val;
bool cli_cache_opt(int id, const struct cli_val *v, struct snug_plan_cache_flags *f);

#endif

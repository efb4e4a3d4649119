/* cli_cache.c — applying the prefix cache's flags (see cli_cache.h). */
#include "cli_cache.h"

#include "cli.h"

#include <stdio.h>
#include <string.h>

bool cli_cache_opt(int id, const struct cli_val *v, struct snug_plan_cache_flags *f) {
    if (id == CLI_O_CACHE_RAM) f->ram_bytes = v->size;
    if (id == CLI_O_CACHE_DISK) f->disk_bytes = v->size;
    if (id == CLI_O_CACHE_DIR) f->disk_dir = v->s;
    if (id == CLI_O_CACHE_EVERY) f->checkpoint_every = (int32_t)v->i;
    return true;
}

/* cli_cache.c — applying the prefix cache's flags (see cli_cache.h). */
#include "cli_cache.h"

#include "cli.h"

#include <stdio.h>
#include <string.h>

bool cli_cache_opt(int id, const struct cli_val *v, struct snug_plan_cache_flags *f) {
    if (id == CLI_O_CACHE_RAM) { /* SIZE or auto (plan_cache.h's rule) */
        uint64_t b;
        if (!strcmp(v->s, "auto")) {
            f->ram_bytes = SNUG_CACHE_RAM_AUTO;
        } else if (snug_plan_parse_size(v->s, &b)) {
            f->ram_bytes = b;
        } else {
            fprintf(stderr, "snug: --cache-ram '%s': expected a size such as 8GiB, or auto\n",
                    v->s);
            return false;
        }
    }
    if (id == CLI_O_CACHE_DISK) f->disk_bytes = v->size;
    if (id == CLI_O_CACHE_DIR) f->disk_dir = v->s;
    if (id == CLI_O_CACHE_EVERY) f->checkpoint_every = (int32_t)v->i;
    return true;
}

/* cli_cache.c — parsing of the prefix cache's flags (see cli_cache.h). */
#include "cli_cache.h"

#include "cli.h"

#include <stdio.h>
#include <string.h>

int cli_cache_flag(int argc, char **argv, int *i, const char *cmd,
                   struct snug_plan_cache_flags *f) {
    const char *a = argv[*i];
    if (!strcmp(a, "--cache-ram") || !strcmp(a, "--cache-disk")) {
        const char *v = cli_value(argc, argv, i);
        uint64_t b;
        if (!v) return -1;
        if (!snug_plan_parse_size(v, &b)) {
            fprintf(stderr, "snug %s: %s '%s': expected a size such as 8GiB or 512MiB\n", cmd, a,
                    v);
            return -1;
        }
        if (!strcmp(a, "--cache-ram"))
            f->ram_bytes = b;
        else
            f->disk_bytes = b;
        return 1;
    }
    if (!strcmp(a, "--cache-dir")) {
        if (!(f->disk_dir = cli_value(argc, argv, i))) return -1;
        return 1;
    }
    if (!strcmp(a, "--cache-checkpoint-every")) {
        long v;
        if (!cli_int(argc, argv, i, &v) || v < 1 || v > (1L << 30)) {
            fprintf(stderr, "snug %s: --cache-checkpoint-every wants 1..2^30 tokens\n", cmd);
            return -1;
        }
        f->checkpoint_every = (int32_t)v;
        return 1;
    }
    return 0;
}

bool cli_cache_opt(int id, const struct cli_val *v, struct snug_plan_cache_flags *f) {
    if (id == CLI_O_CACHE_RAM) f->ram_bytes = v->size;
    if (id == CLI_O_CACHE_DISK) f->disk_bytes = v->size;
    if (id == CLI_O_CACHE_DIR) f->disk_dir = v->s;
    if (id == CLI_O_CACHE_EVERY) f->checkpoint_every = (int32_t)v->i;
    return true;
}

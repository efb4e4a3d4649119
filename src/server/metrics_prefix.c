/* metrics_prefix.c — the prefix cache's lines of /metrics (Prometheus text), from
 * snug_prefix_stats: lookups and hits, prompt tokens reused vs evaluated and their ratio,
 * checkpoints / bytes / capacity per tier, evictions per tier, stores, restores, disk files
 * loaded and refused. Nothing when the cache is off. Read next: http.c (do_metrics). */
#include "server/server_impl.h"

#include "prefix/prefix.h"

#include <stdio.h>

static void line(struct snug_sbuf *b, const char *name, const char *type, const char *help,
                 const char *const *labels, const double *v, int n) {
    char buf[512];
    snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    snug_sbuf_puts(b, buf);
    for (int i = 0; i < n; i++) {
        if (labels)
            snprintf(buf, sizeof buf, "%s{tier=\"%s\"} %.17g\n", name, labels[i], v[i]);
        else
            snprintf(buf, sizeof buf, "%s %.17g\n", name, v[i]);
        snug_sbuf_puts(b, buf);
    }
}

void snug_srv_metrics_prefix(struct snug_sbuf *b, struct snug_prefix *pc) {
    if (!pc) return;
    struct snug_prefix_stats st;
    snug_prefix_stats(pc, &st);
    static const char *const tiers[] = {"ram", "disk"};
    static const char *const evict[] = {"ram", "disk", "index"};
    double v[3];
    v[0] = (double)st.lookups;
    line(b, "snug_prefix_cache_lookups_total", "counter", "Prefix-cache lookups.", NULL, v, 1);
    v[0] = (double)st.hits;
    line(b, "snug_prefix_cache_hits_total", "counter", "Lookups that found a checkpoint.", NULL, v,
         1);
    v[0] = st.lookups ? (double)st.hits / (double)st.lookups : 0;
    line(b, "snug_prefix_cache_hit_ratio", "gauge", "Hits per lookup since start.", NULL, v, 1);
    v[0] = (double)st.tokens_reused;
    line(b, "snug_prefix_cache_prompt_tokens_reused_total", "counter",
         "Prompt tokens restored from the prefix cache instead of evaluated.", NULL, v, 1);
    v[0] = (double)st.tokens_evaluated;
    line(b, "snug_prefix_cache_prompt_tokens_evaluated_total", "counter",
         "Prompt tokens evaluated (not found in the prefix cache).", NULL, v, 1);
    uint64_t all = st.tokens_reused + st.tokens_evaluated;
    v[0] = all ? (double)st.tokens_reused / (double)all : 0;
    line(b, "snug_prefix_cache_token_reuse_ratio", "gauge",
         "Reused prompt tokens per prompt token since start.", NULL, v, 1);
    v[0] = (double)st.ram_entries;
    v[1] = (double)st.disk_entries;
    line(b, "snug_prefix_cache_checkpoints", "gauge", "Checkpoints held, per tier.", tiers, v, 2);
    v[0] = (double)st.ram_bytes;
    v[1] = (double)st.disk_bytes;
    line(b, "snug_prefix_cache_bytes", "gauge", "Checkpoint bytes held, per tier.", tiers, v, 2);
    v[0] = (double)st.ram_capacity;
    v[1] = (double)st.disk_capacity;
    line(b, "snug_prefix_cache_capacity_bytes", "gauge",
         "Tier budgets (--cache-ram, --cache-disk).", tiers, v, 2);
    v[0] = (double)st.ram_evictions;
    v[1] = (double)st.disk_evictions;
    v[2] = (double)st.index_evictions;
    line(b, "snug_prefix_cache_evictions_total", "counter",
         "Evictions: checkpoints out of RAM / off disk, token blocks out of the index.", evict, v,
         3);
    v[0] = (double)st.stores;
    line(b, "snug_prefix_cache_stores_total", "counter", "Checkpoints taken.", NULL, v, 1);
    v[0] = (double)st.restores;
    line(b, "snug_prefix_cache_restores_total", "counter", "Checkpoints restored into a slot.",
         NULL, v, 1);
    v[0] = (double)st.restore_failures;
    line(b, "snug_prefix_cache_restore_failures_total", "counter",
         "Restores refused (a file failed its check); the prompt was evaluated instead.", NULL, v,
         1);
    v[0] = (double)st.files_loaded;
    line(b, "snug_prefix_cache_files_loaded_total", "counter", "Disk-tier files accepted at boot.",
         NULL, v, 1);
    v[0] = (double)st.files_refused;
    line(b, "snug_prefix_cache_files_refused_total", "counter",
         "Disk-tier files refused at boot (corrupt, truncated, another model or layout).", NULL, v,
         1);
    v[0] = (double)st.disk_other_bytes;
    line(b, "snug_prefix_cache_disk_other_bytes", "gauge",
         "Other cache files in --cache-dir (refused, another server's), counted against "
         "--cache-disk.",
         NULL, v, 1);
    v[0] = (double)st.stale_tmp_removed;
    line(b, "snug_prefix_cache_stale_temporaries_removed_total", "counter",
         "Temporaries of interrupted checkpoint writes removed at boot.", NULL, v, 1);
    v[0] = (double)st.disk_write_failures;
    line(b, "snug_prefix_cache_disk_write_failures_total", "counter",
         "Checkpoint files that could not be written.", NULL, v, 1);
}

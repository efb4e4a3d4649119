/* prefix.c — the checkpoint store: entries, the RAM tier's page pool, the disk tier's files,
 * store/restore through the engine's callbacks, LRU eviction per tier (see prefix.h).
 * RAM layout of an entry: a chain of pages (page_next); the state fills the first
 * ceil(state_bytes / page_bytes) pages, then each page holds rows_per_page KV rows.
 * Eviction: the least recently used entry not touched by the current operation (its chain is
 * touched first). Leaving RAM keeps a disk copy if there is one; leaving the last tier drops
 * the entry and its descendants. Scans are O(entries), entries are few (default 1024).
 */
#define _POSIX_C_SOURCE 200809L /* pread, pwrite, fsync, dirent */
#include "prefix/prefix.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct pfx_entry {
    bool used, on_disk;
    int32_t pos, base, parent, point;
    int32_t first_page, n_pages; /* -1 / 0: not in RAM */
    uint64_t key, parent_key, last_used, disk_bytes;
    uint32_t payload_crc;
    int32_t rope_delta; /* the sequence's rotary offset at pos (prefix.h rope_delta_out) */
};

#define PFX_EXT ".snugpfx"

/* ==== configuration ========================================================================= */

int snug_prefix_cfg_resolve(struct snug_prefix_cfg *c, struct snug_err *err) {
    if (c->block_tokens <= 0) c->block_tokens = 64;
    if (c->max_entries <= 0) c->max_entries = 1024;
    if (c->page_bytes == 0) c->page_bytes = 1u << 20;
    if (c->index_tokens <= 0) c->index_tokens = 8 * (int64_t)(c->n_ctx > 0 ? c->n_ctx : 1);
    if (c->disk_dir && !*c->disk_dir) c->disk_dir = NULL;
    if (c->disk_dir && c->disk_bytes == 0) c->disk_bytes = 4 * c->ram_bytes;
    if (c->state_bytes == 0 || c->n_ctx < 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "prefix cache: state bytes %llu, context %d (both must be > 0)",
                            (unsigned long long)c->state_bytes, c->n_ctx);
    if (c->disk_dir && c->ram_bytes == 0)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--cache-dir needs a RAM tier too: give --cache-ram SIZE");
    if (c->disk_dir && strlen(c->disk_dir) > 900)
        return snug_err_set(err, SNUG_ERR_INVALID, "--cache-dir: path too long");
    if (c->kv_row_bytes > c->page_bytes) c->page_bytes = c->kv_row_bytes;
    if (c->kv_row_bytes) c->page_bytes = c->page_bytes / c->kv_row_bytes * c->kv_row_bytes;
    if (c->ram_bytes && c->ram_bytes / c->page_bytes > INT32_MAX / 2)
        return snug_err_set(err, SNUG_ERR_INVALID, "--cache-ram %llu bytes: too many pages",
                            (unsigned long long)c->ram_bytes);
    return SNUG_OK;
}

static struct snug_prefix_index_cfg index_cfg(const struct snug_prefix_cfg *c) {
    return (struct snug_prefix_index_cfg){
        .block = c->block_tokens, .max_tokens = c->index_tokens, .max_points = c->max_entries};
}

/* The RAM tier's pages are touched only as checkpoints fill them (the tier is in the plan, not
 * resident): ask the kernel for huge pages there, so a checkpoint of a large model's states
 * (~150 MB for the 27B) takes a few hundred page faults, not tens of thousands of 4 KiB ones
 * on the engine thread. Advice only: where transparent huge pages are off nothing changes. */
static void advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t pg = ps > 0 ? (uintptr_t)ps : 4096u;
    uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), end = ((uintptr_t)p + n) & ~(pg - 1);
    if (end > a) (void)madvise((void *)a, end - a, MADV_HUGEPAGE);
#else
    (void)p, (void)n;
#endif
}

static uint64_t n_pages_of(const struct snug_prefix_cfg *c) {
    return c->ram_bytes / c->page_bytes;
}

static uint64_t bookkeeping_bytes(const struct snug_prefix_cfg *c) {
    uint64_t np = n_pages_of(c);
    return SNUG_ALIGN_UP((uint64_t)c->max_entries * sizeof(struct pfx_entry), 64) +
           SNUG_ALIGN_UP(np * sizeof(int32_t), 64) + (c->disk_dir ? c->page_bytes : 0) +
           (c->device ? c->page_bytes : 0) +
           SNUG_ALIGN_UP((uint64_t)c->n_ctx * sizeof(snug_token), 64) +
           SNUG_ALIGN_UP((uint64_t)c->max_entries * sizeof(int32_t), 64) + 6 * 64;
}

uint64_t snug_prefix_bytes(const struct snug_prefix_cfg *c) {
    if (!c->ram_bytes) return 0;
    return n_pages_of(c) * c->page_bytes + bookkeeping_bytes(c) +
           snug_prefix_index_bytes(&(struct snug_prefix_index_cfg){.block = c->block_tokens,
                                                                   .max_tokens = c->index_tokens,
                                                                   .max_points = c->max_entries});
}

/* ==== entries and pages ===================================================================== */

static int32_t state_pages(const struct snug_prefix *pc) {
    return (int32_t)((pc->cfg.state_bytes + pc->page_bytes - 1) / pc->page_bytes);
}

static int32_t pages_for(const struct snug_prefix *pc, int32_t n_rows) {
    return state_pages(pc) + (n_rows + pc->rows_per_page - 1) / pc->rows_per_page;
}

/* KEY-POS.snugpfx, or while it is written KEY-POS.snugpfx.PID.tmp (the writer's process id:
 * a later boot removes the temporaries of writers that are gone, load_dir). */
static void file_path(const struct snug_prefix *pc, const struct pfx_entry *e, bool tmp, char *out,
                      size_t n) {
    if (tmp)
        snprintf(out, n, "%s/%016llx-%d%s.%ld.tmp", pc->dir, (unsigned long long)e->key, e->pos,
                 PFX_EXT, (long)getpid());
    else
        snprintf(out, n, "%s/%016llx-%d%s", pc->dir, (unsigned long long)e->key, e->pos, PFX_EXT);
}

static void stats_sync(struct snug_prefix *pc) {
    uint64_t re = 0, rb = 0, de = 0, db = 0;
    for (int32_t i = 0; i < pc->cfg.max_entries; i++) {
        const struct pfx_entry *e = &pc->entries[i];
        if (!e->used) continue;
        if (e->n_pages) {
            re++;
            rb += (uint64_t)e->n_pages * pc->page_bytes;
        }
        if (e->on_disk) {
            de++;
            db += e->disk_bytes;
        }
    }
    pthread_mutex_lock(&pc->mu);
    pc->st.ram_entries = re;
    pc->st.ram_bytes = rb;
    pc->st.disk_entries = de;
    pc->st.disk_bytes = db;
    pc->st.disk_other_bytes = pc->disk_other;
    pc->st.index_evictions = pc->ix.n_evicted_nodes;
    pthread_mutex_unlock(&pc->mu);
}

#define STAT_ADD(pc, field, v)                                                                     \
    do {                                                                                           \
        pthread_mutex_lock(&(pc)->mu);                                                             \
        (pc)->st.field += (v);                                                                     \
        pthread_mutex_unlock(&(pc)->mu);                                                           \
    } while (0)

static void pages_release(struct snug_prefix *pc, struct pfx_entry *e) {
    int32_t p = e->first_page;
    while (p >= 0) {
        int32_t next = pc->page_next[p];
        pc->page_next[p] = pc->free_page;
        pc->free_page = p;
        pc->n_free_pages++;
        p = next;
    }
    e->first_page = -1;
    e->n_pages = 0;
}

/* The folder's cache bytes: the entries' files and the other cache files counted at boot. */
static uint64_t disk_used(const struct snug_prefix *pc) {
    uint64_t b = pc->disk_other;
    for (int32_t i = 0; i < pc->cfg.max_entries; i++)
        if (pc->entries[i].used && pc->entries[i].on_disk) b += pc->entries[i].disk_bytes;
    return b;
}

static void file_remove(struct snug_prefix *pc, struct pfx_entry *e) {
    char path[1100];
    file_path(pc, e, false, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        snug_log(SNUG_LOG_WARN, "prefix cache: cannot remove %s: %s\n", path, strerror(errno));
    e->on_disk = false;
    e->disk_bytes = 0;
}

/* Drop entry i and every descendant from all tiers. */
static void entry_drop(struct snug_prefix *pc, int32_t i) {
    for (int32_t c = 0; c < pc->cfg.max_entries; c++)
        if (pc->entries[c].used && pc->entries[c].parent == i) entry_drop(pc, c);
    struct pfx_entry *e = &pc->entries[i];
    if (e->point >= 0) snug_prefix_index_remove_point(&pc->ix, e->point);
    pages_release(pc, e);
    if (e->on_disk) file_remove(pc, e);
    memset(e, 0, sizeof *e);
    e->parent = e->point = e->first_page = -1;
}

static void on_point_evicted(void *user, int32_t point, uint64_t handle) {
    struct snug_prefix *pc = user;
    int32_t i = (int32_t)handle;
    if (i < 0 || i >= pc->cfg.max_entries || !pc->entries[i].used) return;
    pc->entries[i].point = -1;
    entry_drop(pc, i);
}

static void chain_touch(struct snug_prefix *pc, int32_t i, uint64_t now) {
    for (; i >= 0; i = pc->entries[i].parent) pc->entries[i].last_used = now;
}

static bool has_child(const struct snug_prefix *pc, int32_t i) {
    for (int32_t c = 0; c < pc->cfg.max_entries; c++)
        if (pc->entries[c].used && pc->entries[c].parent == i) return true;
    return false;
}

/* The least recently used entry older than now, in RAM (tier 0) or on disk (tier 1), or any
 * (2); or -1. On disk, an entry held only there whose descendants live on is not a victim:
 * dropping it would drop them (their KV rows start where its end), so its leaves go first. */
static int32_t lru_victim(const struct snug_prefix *pc, uint64_t now, int tier) {
    int32_t v = -1;
    for (int32_t i = 0; i < pc->cfg.max_entries; i++) {
        const struct pfx_entry *e = &pc->entries[i];
        if (!e->used || e->last_used >= now) continue;
        if (tier == 0 && !e->n_pages) continue;
        if (tier == 1 && !e->on_disk) continue;
        if (tier == 1 && !e->n_pages && (v < 0 || e->last_used < pc->entries[v].last_used) &&
            has_child(pc, i))
            continue;
        if (v < 0 || e->last_used < pc->entries[v].last_used) v = i;
    }
    return v;
}

static void evict_ram(struct snug_prefix *pc, int32_t i) {
    struct pfx_entry *e = &pc->entries[i];
    STAT_ADD(pc, ram_evictions, 1);
    if (e->on_disk)
        pages_release(pc, e);
    else
        entry_drop(pc, i);
}

static void evict_disk(struct snug_prefix *pc, int32_t i) {
    struct pfx_entry *e = &pc->entries[i];
    STAT_ADD(pc, disk_evictions, 1);
    if (e->n_pages)
        file_remove(pc, e);
    else
        entry_drop(pc, i);
}

/* A free entry (evicting the least recently used one older than now), or -1. */
static int32_t entry_alloc(struct snug_prefix *pc, uint64_t now) {
    for (int32_t i = 0; i < pc->cfg.max_entries; i++)
        if (!pc->entries[i].used) return i;
    int32_t v = lru_victim(pc, now, 2);
    if (v < 0) return -1;
    entry_drop(pc, v);
    return v;
}

/* ==== init ================================================================================== */

static int load_dir(struct snug_prefix *pc);

int snug_prefix_init(struct snug_prefix *pc, const struct snug_prefix_cfg *cfg_in,
                     struct snug_err *err) {
    memset(pc, 0, sizeof *pc);
    pthread_mutex_init(&pc->mu, NULL);
    pc->cfg = *cfg_in;
    int rc = snug_prefix_cfg_resolve(&pc->cfg, err);
    if (rc) return rc;
    const struct snug_prefix_cfg *c = &pc->cfg;
    if (!c->ram_bytes) return SNUG_OK; /* disabled: lookups miss, stores keep nothing */
    pc->page_bytes = c->page_bytes;
    pc->rows_per_page = c->kv_row_bytes ? (int32_t)(c->page_bytes / c->kv_row_bytes) : 1;
    pc->n_pages = (int32_t)n_pages_of(c);
    if (pc->n_pages < 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "--cache-ram %llu bytes is less than one %llu-byte page",
                            (unsigned long long)c->ram_bytes, (unsigned long long)c->page_bytes);
    struct snug_prefix_index_cfg icfg = index_cfg(c);
    icfg.on_point_evicted = on_point_evicted;
    icfg.user = pc;
    rc = snug_prefix_index_init(&pc->ix, &icfg, err);
    if (rc) return rc;
    rc = snug_arena_init(&pc->arena, "prefix cache",
                         (size_t)((uint64_t)pc->n_pages * pc->page_bytes + bookkeeping_bytes(c)),
                         err);
    if (rc) {
        snug_prefix_index_free(&pc->ix);
        return rc;
    }
    pc->entries = snug_arena_alloc(&pc->arena, (size_t)c->max_entries * sizeof *pc->entries, 64);
    pc->page_next = snug_arena_alloc(&pc->arena, (size_t)pc->n_pages * sizeof(int32_t), 64);
    pc->pages = snug_arena_alloc(&pc->arena, (size_t)pc->n_pages * pc->page_bytes, 64);
    advise_huge(pc->pages, (size_t)pc->n_pages * pc->page_bytes);
    pc->chain = snug_arena_alloc(&pc->arena, (size_t)c->max_entries * sizeof(int32_t), 64);
    pc->tokbuf = snug_arena_alloc(&pc->arena, (size_t)c->n_ctx * sizeof(snug_token), 64);
    if (c->disk_dir) pc->staging = snug_arena_alloc(&pc->arena, pc->page_bytes, 64);
    if (c->device) pc->device_staging = snug_arena_alloc(&pc->arena, pc->page_bytes, 64);
    for (int32_t i = 0; i < c->max_entries; i++) {
        memset(&pc->entries[i], 0, sizeof pc->entries[i]);
        pc->entries[i].parent = pc->entries[i].point = pc->entries[i].first_page = -1;
    }
    for (int32_t p = 0; p < pc->n_pages; p++) pc->page_next[p] = p + 1 < pc->n_pages ? p + 1 : -1;
    pc->free_page = 0;
    pc->n_free_pages = pc->n_pages;
    pc->st.ram_capacity = (uint64_t)pc->n_pages * pc->page_bytes;
    memcpy(pc->expect.model_id, c->model_id, SNUG_PREFIX_ID_BYTES);
    memcpy(pc->expect.layout, c->layout, SNUG_PREFIX_LAYOUT_BYTES);
    pc->expect.layout[SNUG_PREFIX_LAYOUT_BYTES - 1] = 0;
    pc->expect.state_bytes = c->state_bytes;
    pc->expect.kv_row_bytes = c->kv_row_bytes;
    pc->expect.n_ctx = c->n_ctx;
    if (c->disk_dir) {
        snprintf(pc->dir, sizeof pc->dir, "%s", c->disk_dir);
        pc->st.disk_capacity = c->disk_bytes;
        if (mkdir(pc->dir, 0755) != 0 && errno != EEXIST) {
            snug_err_set(err, SNUG_ERR_IO, "--cache-dir %s: cannot create: %s", pc->dir,
                         strerror(errno));
            snug_prefix_free(pc);
            return SNUG_ERR_IO;
        }
        rc = load_dir(pc);
        if (rc) {
            snug_err_set(err, rc, "--cache-dir %s: cannot read the folder", pc->dir);
            snug_prefix_free(pc);
            return rc;
        }
    }
    stats_sync(pc);
    return SNUG_OK;
}

void snug_prefix_free(struct snug_prefix *pc) {
    if (!pc) return;
    snug_prefix_index_free(&pc->ix);
    snug_arena_free(&pc->arena);
    pthread_mutex_destroy(&pc->mu);
    memset(pc, 0, sizeof *pc);
}

/* ==== disk files ============================================================================ */

static int read_full(int fd, void *buf, size_t n, uint64_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, n - got, (off_t)(off + got));
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n, uint64_t off) {
    size_t put = 0;
    while (put < n) {
        ssize_t r = pwrite(fd, (const uint8_t *)buf + put, n - put, (off_t)(off + put));
        if (r <= 0) return -1;
        put += (size_t)r;
    }
    return 0;
}

/* Write entry i (in RAM) with tokens toks[0..pos) to its file: temporary name, fsync,
 * rename, fsync of the folder. false on any failure (the temporary file is removed). */
static bool file_write(struct snug_prefix *pc, int32_t i, const snug_token *toks) {
    struct pfx_entry *e = &pc->entries[i];
    char tmp[1100], fin[1100];
    file_path(pc, e, true, tmp, sizeof tmp);
    file_path(pc, e, false, fin, sizeof fin);
    int fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) {
        snug_log(SNUG_LOG_WARN, "prefix cache: cannot create %s: %s\n", tmp, strerror(errno));
        return false;
    }
    bool ok = true;
    uint64_t off = SNUG_PREFIX_HEADER_BYTES;
    uint32_t crc = 0;
    /* tokens as little-endian int32 (the host order on every target snug builds for) */
    size_t tb = (size_t)e->pos * sizeof(snug_token);
    ok = ok && !write_full(fd, toks, tb, off);
    crc = snug_crc32c(crc, toks, tb);
    off += tb;
    uint64_t state_left = pc->cfg.state_bytes;
    int32_t rows_left = e->pos - e->base;
    for (int32_t p = e->first_page; p >= 0 && ok; p = pc->page_next[p]) {
        const uint8_t *pg = pc->pages + (size_t)p * pc->page_bytes;
        size_t n;
        if (state_left) {
            n = (size_t)SNUG_MIN(state_left, pc->page_bytes);
            state_left -= n;
        } else {
            int32_t r = SNUG_MIN(rows_left, pc->rows_per_page);
            rows_left -= r;
            n = (size_t)r * pc->cfg.kv_row_bytes;
        }
        ok = !write_full(fd, pg, n, off);
        crc = snug_crc32c(crc, pg, n);
        off += n;
    }
    struct snug_prefix_file_header h = {0};
    memcpy(h.model_id, pc->cfg.model_id, SNUG_PREFIX_ID_BYTES);
    memcpy(h.layout, pc->expect.layout, SNUG_PREFIX_LAYOUT_BYTES);
    h.state_bytes = pc->cfg.state_bytes;
    h.kv_row_bytes = pc->cfg.kv_row_bytes;
    h.pos = e->pos;
    h.base = e->base;
    h.key = e->key;
    h.parent_key = e->parent_key;
    h.payload_bytes = off - SNUG_PREFIX_HEADER_BYTES;
    h.payload_crc = crc;
    h.rope_delta = e->rope_delta;
    uint8_t hb[SNUG_PREFIX_HEADER_BYTES];
    snug_prefix_file_header_write(&h, hb);
    ok = ok && !write_full(fd, hb, sizeof hb, 0);
    ok = ok && fsync(fd) == 0;
    ok = (close(fd) == 0) && ok;
    ok = ok && rename(tmp, fin) == 0;
    if (!ok) {
        snug_log(SNUG_LOG_WARN, "prefix cache: writing %s failed: %s\n", fin, strerror(errno));
        unlink(tmp);
        return false;
    }
    int dfd = open(pc->dir, O_RDONLY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    e->on_disk = true;
    e->disk_bytes = off;
    e->payload_crc = crc;
    return true;
}

/* Verify entry i's file: header against this run, payload CRC, tokens equal toks[0..pos). */
static bool file_verify(struct snug_prefix *pc, int32_t i, const snug_token *toks) {
    struct pfx_entry *e = &pc->entries[i];
    char path[1100];
    file_path(pc, e, false, path, sizeof path);
    struct snug_err err = {0};
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snug_log(SNUG_LOG_WARN, "prefix cache: %s: cannot open: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return false;
    }
    uint8_t hb[SNUG_PREFIX_HEADER_BYTES];
    struct snug_prefix_file_header h;
    bool ok = !read_full(fd, hb, sizeof hb, 0) &&
              snug_prefix_file_header_parse(hb, sizeof hb, (uint64_t)st.st_size, &pc->expect, &h,
                                            &err) == SNUG_OK;
    if (ok && (h.pos != e->pos || h.base != e->base || h.key != e->key ||
               h.rope_delta != e->rope_delta)) {
        snprintf(err.msg, sizeof err.msg, "header names another checkpoint");
        ok = false;
    }
    uint32_t crc = 0;
    uint64_t off = SNUG_PREFIX_HEADER_BYTES, end = off + (ok ? h.payload_bytes : 0);
    uint64_t tok_end = off + (uint64_t)e->pos * sizeof(snug_token);
    while (ok && off < end) {
        size_t n = (size_t)SNUG_MIN(pc->page_bytes, end - off);
        if (read_full(fd, pc->staging, n, off)) {
            snprintf(err.msg, sizeof err.msg, "read failed (truncated?)");
            ok = false;
            break;
        }
        crc = snug_crc32c(crc, pc->staging, n);
        if (off < tok_end) { /* compare the tokens in this piece */
            uint64_t t0 = (off - SNUG_PREFIX_HEADER_BYTES), t1 = SNUG_MIN(off + n, tok_end);
            if (memcmp(pc->staging, (const uint8_t *)toks + t0, (size_t)(t1 - off))) {
                snprintf(err.msg, sizeof err.msg, "tokens differ from the request's");
                ok = false;
            }
        }
        off += n;
    }
    if (ok && crc != h.payload_crc) {
        snprintf(err.msg, sizeof err.msg, "payload checksum mismatch (corrupt file)");
        ok = false;
    }
    close(fd);
    if (!ok) snug_log(SNUG_LOG_WARN, "prefix cache: skipping %s: %s\n", path, err.msg);
    return ok;
}

/* Copy bytes [off, off + n) of entry i's file, in staging-page pieces, to the slot. */
static int file_copy(struct snug_prefix *pc, int fd, uint64_t off, uint64_t n, bool state,
                     const struct snug_prefix_io *io, int32_t row0) {
    uint64_t done = 0;
    uint64_t piece = state ? pc->page_bytes : (uint64_t)pc->rows_per_page * pc->cfg.kv_row_bytes;
    while (done < n) {
        size_t m = (size_t)SNUG_MIN(piece, n - done);
        if (read_full(fd, pc->staging, m, off + done)) return SNUG_ERR_IO;
        int rc = state ? io->state_in(io->user, done, pc->staging, m)
                       : io->kv_in(io->user, row0 + (int32_t)(done / pc->cfg.kv_row_bytes),
                                   (int32_t)(m / pc->cfg.kv_row_bytes), pc->staging);
        if (rc) return rc;
        done += m;
    }
    return SNUG_OK;
}

/* Whether `name` is a checkpoint file's temporary (file_path): 0 no; 1 its writer may still run
 * (a live process id); -1 its writer is gone (a dead process id, or the name without one). */
static int temporary_of(const char *name) {
    const char *p = name;
    for (int i = 0; i < 16; i++, p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return 0;
    if (*p++ != '-' || *p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (strncmp(p, PFX_EXT, strlen(PFX_EXT))) return 0;
    p += strlen(PFX_EXT);
    if (!strcmp(p, ".tmp")) return -1;
    if (*p++ != '.' || *p < '1' || *p > '9') return 0;
    char *end;
    long pid = strtol(p, &end, 10);
    if (strcmp(end, ".tmp") || pid <= 0 || pid > INT32_MAX) return 0;
    if (pid == (long)getpid()) return 1;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM ? 1 : -1;
}

/* At load: last_used orders the entries by their files' write times, and an entry is at least
 * as recent as any descendant (as chain_touch keeps it), so the disk tier's least recently used
 * victim is the oldest leaf (each entry's last_used holds its file's mtime in ns on entry). */
static void rank_loaded(struct snug_prefix *pc) {
    int32_t n = pc->cfg.max_entries;
    for (;;) {
        int32_t best = -1;
        uint64_t bt = UINT64_MAX;
        for (int32_t i = 0; i < n; i++) {
            const struct pfx_entry *e = &pc->entries[i];
            if (!e->used || e->point != -3) continue; /* ranked already, or not loaded */
            if (best < 0 || e->last_used < bt ||
                (e->last_used == bt && e->pos < pc->entries[best].pos))
                best = i, bt = e->last_used;
        }
        if (best < 0) break;
        pc->entries[best].point = -4; /* (restored below) */
        pc->entries[best].last_used = ++pc->clock;
    }
    for (int32_t i = 0; i < n; i++) {
        struct pfx_entry *e = &pc->entries[i];
        if (!e->used) continue;
        for (int32_t p = e->parent; p >= 0; p = pc->entries[p].parent)
            if (pc->entries[p].last_used < e->last_used) pc->entries[p].last_used = e->last_used;
    }
}

/* Load every valid checkpoint file of the folder (see snug_prefix_init). */
static int load_dir(struct snug_prefix *pc) {
    DIR *d = opendir(pc->dir);
    if (!d) return SNUG_ERR_IO;
    struct dirent *de;
    size_t ext = strlen(PFX_EXT);
    int32_t n_loaded = 0;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", pc->dir, de->d_name);
        int tmp = temporary_of(de->d_name);
        if (tmp < 0) { /* a write cut short (kill -9, power loss): its writer is gone */
            if (unlink(path) == 0) {
                snug_log(SNUG_LOG_INFO, "prefix cache: removed %s (an interrupted write)\n", path);
                STAT_ADD(pc, stale_tmp_removed, 1);
                continue;
            }
            snug_log(SNUG_LOG_WARN, "prefix cache: cannot remove %s: %s\n", path, strerror(errno));
        }
        if (tmp) { /* a live writer's (another server on this folder), or not removable */
            struct stat ts;
            if (stat(path, &ts) == 0) pc->disk_other += (uint64_t)ts.st_size;
            continue;
        }
        if (len <= ext || strcmp(de->d_name + len - ext, PFX_EXT)) continue;
        struct snug_err err = {0};
        struct snug_prefix_file_header h;
        uint8_t hb[SNUG_PREFIX_HEADER_BYTES];
        struct stat st;
        int fd = open(path, O_RDONLY);
        bool ok = fd >= 0 && fstat(fd, &st) == 0;
        if (ok && read_full(fd, hb, sizeof hb, 0)) {
            snprintf(err.msg, sizeof err.msg, "truncated header");
            ok = false;
        } else if (ok) {
            ok = snug_prefix_file_header_parse(hb, sizeof hb, (uint64_t)st.st_size, &pc->expect, &h,
                                               &err) == SNUG_OK;
        }
        if (fd >= 0) close(fd);
        char want[64];
        if (ok) {
            snprintf(want, sizeof want, "%016llx-%d%s", (unsigned long long)h.key, h.pos, PFX_EXT);
            if (strcmp(want, de->d_name)) {
                snprintf(err.msg, sizeof err.msg, "file name does not match its header");
                ok = false;
            }
        }
        int32_t i = ok ? entry_alloc(pc, 0) : -1;
        if (ok && i < 0) snprintf(err.msg, sizeof err.msg, "more files than --cache entries");
        if (!ok || i < 0) { /* left in place (it may be another server's), counted */
            snug_log(SNUG_LOG_WARN, "prefix cache: skipping %s: %s\n", path,
                     err.msg[0] ? err.msg : strerror(errno));
            STAT_ADD(pc, files_refused, 1);
            struct stat rs;
            if (stat(path, &rs) == 0) pc->disk_other += (uint64_t)rs.st_size;
            continue;
        }
        struct pfx_entry *e = &pc->entries[i];
        e->used = true;
        e->on_disk = true;
        e->last_used = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
        e->pos = h.pos;
        e->base = h.base;
        e->key = h.key;
        e->parent_key = h.parent_key;
        e->disk_bytes = (uint64_t)st.st_size;
        e->payload_crc = h.payload_crc;
        e->rope_delta = h.rope_delta;
        e->parent = -1;
        e->point = -2; /* not linked yet */
    }
    closedir(d);
    /* link in position order: parents first. The tokens of each file (read whole) name its
     * place in the index; the parent is the point at exactly `base` on that path. */
    for (;;) {
        int32_t best = -1;
        for (int32_t i = 0; i < pc->cfg.max_entries; i++) {
            const struct pfx_entry *e = &pc->entries[i];
            if (e->used && e->point == -2 && (best < 0 || e->pos < pc->entries[best].pos)) best = i;
        }
        if (best < 0) break;
        struct pfx_entry *e = &pc->entries[best];
        char path[1100];
        file_path(pc, e, false, path, sizeof path);
        const char *why = NULL;
        snug_token *tb = pc->tokbuf;
        int fd = open(path, O_RDONLY);
        if (fd < 0 ||
            read_full(fd, tb, (size_t)e->pos * sizeof(snug_token), SNUG_PREFIX_HEADER_BYTES))
            why = "cannot read its tokens";
        if (fd >= 0) close(fd);
        if (!why) {
            for (int32_t t = 0; t < e->pos && !why; t++)
                if (tb[t] < 0) why = "negative token id";
            if (!why && snug_prefix_tokens_key(tb, e->pos) != e->key)
                why = "tokens do not match the key";
        }
        if (!why && e->base > 0) {
            struct snug_prefix_match m;
            snug_prefix_index_lookup(&pc->ix, tb, e->base, e->base, &m);
            int32_t par = m.point >= 0 ? (int32_t)m.handle : -1;
            if (m.pos != e->base || par < 0 || pc->entries[par].key != e->parent_key)
                why = "its parent checkpoint is missing";
            else
                e->parent = par;
        }
        if (!why) {
            e->point = snug_prefix_index_add_point(&pc->ix, tb, e->pos, (uint64_t)best);
            if (e->point < 0) why = "the index is full";
        }
        if (why) {
            snug_log(SNUG_LOG_WARN, "prefix cache: skipping %s: %s\n", path, why);
            STAT_ADD(pc, files_refused, 1);
            pc->disk_other += e->disk_bytes; /* kept (it may be another run's) and counted */
            e->point = -1;
            e->on_disk = false;
            entry_drop(pc, best);
            continue;
        }
        STAT_ADD(pc, files_loaded, 1);
        n_loaded++;
    }
    /* rank by write time (points are >= 0 now: mark them, rank, put them back) */
    int32_t *points = pc->chain; /* scratch of max_entries */
    for (int32_t i = 0; i < pc->cfg.max_entries; i++) {
        points[i] = pc->entries[i].point;
        if (pc->entries[i].used) pc->entries[i].point = -3;
    }
    rank_loaded(pc);
    for (int32_t i = 0; i < pc->cfg.max_entries; i++) pc->entries[i].point = points[i];
    /* within the budget: every cache byte of the folder counts */
    uint64_t now = ++pc->clock;
    while (disk_used(pc) > pc->cfg.disk_bytes) {
        int32_t v = lru_victim(pc, now, 1);
        if (v < 0) break;
        evict_disk(pc, v);
    }
    int32_t n_kept = 0;
    for (int32_t i = 0; i < pc->cfg.max_entries; i++) n_kept += pc->entries[i].used;
    snug_log(SNUG_LOG_INFO,
             "prefix cache: %d checkpoint files in %s (%d removed to fit --cache-disk; %.1f MiB "
             "of other cache files counted)\n",
             n_kept, pc->dir, n_loaded - n_kept, (double)pc->disk_other / 1048576.0);
    if (disk_used(pc) > pc->cfg.disk_bytes)
        snug_log(SNUG_LOG_WARN,
                 "prefix cache: the folder's other cache files (%.1f MiB: refused files, another "
                 "server's) exceed --cache-disk; no checkpoint will be written to disk\n",
                 (double)pc->disk_other / 1048576.0);
    return SNUG_OK;
}

/* ==== lookup, store, restore ================================================================ */

void snug_prefix_lookup(struct snug_prefix *pc, const snug_token *toks, int32_t n,
                        struct snug_prefix_hit *out) {
    out->n_common = 0;
    out->pos = 0;
    out->entry = -1;
    if (!pc->n_pages || n < 1) return;
    struct snug_prefix_match m;
    snug_prefix_index_lookup(&pc->ix, toks, n, n - 1, &m);
    out->n_common = m.n_common;
    if (m.point >= 0) {
        out->pos = m.pos;
        out->entry = (int32_t)m.handle;
        chain_touch(pc, out->entry, ++pc->clock);
    }
    pthread_mutex_lock(&pc->mu);
    pc->st.lookups++;
    if (m.point >= 0) pc->st.hits++;
    pthread_mutex_unlock(&pc->mu);
}

int snug_prefix_store(struct snug_prefix *pc, const snug_token *toks, int32_t pos,
                      const struct snug_prefix_io *io, bool *stored, struct snug_err *err) {
    *stored = false;
    if (!pc->n_pages) return SNUG_OK;
    if (pos < 1 || pos > pc->cfg.n_ctx)
        return snug_err_set(err, SNUG_ERR_INVALID, "prefix cache: checkpoint at %d of %d", pos,
                            pc->cfg.n_ctx);
    uint64_t now = ++pc->clock;
    struct snug_prefix_match m;
    snug_prefix_index_lookup(&pc->ix, toks, pos, pos, &m);
    if (m.point >= 0 && m.pos == pos) { /* cached already */
        chain_touch(pc, (int32_t)m.handle, now);
        return SNUG_OK;
    }
    int32_t parent = m.point >= 0 ? (int32_t)m.handle : -1;
    int32_t base = parent >= 0 ? m.pos : 0;
    int32_t need = pages_for(pc, pos - base);
    if (need > pc->n_pages) return SNUG_OK; /* larger than the tier */
    chain_touch(pc, parent, now);
    int32_t i = entry_alloc(pc, now);
    if (i < 0) return SNUG_OK;
    while (pc->n_free_pages < need) {
        int32_t v = lru_victim(pc, now, 0);
        if (v < 0) return SNUG_OK;
        evict_ram(pc, v);
    }
    /* the parent may have been dropped with an evicted ancestor's disk-less chain: recheck */
    if (parent >= 0 && !pc->entries[parent].used) return SNUG_OK;
    struct pfx_entry *e = &pc->entries[i];
    memset(e, 0, sizeof *e);
    e->used = true;
    e->pos = pos;
    e->base = base;
    e->parent = parent;
    e->point = -1;
    e->key = snug_prefix_tokens_key(toks, pos);
    e->parent_key = parent >= 0 ? pc->entries[parent].key : 0;
    e->last_used = now;
    e->rope_delta = io->rope_delta_out ? io->rope_delta_out(io->user) : 0;
    /* pages, linked in order */
    e->first_page = -1;
    int32_t *link = &e->first_page;
    for (int32_t k = 0; k < need; k++) {
        int32_t p = pc->free_page;
        pc->free_page = pc->page_next[p];
        pc->n_free_pages--;
        pc->page_next[p] = -1;
        *link = p;
        link = &pc->page_next[p];
    }
    e->n_pages = need;
    int rc = SNUG_OK;
    uint64_t soff = 0;
    int32_t row = base;
    for (int32_t p = e->first_page; p >= 0 && rc == SNUG_OK; p = pc->page_next[p]) {
        uint8_t *pg = pc->pages + (size_t)p * pc->page_bytes;
        if (soff < pc->cfg.state_bytes) {
            size_t n = (size_t)SNUG_MIN(pc->page_bytes, pc->cfg.state_bytes - soff);
            rc = io->state_out(io->user, soff, pg, n);
            soff += n;
        } else {
            int32_t r = SNUG_MIN(pos - row, pc->rows_per_page);
            rc = io->kv_out(io->user, row, r, pg);
            row += r;
        }
    }
    if (rc == SNUG_OK) e->point = snug_prefix_index_add_point(&pc->ix, toks, pos, (uint64_t)i);
    if (rc != SNUG_OK || e->point < 0 || (parent >= 0 && !pc->entries[parent].used)) {
        entry_drop(pc, i);
        stats_sync(pc);
        if (rc) return snug_err_set(err, rc, "prefix cache: copying the checkpoint out failed");
        return SNUG_OK;
    }
    if (pc->staging) {
        uint64_t size = SNUG_PREFIX_HEADER_BYTES + (uint64_t)pos * sizeof(snug_token) +
                        pc->cfg.state_bytes + (uint64_t)(pos - base) * pc->cfg.kv_row_bytes;
        if (size <= pc->cfg.disk_bytes) {
            while (disk_used(pc) + size > pc->cfg.disk_bytes) {
                int32_t v = lru_victim(pc, now, 1);
                if (v < 0) break;
                evict_disk(pc, v);
            }
            if (disk_used(pc) + size <= pc->cfg.disk_bytes && pc->entries[i].used) {
                bool ok = file_write(pc, i, toks);
                STAT_ADD(pc, disk_writes, ok ? 1 : 0);
                STAT_ADD(pc, disk_write_failures, ok ? 0 : 1);
            }
        }
    }
    *stored = pc->entries[i].used;
    STAT_ADD(pc, stores, 1);
    stats_sync(pc);
    return SNUG_OK;
}

int snug_prefix_restore(struct snug_prefix *pc, const snug_token *toks,
                        const struct snug_prefix_hit *hit, bool want_kv,
                        const struct snug_prefix_io *io, struct snug_err *err) {
    int32_t top = hit->entry;
    if (!pc->n_pages || top < 0 || top >= pc->cfg.max_entries || !pc->entries[top].used ||
        pc->entries[top].pos != hit->pos)
        return snug_err_set(err, SNUG_ERR_INVALID, "prefix cache: no such checkpoint");
    uint64_t now = ++pc->clock;
    chain_touch(pc, top, now);
    /* chain[0] is the checkpoint, chain[n_chain - 1] the root (at most max_entries links) */
    int32_t *chain = pc->chain, n_chain = 0;
    for (int32_t i = top; i >= 0 && n_chain < pc->cfg.max_entries; i = pc->entries[i].parent)
        chain[n_chain++] = i;
    /* verify the disk links before touching the slot */
    for (int32_t k = 0; k < n_chain; k++) {
        int32_t i = chain[k];
        if (pc->entries[i].n_pages || (k > 0 && !want_kv)) continue;
        if (!file_verify(pc, i, toks)) {
            entry_drop(pc, i);
            STAT_ADD(pc, restore_failures, 1);
            stats_sync(pc);
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "prefix cache: a checkpoint file failed its check (skipped)");
        }
    }
    int rc = SNUG_OK;
    for (int32_t k = n_chain - 1; k >= 0 && rc == SNUG_OK; k--) {
        const struct pfx_entry *e = &pc->entries[chain[k]];
        bool do_state = k == 0;
        if (!do_state && !want_kv) continue;
        if (e->n_pages) {
            uint64_t soff = 0;
            int32_t row = e->base;
            for (int32_t p = e->first_page; p >= 0 && rc == SNUG_OK; p = pc->page_next[p]) {
                const uint8_t *pg = pc->pages + (size_t)p * pc->page_bytes;
                if (soff < pc->cfg.state_bytes) {
                    size_t n = (size_t)SNUG_MIN(pc->page_bytes, pc->cfg.state_bytes - soff);
                    if (do_state) rc = io->state_in(io->user, soff, pg, n);
                    soff += n;
                } else {
                    if (!want_kv) break;
                    int32_t r = SNUG_MIN(e->pos - row, pc->rows_per_page);
                    rc = io->kv_in(io->user, row, r, pg);
                    row += r;
                }
            }
        } else {
            char path[1100];
            file_path(pc, e, false, path, sizeof path);
            int fd = open(path, O_RDONLY);
            if (fd < 0) {
                rc = SNUG_ERR_IO;
                break;
            }
            uint64_t off = SNUG_PREFIX_HEADER_BYTES + (uint64_t)e->pos * sizeof(snug_token);
            if (do_state) rc = file_copy(pc, fd, off, pc->cfg.state_bytes, true, io, 0);
            if (rc == SNUG_OK && want_kv)
                rc = file_copy(pc, fd, off + pc->cfg.state_bytes,
                               (uint64_t)(e->pos - e->base) * pc->cfg.kv_row_bytes, false, io,
                               e->base);
            close(fd);
        }
    }
    if (rc == SNUG_OK && io->rope_delta_in)
        rc = io->rope_delta_in(io->user, pc->entries[top].rope_delta);
    if (rc) {
        STAT_ADD(pc, restore_failures, 1);
        return snug_err_set(err, rc, "prefix cache: copying the checkpoint in failed");
    }
    STAT_ADD(pc, restores, 1);
    return SNUG_OK;
}

void snug_prefix_note_prompt(struct snug_prefix *pc, int32_t reused, int32_t evaluated) {
    pthread_mutex_lock(&pc->mu);
    pc->st.tokens_reused += (uint64_t)(reused > 0 ? reused : 0);
    pc->st.tokens_evaluated += (uint64_t)(evaluated > 0 ? evaluated : 0);
    pthread_mutex_unlock(&pc->mu);
}

void snug_prefix_stats(struct snug_prefix *pc, struct snug_prefix_stats *out) {
    pthread_mutex_lock(&pc->mu);
    *out = pc->st;
    pthread_mutex_unlock(&pc->mu);
}

/* cmd_info.c — `snug info -m M.gguf`: what is inside a GGUF file, on stdout.
 *
 * Prints the architecture, every metadata key (scalars in full, strings quoted and shortened,
 * arrays as type[count] plus the first few values; tokenizer arrays only as type[count]), a
 * tensor table (name, type, shape, bytes, file part) and totals per tensor type and overall.
 * Reads only through the validating reader (src/gguf/gguf.h), so a malformed file is reported,
 * not printed. Read next: src/gguf/gguf.h. */
#include "cli.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define INFO_MAX_STR   80 /* characters of a string value shown */
#define INFO_ARR_SHOWN 6  /* leading array elements shown */
#define GIB            (1024.0 * 1024.0 * 1024.0)

/* Print a string value quoted, escaping control characters, at most `max` bytes. */
static void print_str(const char *s, uint64_t len, uint64_t max) {
    putchar('"');
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            printf("\\n");
        else if (c < 0x20 || c == 0x7f)
            printf("\\x%02x", c);
        else
            putchar(c);
    }
    putchar('"');
    if (len > max) printf("... (%" PRIu64 " bytes)", len);
}

/* Print element j of a numeric array (or a scalar, j = 0). */
static void print_num(enum snug_gguf_type t, const void *data, uint64_t j) {
    if (t == SNUG_GGUF_FLOAT32 || t == SNUG_GGUF_FLOAT64)
        printf("%g", snug_gguf_arr_f64(t, data, j));
    else if (t == SNUG_GGUF_BOOL)
        printf("%s", snug_gguf_arr_i64(t, data, j) ? "true" : "false");
    else if (t == SNUG_GGUF_UINT64)
        printf("%.0f", snug_gguf_arr_f64(t, data, j));
    else
        printf("%" PRId64, snug_gguf_arr_i64(t, data, j));
}

/* One metadata line: "  key = value" / "  key = type[count] [v0, v1, ...]". */
static void print_kv(const struct snug_gguf *g, int64_t i) {
    const char *key = snug_gguf_key_name(g, i);
    enum snug_gguf_type t = snug_gguf_key_type(g, i);
    struct snug_err err = {0};
    printf("  %-48s ", key);
    if (t == SNUG_GGUF_STRING) {
        struct snug_gguf_str s;
        if (snug_gguf_get_str(g, key, &s, &err) == SNUG_OK) print_str(s.data, s.len, INFO_MAX_STR);
    } else if (t == SNUG_GGUF_ARRAY) {
        enum snug_gguf_type et;
        uint64_t n;
        snug_gguf_key_arr_info(g, i, &et, &n);
        printf("%s[%" PRIu64 "]", snug_gguf_type_name(et), n);
        const void *data;
        bool tokenizer = !strncmp(key, "tokenizer.", 10);
        if (!tokenizer && et != SNUG_GGUF_ARRAY &&
            snug_gguf_get_arr(g, key, &et, &n, &data, &err) == SNUG_OK && n > 0) {
            printf(" [");
            for (uint64_t j = 0; j < n && j < INFO_ARR_SHOWN; j++) {
                if (j) printf(", ");
                if (et == SNUG_GGUF_STRING) {
                    struct snug_gguf_str s;
                    if (snug_gguf_arr_str(g, key, j, &s) == SNUG_OK) print_str(s.data, s.len, 24);
                } else {
                    print_num(et, data, j);
                }
            }
            printf("%s]", n > INFO_ARR_SHOWN ? ", ..." : "");
        }
    } else {
        const void *raw;
        uint64_t n;
        if (snug_gguf_kv_raw(g, i, &raw, &n) == SNUG_OK) print_num(t, raw, 0);
        printf("  (%s)", snug_gguf_type_name(t));
    }
    putchar('\n');
}

/* Format a shape as "[a, b, c]" into buf. */
static void fmt_shape(const struct snug_gguf_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, d ? ", " : "", t->ne[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

enum { O_MODEL = 1, O_NO_TENSORS };
static const struct cli_opt OPTS[] = {
    {.id = O_MODEL,
     .names = "-m, --model",
     .kind = CLI_TEXT,
     .meta = "M.gguf",
     .help = "the GGUF file (or give it as the argument); a split file's first part"},
    {.id = O_NO_TENSORS,
     .names = "--no-tensors",
     .kind = CLI_SWITCH,
     .help = "leave out the tensor table (the totals stay)"},
    {0},
};
const struct cli_command cli_cmd_info = {
    .name = "info",
    .run = cmd_info,
    .usage = "-m M.gguf [--no-tensors]",
    .summary = "architecture, hyper-parameters, tensor types and sizes of a GGUF file",
    .about = "architecture, every metadata key, the tensor table (name, type, shape, bytes, "
             "file part) and the totals per tensor type, on stdout",
    .opts = OPTS,
    .max_positional = 1,
};

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = true;
    struct cli_args p;
    struct cli_val v;
    int r;
    cli_args_init(&p, &cli_cmd_info, argc, argv);
    while ((r = cli_args_next(&p, &v)) > 0 || r == CLI_POSITIONAL) {
        if (r == O_MODEL || r == CLI_POSITIONAL) path = v.s;
        if (r == O_NO_TENSORS) tensors = false;
    }
    if (r != CLI_END) return CLI_EXIT(r);
    if (!path) return cli_usage_error(&cli_cmd_info, "-m M.gguf is required");

    struct snug_err err = {0};
    struct snug_gguf *g = NULL;
    if (snug_gguf_open(&g, path, &err) != SNUG_OK) return cli_fail("info", &err);

    struct snug_gguf_str arch = {0, ""};
    snug_gguf_get_str(g, "general.architecture", &arch, &err);
    printf("file:          %s\n", snug_gguf_path(g));
    printf("parts:         %u\n", snug_gguf_n_files(g));
    printf("file bytes:    %" PRIu64 " (%.3f GiB)\n", snug_gguf_file_bytes(g),
           (double)snug_gguf_file_bytes(g) / GIB);
    printf("architecture:  %.*s\n", (int)(arch.len > 200 ? 200 : arch.len), arch.data);
    printf("alignment:     %u\n", snug_gguf_alignment(g));
    printf("\nmetadata (%" PRId64 " keys):\n", snug_gguf_n_kv(g));
    for (int64_t i = 0; i < snug_gguf_n_kv(g); i++) print_kv(g, i);

    uint64_t type_bytes[SNUG_DTYPE_COUNT] = {0}, type_count[SNUG_DTYPE_COUNT] = {0};
    uint64_t total = 0, total_elems = 0;
    int64_t nt = snug_gguf_n_tensors(g);
    printf("\ntensors (%" PRId64 "):\n", nt);
    if (tensors && nt > 0)
        printf("  %-48s %-8s %-28s %14s %s\n", "name", "type", "shape", "bytes", "part");
    for (int64_t i = 0; i < nt; i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        const struct snug_dtype_info *di = snug_dtype_info(t->type);
        type_bytes[t->type] += t->n_bytes; /* the reader guarantees t->type < COUNT */
        type_count[t->type]++;
        total += t->n_bytes;
        total_elems += t->n_elems;
        if (!tensors) continue;
        char shape[128];
        fmt_shape(t, shape, sizeof shape);
        printf("  %-48s %-8s %-28s %14" PRIu64 " %u\n", t->name, di ? di->name : "?", shape,
               t->n_bytes, t->file_idx);
    }
    printf("\ntotals by type:\n");
    for (uint32_t ty = 0; ty < SNUG_DTYPE_COUNT; ty++) {
        if (!type_count[ty]) continue;
        printf("  %-8s %6" PRIu64 " tensors %16" PRIu64 " bytes %10.4f GiB\n",
               snug_dtype_info(ty)->name, type_count[ty], type_bytes[ty],
               (double)type_bytes[ty] / GIB);
    }
    printf("  %-8s %6" PRId64 " tensors %16" PRIu64 " bytes %10.4f GiB  (%" PRIu64
           " parameters, %.3f bits each)\n",
           "total", nt, total, (double)total / GIB, total_elems,
           total_elems ? 8.0 * (double)total / (double)total_elems : 0.0);
    snug_gguf_close(g);
    return 0;
}

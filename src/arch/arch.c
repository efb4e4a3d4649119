/* arch.c — what every architecture shares: the registry (name → struct snug_arch) and the
 * tensor lookup with shape checks that each architecture's load calls.
 * Invariant: a tensor handed out by snug_model_tensor has the asked shape and a type the ops
 * compute (or F32 when asked). Read next: arch.h, qwen35.c (a registry entry).
 */
#include "arch/arch.h"

#include "quant/quant.h"

#include <stdio.h>
#include <string.h>

/* ---- registry ----------------------------------------------------------------------------- */
static const struct snug_arch *const ARCHS[] = {
    &snug_arch_qwen35,
    &snug_arch_qwen35moe,
};

const struct snug_arch *snug_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i]->name, name)) return ARCHS[i];
    return NULL;
}

/* ---- tensor lookup with shape checks ------------------------------------------------------ */
static void fmt_shape(char *buf, size_t n, int n_dims, const int64_t *ne) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

int snug_model_tensor(const struct snug_model *m, snug_tensor *out, const char *name, bool required,
                      bool f32_only, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                      struct snug_err *err) {
    *out = NULL;
    const struct snug_gguf_tensor *t = snug_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required) return SNUG_OK;
        return snug_err_set(err, SNUG_ERR_FORMAT, "tensor '%s' is missing (architecture %s)", name,
                            m->hp.arch);
    }
    int64_t want[SNUG_GGUF_MAX_DIMS] = {ne0, ne1, ne2, 1};
    bool ok = true;
    for (int i = 0; i < SNUG_GGUF_MAX_DIMS; i++) {
        int64_t w = i < n_dims ? want[i] : 1;
        if ((int64_t)t->ne[i] != w) ok = false;
    }
    if (!ok) {
        char a[96], b[96];
        int64_t got[SNUG_GGUF_MAX_DIMS];
        for (int i = 0; i < SNUG_GGUF_MAX_DIMS; i++) got[i] = (int64_t)t->ne[i];
        fmt_shape(a, sizeof a, n_dims, want);
        fmt_shape(b, sizeof b, (int)SNUG_MAX(t->n_dims, 1), got);
        return snug_err_set(err, SNUG_ERR_FORMAT, "tensor '%s': expected shape %s, got %s", name, a,
                            b);
    }
    const struct snug_dtype_info *ti = snug_dtype_info(t->type);
    if (f32_only && t->type != SNUG_DTYPE_F32)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "tensor '%s': type %s, expected f32", name,
                            ti ? ti->name : "unknown");
    if (!ti || !ti->computable)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "tensor '%s': type %s is not supported for computation", name,
                            ti ? ti->name : "unknown");
    *out = t;
    return SNUG_OK;
}

int snug_model_blk_tensor(const struct snug_model *m, snug_tensor *out, int il, const char *suffix,
                          bool required, bool f32_only, int n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2, struct snug_err *err) {
    char name[160];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return snug_model_tensor(m, out, name, required, f32_only, n_dims, ne0, ne1, ne2, err);
}

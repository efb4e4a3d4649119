/* plan.c — the memory planner (see plan.h; formulas with their sources in docs/memory.md).
 * Owns nothing: a plan is plain data. Every size comes from the function the allocating code
 * uses itself (snug_kv_bytes for the KV/state arena, the architecture's plan hook for the
 * work arena), so the plan cannot drift from the allocation.
 * Read next: src/model/context.c (allocates from the plan), src/cli/cmd_plan.c (prints it).
 */
#include "plan/plan.h"

#include "backend/backend.h"
#include "kv/kvfmt.h"
#include "model/presets.h"
#include "plan/shard.h"
#include "model/mtp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kvfmt formats in enum order (src/kv/kvfmt.h; a K/V mix is a kvfmt code). */
const char *const snug_plan_kv_names[] = {"f16", "f32", "bf16", "q8_0", "fp8", "tq4", "tq3", NULL};

int snug_plan_kv_parse(const char *name) {
    for (int i = 0; snug_plan_kv_names[i]; i++)
        if (!strcmp(name, snug_plan_kv_names[i])) return i;
    return -1;
}

struct snug_plan_limits snug_plan_limits_default(void) {
    return (struct snug_plan_limits){.n_ctx = 4096, .n_slots = 1, .n_chunk = 512, .n_threads = 1};
}

/* ---- weights ------------------------------------------------------------------------------ */
static void add_weight(struct snug_plan_weights *w, uint32_t type, uint64_t bytes) {
    uint32_t t = type < SNUG_PLAN_MAX_DTYPES ? type : SNUG_PLAN_MAX_DTYPES - 1;
    w->bytes[t] += bytes;
    w->count[t]++;
    w->total += bytes;
}

void snug_plan_weights_from_gguf(const struct snug_gguf *g, struct snug_plan_weights *w) {
    memset(w, 0, sizeof *w);
    for (int64_t i = 0; i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        add_weight(w, t->type, t->n_bytes);
    }
}

static int recipe_tensor(void *user, const struct snug_tensor_desc *t) {
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    add_weight(user, t->type, snug_dtype_row_bytes(t->type, t->ne[0]) * rows);
    return 0;
}

/* One tensor into a rank's weights: its slice, counted as replicated when a copy. */
struct rank_weights {
    const struct snug_hparams *hp;
    struct snug_shard_rank sr;
    struct snug_plan_weights *w;
    struct snug_err *err;
};
static int rank_tensor(struct rank_weights *rw, const char *name, const uint64_t ne[4],
                       uint32_t type) {
    struct snug_shard_slice sl;
    int rc = snug_shard_tensor(&rw->sr, rw->hp, name, ne, type, &sl, rw->err);
    if (rc) return rc;
    add_weight(rw->w, type, sl.bytes);
    if (sl.copy) rw->w->replicated += sl.bytes;
    return SNUG_OK;
}
static int rank_recipe_tensor(void *user, const struct snug_tensor_desc *t) {
    return rank_tensor(user, t->name, t->ne, t->type);
}

int snug_plan_weights_rank_from_gguf(const struct snug_gguf *g, const struct snug_hparams *hp,
                                     int32_t n_ranks, int32_t rank, struct snug_plan_weights *w,
                                     struct snug_err *err) {
    memset(w, 0, sizeof *w);
    struct rank_weights rw = {.hp = hp, .w = w, .err = err};
    int rc = snug_shard_rank(hp, n_ranks, rank, &rw.sr, err);
    for (int64_t i = 0; !rc && i < snug_gguf_n_tensors(g); i++) {
        const struct snug_gguf_tensor *t = snug_gguf_tensor(g, i);
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        rc = rank_tensor(&rw, t->name, ne, t->type);
    }
    return rc;
}

int snug_plan_weights_rank_from_recipe(const struct snug_hparams *hp, const char *recipe,
                                       int32_t n_ranks, int32_t rank, struct snug_plan_weights *w,
                                       struct snug_err *err) {
    memset(w, 0, sizeof *w);
    struct rank_weights rw = {.hp = hp, .w = w, .err = err};
    int rc = snug_shard_rank(hp, n_ranks, rank, &rw.sr, err);
    if (rc) return rc;
    struct snug_err terr = {0};
    rw.err = &terr;
    rc = snug_model_tensor_types(hp, recipe, rank_recipe_tensor, &rw, err);
    if (rc && terr.status && err) *err = terr; /* the slice's refusal, not the enumeration's */
    return rc;
}

int snug_plan_weights_from_recipe(const struct snug_hparams *hp, const char *recipe,
                                  struct snug_plan_weights *w, struct snug_err *err) {
    memset(w, 0, sizeof *w);
    return snug_model_tensor_types(hp, recipe, recipe_tensor, w, err);
}

/* ---- the plan ----------------------------------------------------------------------------- */
static void add_item(struct snug_plan *p, const char *name, uint64_t bytes, enum snug_device dev,
                     bool estimated, enum snug_plan_scope scope, uint64_t slot_bytes) {
    SNUG_ASSERT(p->n_items < SNUG_PLAN_MAX_ITEMS);
    struct snug_plan_item *it = &p->items[p->n_items++];
    snprintf(it->name, sizeof it->name, "%s", name);
    it->bytes = bytes;
    it->device = dev;
    it->estimated = estimated;
    it->scope = scope;
    it->slot_bytes = slot_bytes;
    p->total += bytes;
    bool gpu_budget = p->lim.backend == SNUG_BACKEND_CUDA;
    if ((dev == SNUG_DEVICE_GPU) == gpu_budget) {
        p->device_total += bytes;
        if (scope == SNUG_PLAN_PER_SLOT)
            p->slot_device_bytes += slot_bytes;
        else
            p->model_device_bytes += bytes;
    }
}
int snug_plan_add_item(struct snug_plan *p, const char *name, uint64_t bytes, enum snug_device dev,
                       struct snug_err *err) {
    if (p->n_items >= SNUG_PLAN_MAX_ITEMS)
        return snug_err_set(err, SNUG_ERR_INTERNAL, "plan: no room for the item '%s'", name);
    add_item(p, name, bytes, dev, false, SNUG_PLAN_PER_MODEL, 0);
    return SNUG_OK;
}
/* A buffer the model holds once. */
static void item(struct snug_plan *p, const char *name, uint64_t bytes, enum snug_device dev,
                 bool estimated) {
    add_item(p, name, bytes, dev, estimated, SNUG_PLAN_PER_MODEL, 0);
}
/* A buffer every slot holds: one slot's bytes, n_slots times. */
static void slot_item(struct snug_plan *p, const char *name, uint64_t one, enum snug_device dev) {
    add_item(p, name, (uint64_t)p->lim.n_slots * one, dev, false, SNUG_PLAN_PER_SLOT, one);
}

uint64_t snug_plan_token_history_bytes(int64_t n_ctx) {
    return (uint64_t)(n_ctx + 1) * sizeof(snug_token);
}

int32_t snug_plan_step_logits_rows(int32_t n_slots, int32_t n_draft, int32_t n_chunk) {
    return (int32_t)SNUG_MIN((int64_t)n_chunk, (int64_t)n_slots * (n_draft + 2));
}

uint64_t snug_plan_step_table_bytes(int32_t n_slots, int32_t n_chunk) {
    return (uint64_t)n_slots * SNUG_PLAN_ENGINE_SLOT_BYTES +
           (uint64_t)n_chunk * sizeof(struct snug_step_row);
}

/* CUDA runtime overheads: not allocations of ours, so ESTIMATES (labelled in every output).
 * Context: the CUDA context and module images. Measured on the H200 (CUDA 13, snug's
 * kernels, docs/perf/cuda.md): 526.8 MiB used right after the context was created, and the
 * context + cuBLAS together 599 MiB above the backend's own allocations after a 65K-token
 * prompt; we assume 576 MiB for the context. cuBLAS: 32 MiB workspace per handle (cuBLAS
 * docs, "cublasSetWorkspace": the default on Hopper) plus its handle and kernels: 64 MiB. */
#define CUDA_CONTEXT_BYTES     (576ull << 20)
#define CUBLAS_WORKSPACE_BYTES (64ull << 20)
/* Tensor parallelism: the NCCL communicator's buffers on each device, an ESTIMATE until measured
 * on two GPUs (docs/tensor-parallel.md): NCCL_BUFFSIZE is 4 MiB by default (NCCL docs,
 * "Environment Variables"), one per channel and direction towards each peer; we assume 16
 * channels (8 MiB each) per peer plus 64 MiB for the communicator and its kernels. The
 * activations are all-reduced in place: no buffer of ours. */
#define NCCL_BYTES(n_ranks) ((uint64_t)((n_ranks)-1) * (128ull << 20) + (64ull << 20))

/* The widest input and output of any matrix the forward multiplies, from the shape alone
 * (the CUDA op scratch is sized by them): hidden, FFN / expert / shared-expert widths, the
 * DeltaNet inner size, the attention output's Hq·D, the MTP eh_proj's 2·H inputs; outputs
 * up to the vocabulary (output head), the gated query projection 2·Hq·D, the DeltaNet's qkv
 * projection (conv_dim: wider than the vocabulary in a small-vocabulary model) and the MoE
 * router's E. The CUDA backend checks at open that the file's tensors need no more
 * (cuda_backend.c). */
static void plan_matrix_extent(const struct snug_hparams *hp, int64_t *max_in, int64_t *max_out) {
    int64_t a = hp->n_embd;
    a = SNUG_MAX(a, (int64_t)hp->n_ff);
    a = SNUG_MAX(a, (int64_t)hp->n_ff_exp);
    a = SNUG_MAX(a, (int64_t)hp->n_ff_shexp);
    a = SNUG_MAX(a, (int64_t)hp->ssm_d_inner);
    a = SNUG_MAX(a, (int64_t)hp->n_head * hp->head_dim);
    if (hp->n_nextn) a = SNUG_MAX(a, 2 * (int64_t)hp->n_embd);
    int64_t b = SNUG_MAX((int64_t)hp->n_vocab, 2 * (int64_t)hp->n_head * hp->head_dim);
    b = SNUG_MAX(b, (int64_t)snug_hp_conv_dim(hp));
    b = SNUG_MAX(b, (int64_t)hp->n_expert);
    b = SNUG_MAX(b, a);
    *max_in = a;
    *max_out = b;
}

int snug_plan_make(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                   const struct snug_plan_limits *lim_in, struct snug_plan *out,
                   struct snug_err *err) {
    memset(out, 0, sizeof *out);
    struct snug_plan_limits lim = lim_in ? *lim_in : snug_plan_limits_default();
    if (lim.n_slots == 0) lim.n_slots = 1;
    if (lim.n_chunk == 0) lim.n_chunk = 512;
    if (lim.n_threads == 0) lim.n_threads = 1;
    if (lim.n_ctx < 1 || lim.n_ctx > INT32_MAX || lim.n_slots < 1 || lim.n_chunk < 1 ||
        lim.n_draft < 0 || lim.n_threads < 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "plan: context %lld (1..2^31-1), slots %d, chunk %d, threads %d "
                            "(>= 1), draft %d (>= 0)",
                            (long long)lim.n_ctx, lim.n_slots, lim.n_chunk, lim.n_threads,
                            lim.n_draft);
    int kfmt, vfmt; /* kv_type is a kvfmt code: one format for both, or a K/V mix */
    if (!snug_kvfmt_split(lim.kv_type, &kfmt, &vfmt))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "plan: KV type %d: expected a format (f16 f32 bf16 q8_0 fp8 tq4 tq3) "
                            "or a K/V pair of them (snug_kvfmt_code)",
                            lim.kv_type);
    if (!snug_kvfmt_supports(kfmt, hp->head_dim) || !snug_kvfmt_supports(vfmt, hp->head_dim))
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "plan: KV format K %s / V %s cannot store head_dim %u vectors (q8_0 "
                            "needs a multiple of 32, tq4/tq3 of 64); choose another --kv",
                            snug_kvfmt_name(kfmt), snug_kvfmt_name(vfmt), (unsigned)hp->head_dim);
    if (lim.backend != SNUG_BACKEND_CPU && lim.backend != SNUG_BACKEND_CUDA)
        return snug_err_set(err, SNUG_ERR_INVALID, "plan: backend %d: expected cpu or cuda",
                            (int)lim.backend);
    const struct snug_arch *arch = snug_arch_find(hp->arch);
    if (!arch || !arch->plan)
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED, "plan: no memory plan for architecture '%s'",
                            hp->arch);
    if (lim.n_ranks == 0) lim.n_ranks = 1;
    if (lim.rank < 0 || lim.rank >= lim.n_ranks)
        return snug_err_set(err, SNUG_ERR_INVALID, "plan: rank %d of %d", lim.rank, lim.n_ranks);
    struct snug_hparams hp_rank; /* tensor parallelism: every size below is the rank's */
    if (lim.n_ranks > 1) {
        int rc = snug_shard_rank_hparams(hp, lim.n_ranks, &hp_rank, err);
        if (rc) return rc;
        hp = &hp_rank;
    }
    if (lim.n_chunk > lim.n_ctx) lim.n_chunk = (int32_t)lim.n_ctx;
    out->lim = lim;
    const enum snug_device dev =
        lim.backend == SNUG_BACKEND_CUDA ? SNUG_DEVICE_GPU : SNUG_DEVICE_HOST;
    const uint64_t V = hp->n_vocab;

    /* weights, per stored type */
    if (w)
        for (uint32_t t = 0; t < SNUG_PLAN_MAX_DTYPES; t++) {
            if (!w->count[t]) continue;
            const struct snug_dtype_info *ti = snug_dtype_info(t);
            char name[48];
            snprintf(name, sizeof name, "weights %s", ti ? ti->name : "other");
            item(out, name, w->bytes[t], dev, false);
        }

    /* KV + recurrent state: one arena per slot, laid out by snug_kv_bytes */
    struct snug_arch_plan ap;
    arch->plan(hp, lim.n_chunk, lim.n_threads, (enum snug_kv_type)lim.kv_type, &ap);
    struct snug_kv_shape s = {
        .n_attn = (int32_t)snug_hp_n_attn_layers(hp),
        .n_head_kv = (int32_t)hp->n_head_kv,
        .head_dim = (int32_t)hp->head_dim,
        .n_ctx = (int32_t)lim.n_ctx,
        .type = lim.kv_type == SNUG_KV_F32 ? SNUG_DTYPE_F32 : SNUG_DTYPE_F16,
        .fmt = lim.kv_type, /* bytes per token per format: snug_kvfmt_vec_bytes via kv.c */
        .n_rec = (int32_t)snug_hp_n_rec_layers(hp),
        .conv_elems = (int64_t)(hp->conv_kernel - 1) * snug_hp_conv_dim(hp),
        .delta_elems = (int64_t)hp->ssm_dt_rank * hp->ssm_d_state * hp->ssm_d_state,
    };
    SNUG_ASSERT(snug_kv_bytes_per_token(&s) == ap.kv_bytes_per_token);
    SNUG_ASSERT(snug_kv_state_bytes(&s) == ap.state_bytes);
    struct snug_kv_shape s0 = s;
    s0.n_ctx = 0;
    const uint64_t kv_all = snug_kv_bytes(&s), kv_fixed = snug_kv_bytes(&s0);
    out->kv_shape = s;
    slot_item(out, "kv cache (attention)", kv_all - kv_fixed, dev);
    slot_item(out, "recurrent state", kv_fixed, dev);
    /* Speculative decoding with a draft of N tokens verifies N+1 positions in one step; to
     * roll the recurrent state back to the last accepted one we keep the state after each of
     * them: N+1 copies of every DeltaNet layer's conv + delta state (64-byte aligned). */
    if (lim.n_draft > 0) {
        out->snapshot_bytes =
            (size_t)(lim.n_draft + 1) * SNUG_ALIGN_UP(snug_kv_state_bytes(&s), (size_t)64);
        slot_item(out, "state snapshots (mtp)", out->snapshot_bytes, dev);
        /* the MTP block's own one-layer KV cache and the draft/verify buffers, exactly what
         * snug_spec_init allocates (src/model/mtp.c) */
        if (hp->n_nextn > 0) {
            uint64_t all = snug_spec_bytes(hp, (int32_t)lim.n_ctx, lim.n_chunk, lim.n_draft,
                                           (enum snug_kv_type)lim.kv_type);
            if (lim.backend == SNUG_BACKEND_CUDA) {
                /* on the device: the cache and the row buffers the backend allocates for the
                 * slot (cuda_backend.c layout_spec); the rest is snug_spec_init_on's host
                 * arena: drafted tokens, the verified rows' logits */
                struct snug_kv_shape ms =
                    snug_spec_kv_shape(hp, (int32_t)lim.n_ctx, (enum snug_kv_type)lim.kv_type);
                uint64_t on_dev = snug_kv_bytes(&ms) + snug_spec_dev_bytes(hp, lim.n_chunk);
                SNUG_ASSERT(on_dev <= all);
                slot_item(out, "mtp kv cache + draft buffers", on_dev, SNUG_DEVICE_GPU);
                slot_item(out, "mtp draft buffers (host)", all - on_dev, SNUG_DEVICE_HOST);
            } else {
                slot_item(out, "mtp kv cache + draft buffers", all, dev);
            }
        }
    }
    /* per-step work: bounded by the chunk, never the context (the arena rounds up to 64); one
     * per model: the slots share the backend instance's arena, one step at a time */
    out->work_bytes = SNUG_ALIGN_UP(ap.work_bytes, (size_t)64);
    item(out, "work arena (per chunk)", out->work_bytes, dev, false);
    /* a step's host tables (model.h SNUG_STEP_ROW_BYTES: its runs, their sequences, the rows'
     * positions and tokens), n_chunk rows of each, and a multimodal step's input rows and 3-D
     * rotary positions (snug_ctx_eval_images). Each slot's sequence handle keeps one (a step
     * runs on the tables of its first row's sequence; the positions are the host copy the
     * backend uploads from). */
    out->pos_bytes =
        (size_t)lim.n_chunk * (SNUG_STEP_ROW_BYTES + 3 * sizeof(int32_t) + sizeof(void *));
    slot_item(out, "step tables (runs, positions)", out->pos_bytes, SNUG_DEVICE_HOST);
    /* host: last-token logits [V] f32 (the engine's per slot), the sampler chain's six [V]
     * arrays (sample.c) and the sequence's tokens (sequence.c) */
    slot_item(out, "logits", V * 4, SNUG_DEVICE_HOST);
    slot_item(out, "sampler", 6 * V * 4, SNUG_DEVICE_HOST);
    slot_item(out, "token history", snug_plan_token_history_bytes(lim.n_ctx), SNUG_DEVICE_HOST);
    /* the engine's step, once for all slots (it grows with them up to the chunk): its logits
     * table and bookkeeping (engine.c) */
    item(out, "step logits (all slots)",
         (uint64_t)snug_plan_step_logits_rows(lim.n_slots, lim.n_draft, lim.n_chunk) * V * 4,
         SNUG_DEVICE_HOST, false);
    item(out, "step tables (engine)", snug_plan_step_table_bytes(lim.n_slots, lim.n_chunk),
         SNUG_DEVICE_HOST, false);
    if (lim.backend == SNUG_BACKEND_CUDA) {
        item(out, "logits (device)", V * 4, SNUG_DEVICE_GPU, false);
        /* the backend's copy of a step's inputs: positions and token ids, [2][n_chunk] int32 */
        item(out, "step inputs (device)", snug_backend_plan_step_input_bytes(lim.n_chunk),
             SNUG_DEVICE_GPU, false);
        /* per model: bf16 GEMM tiles / int8 matvec activations / split-attention partials
         * (what the CUDA backend allocates as its op scratch: this number) */
        int64_t mi, mo;
        plan_matrix_extent(hp, &mi, &mo);
        out->cuda_scratch_bytes =
            snug_backend_plan_cuda_scratch(mi, mo, lim.n_chunk, hp->n_head, hp->head_dim);
        item(out, "cuda op scratch", out->cuda_scratch_bytes, SNUG_DEVICE_GPU, false);
        /* and on the host, per model: the embedding rows staged for upload, the host work
         * arena (backend.h's formulas, which cuda_backend.c allocates by) */
        item(out, "cuda staging (embedding rows)",
             snug_backend_plan_stage_bytes(lim.n_chunk, hp->n_embd), SNUG_DEVICE_HOST, false);
        out->cuda_host_work_bytes =
            snug_backend_plan_host_work_bytes(lim.n_chunk, hp->n_embd, hp->n_expert);
        item(out, "cuda host work (hooks, moe)", out->cuda_host_work_bytes, SNUG_DEVICE_HOST,
             false);
        item(out, "cuda context (estimated)", CUDA_CONTEXT_BYTES, SNUG_DEVICE_GPU, true);
        item(out, "cublas workspace (estimated)", CUBLAS_WORKSPACE_BYTES, SNUG_DEVICE_GPU, true);
        if (lim.n_ranks > 1)
            item(out, "nccl buffers (estimated)", NCCL_BYTES(lim.n_ranks), SNUG_DEVICE_GPU, true);
    }
    return SNUG_OK;
}

int64_t snug_plan_max_ctx(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                          const struct snug_plan_limits *lim_in, uint64_t budget, int64_t ctx_cap) {
    struct snug_plan_limits lim = lim_in ? *lim_in : snug_plan_limits_default();
    if (ctx_cap <= 0) ctx_cap = hp->n_ctx_train ? (int64_t)hp->n_ctx_train : INT32_MAX;
    ctx_cap = SNUG_MIN(ctx_cap, (int64_t)INT32_MAX);
    struct snug_plan p;
    struct snug_err e;
    int64_t lo = 0, hi = ctx_cap; /* invariant: lo fits (or is 0), everything above hi fails */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        lim.n_ctx = mid;
        if (snug_plan_make(hp, w, &lim, &p, &e) == SNUG_OK && p.device_total <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

bool snug_plan_parse_size(const char *s, uint64_t *out) {
    char *end;
    double x = strtod(s, &end);
    if (end == s || !(x >= 0) || !isfinite(x)) return false;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return false;
    double v = x * mul;
    if (v >= 18446744073709551615.0) return false;
    *out = (uint64_t)(v + 0.5);
    return true;
}

void snug_plan_putf(char *buf, size_t n, size_t *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(*o < n ? buf + *o : NULL, *o < n ? n - *o : 0, fmt, ap);
    va_end(ap);
    if (k > 0) *o += (size_t)k;
}

size_t snug_plan_format(const struct snug_plan *p, uint64_t budget, char *buf, size_t n) {
    enum { BAR = 24 };
    size_t o = 0;
    if (n) buf[0] = 0;
    const double ref = budget ? (double)budget : (double)SNUG_MAX(p->device_total, 1);
    snug_plan_putf(buf, n, &o, "  %-30s %-9s %15s %11s %7s  %s\n", "item", "per", "bytes", "MiB",
                   budget ? "budget" : "share", "");
    for (int i = 0; i < p->n_items; i++) {
        const struct snug_plan_item *it = &p->items[i];
        double share = (double)it->bytes / ref;
        int fill = (int)(share * BAR + 0.5);
        char bar[BAR + 1];
        for (int k = 0; k < BAR; k++) bar[k] = k < fill ? '#' : '.';
        bar[BAR] = 0;
        char per[16];
        if (it->scope == SNUG_PLAN_PER_SLOT)
            snprintf(per, sizeof per, "slot x%d", (int)p->lim.n_slots);
        else
            snprintf(per, sizeof per, "model");
        snug_plan_putf(buf, n, &o, "%c %-30s %-9s %15llu %11.1f %6.1f%%  %s%s\n",
                       it->estimated ? '~' : ' ', it->name, per, (unsigned long long)it->bytes,
                       (double)it->bytes / 1048576.0, 100 * share, bar,
                       it->device == SNUG_DEVICE_GPU ? " gpu" : "");
    }
    snug_plan_putf(buf, n, &o, "  %-30s %-9s %15llu %11.1f %6.1f%%\n",
                   p->lim.backend == SNUG_BACKEND_CUDA ? "total on the gpu" : "total", "",
                   (unsigned long long)p->device_total, (double)p->device_total / 1048576.0,
                   100 * (double)p->device_total / ref);
    snug_plan_putf(buf, n, &o, "  %-30s %-9s %15llu %11.1f\n", "  of which per model", "",
                   (unsigned long long)p->model_device_bytes,
                   (double)p->model_device_bytes / 1048576.0);
    snug_plan_putf(buf, n, &o, "  %-30s %-9s %15llu %11.1f\n", "  of which per slot (one slot)", "",
                   (unsigned long long)p->slot_device_bytes,
                   (double)p->slot_device_bytes / 1048576.0);
    if (budget)
        snug_plan_putf(buf, n, &o, "  %-30s %-9s %15llu %11.1f\n", "budget", "",
                       (unsigned long long)budget, (double)budget / 1048576.0);
    if (p->total != p->device_total)
        snug_plan_putf(buf, n, &o, "  %-30s %-9s %15llu %11.1f\n", "host (not in the gpu budget)",
                       "", (unsigned long long)(p->total - p->device_total),
                       (double)(p->total - p->device_total) / 1048576.0);
    return o;
}

const char *snug_plan_human_size(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30))
        snprintf(buf, n, "%.2f GiB", (double)b / 1073741824.0);
    else
        snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    return buf;
}

int snug_plan_check(const struct snug_hparams *hp, const struct snug_plan_weights *w,
                    const struct snug_plan_limits *lim, uint64_t budget, struct snug_plan *out,
                    struct snug_err *err) {
    int rc = snug_plan_make(hp, w, lim, out, err);
    if (rc || !budget || out->device_total <= budget) return rc;
    int64_t max = snug_plan_max_ctx(hp, w, lim, budget, 0);
    char need[32], have[32], kv[24];
    snug_plan_human_size(out->device_total, need, sizeof need);
    snug_plan_human_size(budget, have, sizeof have);
    snug_kvfmt_code_name(out->lim.kv_type, kv, sizeof kv);
    if (max == 0)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "the memory plan needs %s but the budget is %s, and no context fits "
                            "(the weights and fixed buffers alone exceed it)",
                            need, have);
    return snug_err_set(err, SNUG_ERR_BUDGET,
                        "the memory plan for a context of %lld tokens needs %s but the budget is "
                        "%s; the largest context that fits is %lld (KV %s, chunk %d)",
                        (long long)out->lim.n_ctx, need, have, (long long)max, kv,
                        (int)SNUG_MIN((int64_t)out->lim.n_chunk, max));
}

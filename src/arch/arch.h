/* arch.h — the architecture interface: hyper-parameters (read once from GGUF metadata), the
 * tensor table of a loaded model (borrowed views into the file mapping), one forward step over
 * rows of several sequences (struct snug_fwd, its runs), and the registry of architectures.
 * Owns only types and the helpers every architecture shares (arch.c: the registry, tensor
 * lookup with shape checks); each architecture is one file (qwen35.c, qwen35moe.c).
 * Invariant: after an architecture's load every tensor pointer in struct snug_model has the
 * shape the hyper-parameters imply, so forward code never re-checks. Nothing here knows about
 * contexts, plans or the engine (they are layers above: src/model, src/plan, src/engine).
 * Read next: qwen35.c (the forward pass), src/backend/backend.h (the ops it calls).
 */
#ifndef SNUG_ARCH_H
#define SNUG_ARCH_H

#include "backend/backend.h"
#include "core/core.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "kv/kv.h"
#include "snug.h"

#include <stdbool.h>
#include <stdint.h>

#define SNUG_MAX_LAYERS 512

/* Hyper-parameters, every key of docs/qwen35.md §4.2 (`%s` = arch). Layer counts: n_layer_all is
 * `block_count` (trunk + MTP blocks), n_layer = n_layer_all − n_nextn is the trunk. */
struct snug_hparams {
    char arch[32];
    uint32_t n_vocab;     /* rows of token_embd */
    uint32_t n_embd;      /* %s.embedding_length (H) */
    uint32_t n_layer_all; /* %s.block_count */
    uint32_t n_nextn;     /* %s.nextn_predict_layers (default 0) */
    uint32_t n_layer;     /* n_layer_all - n_nextn */
    uint32_t n_ff;        /* %s.feed_forward_length (dense; 0 for MoE files that lack it) */
    uint32_t n_head;      /* %s.attention.head_count (Hq) */
    uint32_t n_head_kv;   /* %s.attention.head_count_kv (Hkv) */
    uint32_t head_dim;    /* %s.attention.key_length (D); value_length must equal it */
    uint32_t n_rot;       /* %s.rope.dimension_count */
    uint32_t rope_sections[4];
    float rope_base;                  /* %s.rope.freq_base */
    float rms_eps;                    /* %s.attention.layer_norm_rms_epsilon */
    uint64_t n_ctx_train;             /* %s.context_length */
    uint32_t conv_kernel;             /* %s.ssm.conv_kernel (K) */
    uint32_t ssm_d_state;             /* %s.ssm.state_size (dk = dv) */
    uint32_t ssm_n_group;             /* %s.ssm.group_count (Nk) */
    uint32_t ssm_dt_rank;             /* %s.ssm.time_step_rank (Nv) */
    uint32_t ssm_d_inner;             /* %s.ssm.inner_size (Nv·dv) */
    uint32_t full_attn_interval;      /* %s.full_attention_interval (default 4) */
    bool recurrent[SNUG_MAX_LAYERS];  /* per layer: DeltaNet (true) or attention */
    uint32_t n_expert, n_expert_used; /* MoE: %s.expert_count, expert_used_count */
    uint32_t n_ff_exp, n_ff_shexp;    /* MoE: expert / shared expert FFN widths */
};

/* Derived DeltaNet sizes. */
static inline uint32_t snug_hp_conv_dim(const struct snug_hparams *hp) {
    return 2 * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner;
}
/* Trunk DeltaNet layers (recurrent[i] for i < n_layer); the rest of the trunk is attention. */
static inline uint32_t snug_hp_n_rec_layers(const struct snug_hparams *hp) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < hp->n_layer && i < SNUG_MAX_LAYERS; i++) n += hp->recurrent[i];
    return n;
}
static inline uint32_t snug_hp_n_attn_layers(const struct snug_hparams *hp) {
    return hp->n_layer - snug_hp_n_rec_layers(hp);
}

typedef const struct snug_gguf_tensor *snug_tensor;

/* The weights of one block (trunk layer or MTP block); NULL where the layer type lacks it. */
struct snug_layer {
    bool recurrent;
    int32_t attn_idx; /* index among attention layers (KV cache slot), -1 for DeltaNet */
    int32_t rec_idx;  /* index among DeltaNet layers (state slot), -1 for attention */
    snug_tensor attn_norm, post_norm;
    /* gated attention */
    snug_tensor wq, wk, wv, wo, q_norm, k_norm;
    /* Gated DeltaNet */
    snug_tensor ssm_qkv, ssm_z, ssm_conv, ssm_dt, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
    /* dense FFN */
    snug_tensor ffn_gate, ffn_up, ffn_down;
    /* MoE FFN */
    snug_tensor gate_inp, gate_exps, up_exps, down_exps;
    snug_tensor gate_inp_shexp, gate_shexp, up_shexp, down_shexp;
    /* MTP block only */
    snug_tensor nextn_eh_proj, nextn_enorm, nextn_hnorm, nextn_shared_head_norm;
};

/* What a forward pass needs, for a context with the given limits (the memory planner's
 * input). All sizes in bytes. */
struct snug_arch_plan {
    size_t work_bytes;         /* scratch for one chunk of n_chunk tokens */
    size_t kv_bytes_per_token; /* attention K+V over all attention layers */
    size_t state_bytes;        /* conv + delta states over all DeltaNet layers */
};

struct snug_model;
struct snug_fwd;

/* An observer of the weight products of a step (src/imatrix's collector: `snug imatrix`): the
 * forward calls it with the input rows of every matrix product, before the product, when one is
 * set on the context (snug_ctx_set_mm_observer); one pointer test per product when none is.
 * Rows are in host memory (host-memory backends only). The callbacks must not allocate. */
struct snug_mm_observer {
    void *user;
    /* x [T][w->ne[0]]: the rows multiplied by the 2-D weight w (the LM head included) */
    void (*dense)(void *user, snug_tensor w, const float *x, int64_t T);
    /* an expert product of the 3-D weight w over rows grouped by expert: x [off[E]][w->ne[0]],
     * rows off[e] .. off[e+1]-1 are the (token, choice) pairs routed to expert e */
    void (*experts)(void *user, snug_tensor w, const float *x, const int32_t *off, int64_t E);
};

/* One registry entry per architecture (see model.c `ARCHS`). */
struct snug_arch {
    const char *name;
    /* Map tensors into m->layers etc. and check every shape; errors name the tensor. */
    int (*load)(struct snug_model *m, struct snug_err *err);
    /* Report every buffer the forward pass needs. Takes only hyper-parameters, so the memory
     * planner (src/plan) can size a preset without a file. */
    void (*plan)(const struct snug_hparams *hp, int32_t n_chunk, int32_t n_threads,
                 enum snug_kv_type kv_type, struct snug_arch_plan *out);
    /* Run T ≤ n_chunk tokens through the model (see struct snug_fwd). */
    void (*forward)(struct snug_fwd *f);
    /* One MTP step over T ≤ n_chunk positions (docs/qwen35.md §3.2), one run: f->ids are the
     * tokens x_{p+1}, f->pos the positions p, f->mtp_hidden_in the trunk's (or the MTP's own)
     * hidden rows, runs[0].kv the MTP block's cache (view 0). Writes h' to runs[0].hidden_out
     * (if set) and logits to f->logits. NULL when the architecture has no MTP.
     * (src/arch/qwen35_mtp.c) */
    void (*mtp_forward)(struct snug_fwd *f);
};

struct snug_model {
    struct snug_gguf *gguf;
    struct snug_hparams hp;
    const struct snug_arch *arch;
    int n_threads;
    snug_tensor tok_embd, output_norm, output;
    struct snug_layer *layers;            /* [n_layer_all]: trunk, then MTP blocks */
    uint32_t n_attn_layers, n_rec_layers; /* trunk only */
    struct snug_tokenizer *tok;           /* owned; NULL if the file has no vocabulary */
};

/* One run of a step: consecutive positions of one sequence. A step's rows are grouped into
 * runs (a prompt chunk of one slot, the decode token of another, the verification rows of a
 * third): the matrix products run over every row of the step at once, the conv, the delta rule
 * and the attention once per run against the run's own caches, with the same calls (and so
 * the same numbers) as a step of that run alone. */
struct snug_fwd_run {
    struct snug_kv *kv; /* the sequence's caches (its slot) */
    int32_t row0, T;    /* rows [row0, row0 + T) of the step */
    int32_t pos0;       /* the position of row row0; the run's rows are pos0 .. pos0 + T - 1 */
    int32_t n_logits;   /* the run's last n_logits rows write logits (0 .. T) */
    bool snapshot;      /* speculative verification: after each row, the recurrent states go
                           into snapshot slot (row - row0) of kv (kv.h), for rollback */
    float *hidden_out;  /* NULL or [T][H]: the run's rows after the final norm (MTP input) */
};
/* Bytes of the host tables one step row may need (context.c: a run, its sequence, the row's
 * position and token); the plan counts n_chunk of them per slot. */
#define SNUG_STEP_ROW_BYTES (sizeof(struct snug_fwd_run) + sizeof(void *) + 2 * sizeof(int32_t))

/* One forward step, filled in by the context (src/model/context.c) and consumed by
 * arch->forward: T rows in n_runs runs (runs[i].row0 ascending, covering 0..T-1). */
struct snug_fwd {
    const struct snug_model *m;
    struct snug_pool *pool;
    int n_threads;
    struct snug_arena *work; /* reset by the caller before each step */
    void *op_work;           /* scratch for ops.h calls (set by the trunk forward) */
    const struct snug_fwd_run *runs;
    int32_t n_runs;
    const snug_token *ids; /* [T] */
    const int32_t *pos;    /* [T]: each row's position (run r: runs[r].pos0 + i) */
    int32_t T;
    float *logits; /* NULL or the runs' logits rows, packed in row order: [sum n_logits][V] */
    snug_layer_hook hook; /* one-run steps only */
    void *hook_user;
    const struct snug_mm_observer *mm_obs; /* NULL, or one-run steps on the host (context.c) */
    const float *mtp_hidden_in;            /* mtp_forward only: [T][H] hidden input rows */
    /* The backend the ops run on (backend.h); NULL = the CPU over `pool` (snug_fwd_be fills
     * be_cpu). With a device backend `work` is an arena over device memory, `host_work` a
     * host arena for the little host-side work (MoE routing, hook copies), `pos_be` the
     * positions in device memory; NULL host_work / pos_be mean work / pos. */
    struct snug_be *be;
    struct snug_be be_cpu;
    struct snug_arena *host_work;
    const int32_t *pos_be;
    const int32_t *ids_be; /* NULL, or the step's ids in the backend's memory (pos_be's block) */
    /* mtp_forward: NULL, or where the last row's greedy token goes (backend memory, the
     * backend's argmax of its logits row: a draft without a logits read-back) */
    int32_t *argmax_be;
    /* Multimodal rows (snug_ctx_eval_images, docs/vision.md step 6), host memory
     * (a device forward uploads them: the trunk in qwen35.c, the MTP block in qwen35_mtp.c): NULL,
     * or [T][3] rotary positions (t, h, w) per row, applied by interleaved M-RoPE over
     * hp.rope_sections instead of the 1-D rotary at pos (which then only orders the cache)... */
    const int32_t *rope3;
    /* ... and NULL, or [T] input rows: row t's [H] embedding instead of ids[t]'s when
     * embd_rows[t] is not NULL (an image's merger output row). */
    const float *const *embd_rows;
};

/* The step's backend (the CPU one over f->pool unless the context chose another). */
static inline struct snug_be *snug_fwd_be(struct snug_fwd *f) {
    if (!f->be) {
        snug_backend_cpu_init(&f->be_cpu, f->pool);
        f->be = &f->be_cpu;
    }
    return f->be;
}
static inline struct snug_arena *snug_fwd_host_work(struct snug_fwd *f) {
    return f->host_work ? f->host_work : f->work;
}

/* Rows of logits a device step stages before copying them to the host (snug_fwd_logits,
 * src/arch/qwen35.h); a step of at most this many rows can be recorded (snug_fwd_exec). */
#define SNUG_FWD_LG_ROWS 8

/* Helpers shared between registry entries (arch.c). */
/* Find a tensor and check its shape: n_dims dims with ne[0..n_dims) equal to the given values
 * (extra dims must be 1). required=false: absent → *out = NULL, OK. `f32_only` demands F32
 * (vectors read directly as floats); otherwise the type must be computable. */
int snug_model_tensor(const struct snug_model *m, snug_tensor *out, const char *name, bool required,
                      bool f32_only, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                      struct snug_err *err);
/* Same, with the name built as "blk.<il>.<suffix>". */
int snug_model_blk_tensor(const struct snug_model *m, snug_tensor *out, int il, const char *suffix,
                          bool required, bool f32_only, int n_dims, int64_t ne0, int64_t ne1,
                          int64_t ne2, struct snug_err *err);

/* The architecture registry (arch.c). */
const struct snug_arch *snug_arch_find(const char *name);
extern const struct snug_arch snug_arch_qwen35;
extern const struct snug_arch snug_arch_qwen35moe;

#endif /* SNUG_ARCH_H */

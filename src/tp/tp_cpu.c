/* tp_cpu.c — tensor parallelism emulated on the CPU (see tp.h): R rank models carved out of
 * one loaded model by the split of src/plan/shard.h, each run by its own thread through the
 * architecture's own forward (src/arch) over a CPU backend whose all_reduce sums the ranks'
 * partial outputs at a barrier. Owns: the ranks' tensor tables, their gathered weight slices,
 * caches, work arenas and logits rows.
 * Invariant: every rank adds the same partial buffers in the same order (rank 0 first), so the
 * ranks' residual streams stay bit-identical; the logits are each rank's vocabulary rows,
 * copied side by side.
 * Read next: src/plan/shard.c (the slices), src/arch/qwen35.c (where all_reduce is called).
 */
#include "tp/tp.h"

#include "plan/plan.h"
#include "plan/shard.h"
#include "quant/quant.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

/* One rank: its backend (first, so the ops find the rank from the backend pointer), its
 * model, caches and buffers. */
struct tp_rank {
    struct snug_be be;
    struct snug_tp_cpu *tp;
    int32_t rank;
    struct snug_shard_rank sr;
    struct snug_model m;              /* the rank's shape and tensors */
    struct snug_gguf_tensor *tensors; /* the slices that are not the model's own tensors */
    int32_t n_tensors, cap_tensors;
    struct snug_arena weights; /* gathered slices (copies) */
    struct snug_kv kv;
    struct snug_arena work;
    float *sum;    /* [n_chunk·H]: all_reduce's result before it is copied back */
    float *logits; /* [n_chunk][vocab.count] */
    struct snug_fwd f;
    struct snug_fwd_run run;
    struct snug_err err;
    int status;
};

struct snug_tp_cpu {
    const struct snug_model *src;
    int32_t R, n_ctx, n_chunk, n_past;
    struct snug_backend_ops ops; /* the CPU ops plus all_reduce */
    struct tp_rank *ranks;
    int32_t *pos; /* [n_chunk] */
    /* the barrier of all_reduce */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t arrived;
    uint64_t generation;
    float *bufs[SNUG_TP_MAX_RANKS];
    /* the workers running ranks 1..R−1 (rank 0 runs in the caller's thread): a step starts
     * when `step` changes, each worker counts itself into `finished` */
    pthread_t workers[SNUG_TP_MAX_RANKS];
    int32_t n_workers;
    uint64_t step;
    int32_t finished;
    bool quit;
};

static void *worker_main(void *arg);

/* ---- all_reduce ----------------------------------------------------------------------------- */
static void barrier(struct snug_tp_cpu *tp) {
    pthread_mutex_lock(&tp->mu);
    uint64_t gen = tp->generation;
    if (++tp->arrived == tp->R) {
        tp->arrived = 0;
        tp->generation++;
        pthread_cond_broadcast(&tp->cv);
    } else {
        while (gen == tp->generation) pthread_cond_wait(&tp->cv, &tp->mu);
    }
    pthread_mutex_unlock(&tp->mu);
}

/* Every rank publishes its buffer; each sums all of them in rank order into its own scratch;
 * once every rank has read, each copies its sum back. */
static void tp_all_reduce(struct snug_be *be, float *x, int64_t n) {
    struct tp_rank *r = (struct tp_rank *)be;
    struct snug_tp_cpu *tp = r->tp;
    tp->bufs[r->rank] = x;
    barrier(tp);
    for (int64_t i = 0; i < n; i++) {
        float s = tp->bufs[0][i];
        for (int32_t q = 1; q < tp->R; q++) s += tp->bufs[q][i];
        r->sum[i] = s;
    }
    barrier(tp);
    memcpy(x, r->sum, (size_t)n * sizeof(float));
}

/* ---- the rank's tensors --------------------------------------------------------------------- */
#define LT(field) offsetof(struct snug_layer, field)
static const size_t LAYER_TENSORS[] = {
    LT(attn_norm),
    LT(post_norm),
    LT(wq),
    LT(wk),
    LT(wv),
    LT(wo),
    LT(q_norm),
    LT(k_norm),
    LT(ssm_qkv),
    LT(ssm_z),
    LT(ssm_conv),
    LT(ssm_dt),
    LT(ssm_a),
    LT(ssm_beta),
    LT(ssm_alpha),
    LT(ssm_norm),
    LT(ssm_out),
    LT(ffn_gate),
    LT(ffn_up),
    LT(ffn_down),
    LT(gate_inp),
    LT(gate_exps),
    LT(up_exps),
    LT(down_exps),
    LT(gate_inp_shexp),
    LT(gate_shexp),
    LT(up_shexp),
    LT(down_shexp),
    LT(nextn_eh_proj),
    LT(nextn_enorm),
    LT(nextn_hnorm),
    LT(nextn_shared_head_norm),
};
#undef LT
#define N_LAYER_TENSORS (sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0])

/* Rank r's slice of t (`as` names the split when it is not t's own name: a tied LM head).
 * copy_bytes != NULL: count only (the bytes of copies it needs). Else fill *out. */
static int slice(struct tp_rank *r, snug_tensor t, const char *as, size_t *copy_bytes,
                 snug_tensor *out, struct snug_err *err) {
    const struct snug_hparams *hp = &r->tp->src->hp;
    struct snug_shard_slice s;
    uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
    int rc = snug_shard_tensor(&r->sr, hp, as ? as : t->name, ne, t->type, &s, err);
    if (rc) return rc;
    if (s.split == SNUG_SHARD_WHOLE) {
        if (!copy_bytes) *out = t;
        return SNUG_OK;
    }
    uint64_t rb = snug_dtype_row_bytes(t->type, ne[0]), mats = ne[2] * ne[3];
    bool view = s.split == SNUG_SHARD_ROWS && s.n_ranges == 1 && mats == 1;
    if (copy_bytes) {
        if (!view) *copy_bytes += SNUG_ALIGN_UP((size_t)s.bytes, 64);
        return SNUG_OK;
    }
    SNUG_ASSERT(r->n_tensors < r->cap_tensors);
    struct snug_gguf_tensor *o = &r->tensors[r->n_tensors++];
    *o = *t;
    if (s.split == SNUG_SHARD_ROWS)
        o->ne[1] = s.extent;
    else
        o->ne[0] = s.extent;
    o->n_elems = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
    o->n_bytes = s.bytes;
    const uint8_t *src = t->data;
    if (view) { /* one range of rows: a view into the mapping */
        o->data = src + (uint64_t)s.r[0].first * rb;
        *out = o;
        return SNUG_OK;
    }
    uint8_t *dst = snug_arena_alloc(&r->weights, (size_t)s.bytes, 64);
    SNUG_ASSERT(dst);
    o->data = dst;
    if (s.split == SNUG_SHARD_ROWS) { /* per matrix (expert), its ranges of rows */
        for (uint64_t e = 0; e < mats; e++)
            for (int32_t i = 0; i < s.n_ranges; i++) {
                size_t b = (size_t)(s.r[i].count * rb);
                memcpy(dst, src + (e * ne[1] + s.r[i].first) * rb, b);
                dst += b;
            }
    } else { /* per row, its ranges of input columns (whole blocks: shard.c checked) */
        for (uint64_t row = 0; row < ne[1] * mats; row++)
            for (int32_t i = 0; i < s.n_ranges; i++) {
                size_t off = (size_t)snug_dtype_row_bytes(t->type, s.r[i].first);
                size_t b = (size_t)snug_dtype_row_bytes(t->type, s.r[i].count);
                memcpy(dst, src + row * rb + off, b);
                dst += b;
            }
    }
    *out = o;
    return SNUG_OK;
}

/* Every tensor of the rank's model: count (copy_bytes != NULL) or fill. */
static int map_rank(struct tp_rank *r, size_t *copy_bytes, struct snug_err *err) {
    const struct snug_model *src = r->tp->src;
    struct snug_model *m = &r->m;
    int rc;
    bool tied = src->output == src->tok_embd;
    if ((rc = slice(r, src->output, tied ? "output.weight" : NULL, copy_bytes, &m->output, err)))
        return rc;
    for (uint32_t il = 0; il < src->hp.n_layer_all; il++)
        for (size_t k = 0; k < N_LAYER_TENSORS; k++) {
            snug_tensor t =
                *(const snug_tensor *)((const uint8_t *)&src->layers[il] + LAYER_TENSORS[k]);
            snug_tensor *dst = (snug_tensor *)((uint8_t *)&m->layers[il] + LAYER_TENSORS[k]);
            if (t && (rc = slice(r, t, NULL, copy_bytes, dst, err))) return rc;
        }
    return SNUG_OK;
}

static int open_rank(struct snug_tp_cpu *tp, struct tp_rank *r, int32_t kv_type,
                     struct snug_err *err) {
    const struct snug_model *src = tp->src;
    int rc = snug_shard_rank(&src->hp, tp->R, r->rank, &r->sr, err);
    if (rc) return rc;
    snug_backend_cpu_init(&r->be, NULL);
    r->be.ops = &tp->ops;
    r->tp = tp;
    /* the model: the rank's shape (its vocabulary rows for the LM head) and tensors */
    r->m = *src;
    r->m.n_threads = 1;
    if ((rc = snug_shard_rank_hparams(&src->hp, tp->R, &r->m.hp, err))) return rc;
    r->m.hp.n_vocab = r->sr.vocab.count;
    r->m.layers = snug_calloc(src->hp.n_layer_all, sizeof *r->m.layers);
    r->cap_tensors = (int32_t)(1 + N_LAYER_TENSORS * src->hp.n_layer_all);
    r->tensors = snug_calloc((size_t)r->cap_tensors, sizeof *r->tensors);
    if (!r->m.layers || !r->tensors)
        return snug_err_set(err, SNUG_ERR_NOMEM, "tensor parallel (cpu): out of memory");
    memcpy(r->m.layers, src->layers, src->hp.n_layer_all * sizeof *r->m.layers);
    size_t bytes = 0;
    if ((rc = map_rank(r, &bytes, err))) return rc;
    if ((rc = snug_arena_init(&r->weights, "tp rank weights", bytes + 64, err))) return rc;
    if ((rc = map_rank(r, NULL, err))) return rc;
    /* caches and work arena: the rank's plan */
    struct snug_plan_limits lim = snug_plan_limits_default();
    lim.n_ctx = tp->n_ctx;
    lim.n_chunk = tp->n_chunk;
    lim.kv_type = kv_type;
    lim.n_ranks = tp->R;
    lim.rank = r->rank;
    struct snug_plan p;
    if ((rc = snug_plan_make(&src->hp, NULL, &lim, &p, err))) return rc;
    if ((rc = snug_kv_init(&r->kv, &p.kv_shape, err))) return rc;
    if ((rc = snug_arena_init(&r->work, "tp rank work", p.work_bytes, err))) return rc;
    r->sum = snug_malloc((size_t)tp->n_chunk * src->hp.n_embd * sizeof(float));
    r->logits = snug_malloc((size_t)tp->n_chunk * r->sr.vocab.count * sizeof(float));
    if (!r->sum || !r->logits)
        return snug_err_set(err, SNUG_ERR_NOMEM, "tensor parallel (cpu): out of memory");
    return SNUG_OK;
}

int snug_tp_cpu_open(struct snug_tp_cpu **out, const struct snug_model *m, int32_t n_ranks,
                     int32_t n_ctx, int32_t n_chunk, int32_t kv_type, struct snug_err *err) {
    *out = NULL;
    int rc = snug_shard_check(&m->hp, n_ranks, err);
    if (rc) return rc;
    if (n_ctx < 1 || n_chunk < 1)
        return snug_err_set(err, SNUG_ERR_INVALID,
                            "tensor parallel (cpu): context %d, chunk %d (>= 1 each)", n_ctx,
                            n_chunk);
    struct snug_tp_cpu *tp = snug_calloc(1, sizeof *tp);
    if (!tp) return snug_err_set(err, SNUG_ERR_NOMEM, "tensor parallel (cpu): out of memory");
    tp->src = m;
    tp->R = n_ranks;
    tp->n_ctx = n_ctx;
    tp->n_chunk = SNUG_MIN(n_chunk, n_ctx);
    struct snug_be cpu;
    snug_backend_cpu_init(&cpu, NULL);
    tp->ops = *cpu.ops;
    tp->ops.name = "cpu (tensor-parallel emulation)";
    tp->ops.all_reduce = n_ranks > 1 ? tp_all_reduce : NULL;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->pos = snug_malloc((size_t)tp->n_chunk * sizeof(int32_t));
    tp->ranks = snug_calloc((size_t)n_ranks, sizeof *tp->ranks);
    if (!tp->pos || !tp->ranks) {
        snug_tp_cpu_free(tp);
        return snug_err_set(err, SNUG_ERR_NOMEM, "tensor parallel (cpu): out of memory");
    }
    for (int32_t r = 0; r < n_ranks; r++) {
        tp->ranks[r].rank = r;
        if ((rc = open_rank(tp, &tp->ranks[r], kv_type, err))) {
            snug_tp_cpu_free(tp);
            return rc;
        }
    }
    for (int32_t r = 1; r < n_ranks; r++, tp->n_workers++)
        if (pthread_create(&tp->workers[r], NULL, worker_main, &tp->ranks[r])) {
            snug_tp_cpu_free(tp);
            return snug_err_set(err, SNUG_ERR_NOMEM,
                                "tensor parallel (cpu): cannot start the thread of rank %d", r);
        }
    *out = tp;
    return SNUG_OK;
}

void snug_tp_cpu_free(struct snug_tp_cpu *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->quit = true;
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int32_t r = 1; r <= tp->n_workers; r++) pthread_join(tp->workers[r], NULL);
    for (int32_t r = 0; tp->ranks && r < tp->R; r++) {
        struct tp_rank *k = &tp->ranks[r];
        snug_free(k->m.layers);
        snug_free(k->tensors);
        snug_arena_free(&k->weights);
        snug_kv_free(&k->kv);
        snug_arena_free(&k->work);
        snug_free(k->sum);
        snug_free(k->logits);
    }
    snug_free(tp->ranks);
    snug_free(tp->pos);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    snug_free(tp);
}

/* ---- eval ------------------------------------------------------------------------------------ */
static void rank_step(struct tp_rank *r) {
    r->m.arch->forward(&r->f);
    r->status = snug_backend_finish(&r->be, &r->err);
}

/* A worker: one rank's step each time `step` moves, until quit. */
static void *worker_main(void *arg) {
    struct tp_rank *r = arg;
    struct snug_tp_cpu *tp = r->tp;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        while (!tp->quit && tp->step == seen) pthread_cond_wait(&tp->cv, &tp->mu);
        bool quit = tp->quit;
        seen = tp->step;
        pthread_mutex_unlock(&tp->mu);
        if (quit) return NULL;
        rank_step(r);
        pthread_mutex_lock(&tp->mu);
        tp->finished++;
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
}

int snug_tp_cpu_eval(struct snug_tp_cpu *tp, const snug_token *ids, int32_t n, int32_t n_logits,
                     float *logits, struct snug_err *err) {
    const int64_t V = tp->src->hp.n_vocab;
    if (n < 0 || n_logits < 0 || n_logits > n || (n_logits && !logits))
        return snug_err_set(err, SNUG_ERR_INVALID, "tensor parallel (cpu): %d tokens, %d logits", n,
                            n_logits);
    if ((int64_t)tp->n_past + n > tp->n_ctx)
        return snug_err_set(err, SNUG_ERR_BUDGET,
                            "tensor parallel (cpu): %d + %d tokens pass the context of %d",
                            tp->n_past, n, tp->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return snug_err_set(err, SNUG_ERR_INVALID, "token id %d outside the vocabulary of %lld",
                                ids[i], (long long)V);
    int32_t out_row = 0;
    for (int32_t done = 0; done < n;) {
        int32_t T = SNUG_MIN(tp->n_chunk, n - done);
        int32_t first_logit = n - n_logits; /* the last n_logits rows: the chunk's last k */
        int32_t k = SNUG_MAX(0, done + T - SNUG_MAX(done, first_logit));
        for (int32_t i = 0; i < T; i++) tp->pos[i] = tp->n_past + i;
        for (int32_t r = 0; r < tp->R; r++) {
            struct tp_rank *q = &tp->ranks[r];
            snug_arena_reset_to(&q->work, 0);
            q->run = (struct snug_fwd_run){
                .kv = &q->kv, .row0 = 0, .T = T, .pos0 = tp->n_past, .n_logits = k};
            q->f = (struct snug_fwd){.m = &q->m,
                                     .n_threads = 1,
                                     .work = &q->work,
                                     .runs = &q->run,
                                     .n_runs = 1,
                                     .ids = ids + done,
                                     .pos = tp->pos,
                                     .T = T,
                                     .logits = k ? q->logits : NULL,
                                     .be = &q->be};
        }
        pthread_mutex_lock(&tp->mu); /* start the workers' ranks, run rank 0 here */
        tp->finished = 0;
        tp->step++;
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
        rank_step(&tp->ranks[0]);
        pthread_mutex_lock(&tp->mu);
        while (tp->finished < tp->R - 1) pthread_cond_wait(&tp->cv, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
        for (int32_t r = 0; r < tp->R; r++)
            if (tp->ranks[r].status) {
                if (err) *err = tp->ranks[r].err;
                return tp->ranks[r].status;
            }
        for (int32_t r = 0; r < tp->R; r++) { /* gather each rank's vocabulary rows */
            const struct tp_rank *q = &tp->ranks[r];
            int64_t vn = q->sr.vocab.count;
            for (int32_t j = 0; j < k; j++)
                memcpy(logits + (int64_t)(out_row + j) * V + q->sr.vocab.first, q->logits + j * vn,
                       (size_t)vn * sizeof(float));
        }
        out_row += k;
        tp->n_past += T;
        done += T;
    }
    return SNUG_OK;
}

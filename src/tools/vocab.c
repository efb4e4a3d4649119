/* vocab.c — struct snug_vocab: load from GGUF / HF tokenizer.json / built-in, write to a GGUF,
 * turn into a tokenizer. Owns every string it holds (one snug_malloc per string).
 * Invariant: after a successful load, n_tokens > 0, every token and merge is NUL-terminated and
 * token_types has n_tokens entries. On failure the struct is left freed (all zero).
 * Read next: vocab.h, src/tokenizer/tokenizer.h.
 */
#include "tools/vocab.h"

#include "core/core.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

void snug_vocab_free(struct snug_vocab *v) {
    if (!v) return;
    if (v->tokens)
        for (uint64_t i = 0; i < v->n_tokens; i++) snug_free((void *)v->tokens[i].data);
    if (v->merges)
        for (uint64_t i = 0; i < v->n_merges; i++) snug_free((void *)v->merges[i].data);
    snug_free(v->tokens);
    snug_free(v->token_types);
    snug_free(v->merges);
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->pad_id = -1;
}

/* Copy n bytes into a new NUL-terminated string. */
static int set_str(struct snug_gguf_str *dst, const char *s, size_t n) {
    char *p = snug_malloc(n + 1);
    if (!p) return SNUG_ERR_NOMEM;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    snug_free((void *)dst->data);
    dst->data = p;
    dst->len = n;
    return SNUG_OK;
}

/* Allocate the arrays for n tokens and m merges (strings empty, types NORMAL). */
static int vocab_alloc(struct snug_vocab *v, uint64_t n, uint64_t m, struct snug_err *err) {
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->pad_id = -1;
    v->tokens = snug_calloc(n ? n : 1, sizeof *v->tokens);
    v->token_types = snug_calloc(n ? n : 1, sizeof *v->token_types);
    v->merges = snug_calloc(m ? m : 1, sizeof *v->merges);
    if (!v->tokens || !v->token_types || !v->merges) {
        snug_vocab_free(v);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for a %llu-token vocabulary",
                            (unsigned long long)n);
    }
    v->n_tokens = n;
    v->n_merges = m;
    for (uint64_t i = 0; i < n; i++) v->token_types[i] = SNUG_TOKEN_NORMAL;
    return SNUG_OK;
}

/* ---- GGUF ------------------------------------------------------------------------------------ */
static int opt_id(const struct snug_gguf *g, const char *key, int32_t *out, struct snug_err *err) {
    uint32_t x = UINT32_MAX;
    int rc = snug_gguf_get_u32_opt(g, key, &x, err);
    *out = x > INT32_MAX ? -1 : (int32_t)x;
    return rc;
}

int snug_vocab_from_gguf(struct snug_vocab *v, const struct snug_gguf *g, struct snug_err *err) {
    memset(v, 0, sizeof *v);
    const char *name = snug_gguf_path(g);
    struct snug_gguf_str model, pre;
    int rc = snug_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc) return rc;
    if (model.len != 4 || memcmp(model.data, "gpt2", 4))
        return snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.model = '%.*s' is not supported (only 'gpt2')",
                            name, (int)SNUG_MIN(model.len, 64), model.data);
    if ((rc = snug_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err))) return rc;
    enum snug_gguf_type et, tt;
    uint64_t n = 0, nt = 0, m = 0;
    const void *arr, *types;
    if ((rc = snug_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &arr, err))) return rc;
    if (et != SNUG_GGUF_STRING || n == 0)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: tokenizer.ggml.tokens must be a non-empty string array", name);
    if ((rc = snug_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt, &nt, &types, err))) return rc;
    if (nt != n || tt == SNUG_GGUF_STRING || tt == SNUG_GGUF_ARRAY)
        return snug_err_set(err, SNUG_ERR_FORMAT,
                            "%s: tokenizer.ggml.token_type must be %llu integers, got %llu", name,
                            (unsigned long long)n, (unsigned long long)nt);
    if (snug_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        if ((rc = snug_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &m, &arr, err))) return rc;
        if (et != SNUG_GGUF_STRING)
            return snug_err_set(err, SNUG_ERR_FORMAT,
                                "%s: tokenizer.ggml.merges must be a string array", name);
    }
    if ((rc = vocab_alloc(v, n, m, err))) return rc;
    snprintf(v->pre, sizeof v->pre, "%.*s", (int)SNUG_MIN(pre.len, 31), pre.data);
    struct snug_gguf_str s;
    for (uint64_t i = 0; i < n && !rc; i++) {
        rc = snug_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s);
        if (!rc) rc = set_str(&v->tokens[i], s.data, (size_t)s.len);
        int64_t ty = snug_gguf_arr_i64(tt, types, i);
        v->token_types[i] = ty < 0 || ty > SNUG_TOKEN_BYTE ? SNUG_TOKEN_UNDEFINED : (int32_t)ty;
    }
    for (uint64_t i = 0; i < m && !rc; i++) {
        rc = snug_gguf_arr_str(g, "tokenizer.ggml.merges", i, &s);
        if (!rc) rc = set_str(&v->merges[i], s.data, (size_t)s.len);
    }
    if (rc) {
        snug_vocab_free(v);
        return snug_err_set(err, rc, "%s: reading the vocabulary failed", name);
    }
    rc = opt_id(g, "tokenizer.ggml.bos_token_id", &v->bos_id, err);
    if (!rc) rc = opt_id(g, "tokenizer.ggml.eos_token_id", &v->eos_id, err);
    if (!rc) rc = opt_id(g, "tokenizer.ggml.padding_token_id", &v->pad_id, err);
    if (rc) snug_vocab_free(v);
    return rc;
}

/* ---- built-in ------------------------------------------------------------------------------- */
/* The GPT-2 byte-to-unicode code point of byte b (see tokenizer.c for the rule's source). */
static uint32_t byte_to_cp(int b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    if (printable) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) n++;
    return 256u + (uint32_t)n;
}

static const char *const BUILTIN_ADDED[] = {"<|endoftext|>", "<|im_start|>",    "<|im_end|>",
                                            "<think>",       "</think>",        "<tool_call>",
                                            "</tool_call>",  "<tool_response>", "</tool_response>"};

int snug_vocab_builtin(struct snug_vocab *v, struct snug_err *err) {
    const int n_added = (int)(sizeof BUILTIN_ADDED / sizeof BUILTIN_ADDED[0]);
    int rc = vocab_alloc(v, 256 + (uint64_t)n_added, 0, err);
    if (rc) return rc;
    for (int b = 0; b < 256 && !rc; b++) {
        uint32_t cp = byte_to_cp(b);
        char u[2];
        size_t l = 1;
        if (cp < 0x80) {
            u[0] = (char)cp;
        } else { /* every mapped code point is < 0x800: two UTF-8 bytes */
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
            l = 2;
        }
        rc = set_str(&v->tokens[b], u, l);
    }
    for (int k = 0; k < n_added && !rc; k++) {
        rc = set_str(&v->tokens[256 + k], BUILTIN_ADDED[k], strlen(BUILTIN_ADDED[k]));
        v->token_types[256 + k] = k < 3 ? SNUG_TOKEN_CONTROL : SNUG_TOKEN_USER_DEFINED;
    }
    if (rc) {
        snug_vocab_free(v);
        return snug_err_set(err, SNUG_ERR_NOMEM, "out of memory for the built-in vocabulary");
    }
    snprintf(v->pre, sizeof v->pre, "qwen35");
    v->bos_id = v->pad_id = 256;
    v->eos_id = 258;
    return SNUG_OK;
}

/* ---- HF tokenizer.json ---------------------------------------------------------------------- */
/* The two split regexes we accept, exactly as they appear in tokenizer.json files
 * (docs/qwen35.md §5.3 for Qwen3.5; Qwen2's is the same without \p{M}). */
static const char HF_RE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Find the Split regex in pre_tokenizer (itself or inside a Sequence); NULL if none. */
static const char *find_split_regex(json_t *pt) {
    if (!json_is_object(pt)) return NULL;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && !strcmp(type, "Split"))
        return json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
    json_t *seq = json_object_get(pt, "pretokenizers");
    size_t i;
    json_t *x;
    json_array_foreach(seq, i, x) {
        const char *r = find_split_regex(x);
        if (r) return r;
    }
    return NULL;
}

/* The id of a special token named in tokenizer_config.json (a string or {"content": ...}). */
static int32_t config_token(json_t *cfg, const char *key, const struct snug_vocab *v) {
    json_t *x = json_object_get(cfg, key);
    if (json_is_object(x)) x = json_object_get(x, "content");
    const char *s = json_string_value(x);
    if (!s) return -1;
    for (uint64_t i = 0; i < v->n_tokens; i++)
        if (v->token_types[i] != SNUG_TOKEN_NORMAL && !strcmp(v->tokens[i].data, s))
            return (int32_t)i;
    return -1;
}

static int32_t added_id(const struct snug_vocab *v, const char *s) {
    for (uint64_t i = 0; i < v->n_tokens; i++)
        if (v->token_types[i] != SNUG_TOKEN_NORMAL && !strcmp(v->tokens[i].data, s))
            return (int32_t)i;
    return -1;
}

int snug_vocab_from_hf_json(struct snug_vocab *v, const char *path, struct snug_err *err) {
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->pad_id = -1;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return snug_err_set(err, SNUG_ERR_FORMAT, "%s:%d: %s", path, je.line, je.text);
    int rc = SNUG_OK;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    const char *re = find_split_regex(json_object_get(root, "pre_tokenizer"));
    const char *pre = NULL;
    if (re && !strcmp(re, HF_RE_QWEN35)) pre = "qwen35";
    if (re && !strcmp(re, HF_RE_QWEN2)) pre = "qwen2";
    if (!mtype || strcmp(mtype, "BPE") || !json_is_object(vocab)) {
        rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED, "%s: model.type must be \"BPE\" with a vocab",
                          path);
        goto out;
    }
    if (!pre) {
        rc = snug_err_set(err, SNUG_ERR_UNSUPPORTED,
                          "%s: pre_tokenizer Split regex %.200s is neither the Qwen3.5 nor the "
                          "Qwen2 one",
                          path, re ? re : "(missing)");
        goto out;
    }
    /* size: one past the largest id */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= INT32_MAX) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: vocab entry '%.64s' has a bad id", path,
                              key);
            goto out;
        }
        max_id = SNUG_MAX(max_id, (int64_t)json_integer_value(val));
    }
    size_t i;
    json_array_foreach(added, i, val) {
        json_t *id = json_object_get(val, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= INT32_MAX ||
            !json_is_string(json_object_get(val, "content"))) {
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: added_tokens[%zu] needs id and content",
                              path, i);
            goto out;
        }
        max_id = SNUG_MAX(max_id, (int64_t)json_integer_value(id));
    }
    if (max_id < 0) {
        rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: the vocabulary is empty", path);
        goto out;
    }
    if ((rc = vocab_alloc(v, (uint64_t)max_id + 1, json_array_size(merges), err))) goto out;
    snprintf(v->pre, sizeof v->pre, "%s", pre);
    json_object_foreach(vocab, key, val) {
        int64_t id = json_integer_value(val);
        if ((rc = set_str(&v->tokens[id], key, strlen(key)))) goto nomem;
    }
    json_array_foreach(added, i, val) {
        int64_t id = json_integer_value(json_object_get(val, "id"));
        json_t *c = json_object_get(val, "content");
        if ((rc = set_str(&v->tokens[id], json_string_value(c), json_string_length(c)))) goto nomem;
        v->token_types[id] = json_is_true(json_object_get(val, "special"))
                                 ? SNUG_TOKEN_CONTROL
                                 : SNUG_TOKEN_USER_DEFINED;
    }
    for (uint64_t k = 0; k < v->n_tokens; k++) { /* holes: [PAD<id>] as llama.cpp's converter */
        if (v->tokens[k].data) continue;
        char pad[32];
        int l = snprintf(pad, sizeof pad, "[PAD%llu]", (unsigned long long)k);
        if ((rc = set_str(&v->tokens[k], pad, (size_t)l))) goto nomem;
        v->token_types[k] = SNUG_TOKEN_USER_DEFINED;
    }
    json_array_foreach(merges, i, val) {
        if (json_is_string(val)) { /* "left right" */
            rc = set_str(&v->merges[i], json_string_value(val), json_string_length(val));
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) &&
                   json_is_string(json_array_get(val, 1))) { /* ["left", "right"] */
            json_t *a = json_array_get(val, 0), *b = json_array_get(val, 1);
            size_t la = json_string_length(a), lb = json_string_length(b);
            char *buf = snug_malloc(la + lb + 2);
            if (!buf) goto nomem;
            memcpy(buf, json_string_value(a), la);
            buf[la] = ' ';
            memcpy(buf + la + 1, json_string_value(b), lb);
            rc = set_str(&v->merges[i], buf, la + lb + 1);
            snug_free(buf);
        } else {
            rc = snug_err_set(err, SNUG_ERR_FORMAT, "%s: model.merges[%zu] is malformed", path, i);
            snug_vocab_free(v);
            goto out;
        }
        if (rc) goto nomem;
    }
    /* special ids: tokenizer_config.json next to tokenizer.json, then the usual names */
    int32_t eot = added_id(v, "<|endoftext|>");
    int32_t ime = added_id(v, "<|im_end|>");
    v->bos_id = v->pad_id = eot;
    v->eos_id = ime >= 0 ? ime : eot;
    char cfg_path[4096];
    const char *slash = strrchr(path, '/');
    snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json",
             slash ? (int)(slash - path + 1) : 0, path);
    json_t *cfg = json_load_file(cfg_path, 0, &je);
    if (cfg) {
        int32_t x;
        if ((x = config_token(cfg, "eos_token", v)) >= 0) v->eos_id = x;
        if ((x = config_token(cfg, "pad_token", v)) >= 0) v->pad_id = x;
        if ((x = config_token(cfg, "bos_token", v)) >= 0) v->bos_id = x;
        json_decref(cfg);
    }
    goto out;
nomem:
    snug_vocab_free(v);
    rc = snug_err_set(err, SNUG_ERR_NOMEM, "%s: out of memory", path);
out:
    json_decref(root);
    return rc;
}

/* ---- writing / using ----------------------------------------------------------------------------
 */
int snug_vocab_write_gguf(const struct snug_vocab *v, struct snug_gguf_writer *w,
                          struct snug_err *err) {
    int rc = snug_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    if (!rc) rc = snug_gguf_writer_add_str(w, "tokenizer.ggml.pre", v->pre);
    if (!rc) rc = snug_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", v->n_tokens, v->tokens);
    if (!rc)
        rc = snug_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", SNUG_GGUF_INT32, v->n_tokens,
                                      v->token_types);
    if (!rc && v->n_merges)
        rc = snug_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", v->n_merges, v->merges);
    if (!rc && v->bos_id >= 0)
        rc = snug_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos_id);
    if (!rc && v->eos_id >= 0)
        rc = snug_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos_id);
    if (!rc && v->pad_id >= 0)
        rc = snug_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad_id);
    if (rc) return snug_err_set(err, rc, "writing the vocabulary: %s", snug_gguf_writer_error(w));
    return SNUG_OK;
}

int snug_vocab_tokenizer(const struct snug_vocab *v, struct snug_tokenizer **out,
                         struct snug_err *err) {
    struct snug_tokenizer_desc d = {.n_tokens = v->n_tokens,
                                    .tokens = v->tokens,
                                    .token_types = v->token_types,
                                    .n_merges = v->n_merges,
                                    .merges = v->merges,
                                    .pre = v->pre,
                                    .bos_id = v->bos_id,
                                    .eos_id = v->eos_id,
                                    .pad_id = v->pad_id,
                                    .name = "vocabulary"};
    return snug_tokenizer_init(out, &d, err);
}

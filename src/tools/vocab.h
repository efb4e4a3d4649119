/* vocab.h — a plain, editable byte-level BPE vocabulary: what a GGUF's tokenizer.ggml.* keys
 * hold, as owned C arrays. Load it from a GGUF, from a Hugging Face tokenizer.json, or take the
 * built-in byte-level vocabulary; write it into a GGUF being generated; or build a tokenizer.
 *
 *   struct snug_vocab v;
 *   snug_vocab_builtin(&v, &err);                // 256 bytes + chat tokens, no merges
 *   snug_vocab_write_gguf(&v, writer, &err);     // adds tokenizer.ggml.* keys
 *   snug_vocab_free(&v);
 *
 * Strings are in GGUF form: NORMAL tokens in the GPT-2 byte-to-unicode mapping ("Ġhi"), added
 * tokens (CONTROL / USER_DEFINED) as literal text; merges are "left right" in mapped form.
 * Owned: every array and string (snug_vocab_free releases them; it is a no-op on a zeroed or
 * already-freed struct). Read next: src/tokenizer/tokenizer.h.
 */
#ifndef SNUG_TOOLS_VOCAB_H
#define SNUG_TOOLS_VOCAB_H

#include "gguf/gguf.h"
#include "snug.h"
#include "tokenizer/tokenizer.h"

struct snug_vocab {
    uint64_t n_tokens;
    struct snug_gguf_str *tokens; /* [n_tokens], each .data owned, NUL-terminated */
    int32_t *token_types;         /* [n_tokens], enum snug_token_type */
    uint64_t n_merges;
    struct snug_gguf_str *merges;   /* [n_merges], "left right", rank = index */
    int32_t bos_id, eos_id, pad_id; /* -1 = none */
    char pre[32];                   /* tokenizer.ggml.pre: "qwen35" or "qwen2" */
};

/* Copy the tokenizer.ggml.* arrays of a GGUF (model must be "gpt2"). */
int snug_vocab_from_gguf(struct snug_vocab *v, const struct snug_gguf *g, struct snug_err *err);

/* Read a Hugging Face tokenizer.json (model BPE, byte-level). Added tokens become CONTROL when
 * "special" is true, else USER_DEFINED; ids missing from the file are filled with "[PAD<id>]"
 * USER_DEFINED tokens (as llama.cpp's converter does). The pre-tokenizer must be the Qwen3.5 or
 * the Qwen2 split regex (else SNUG_ERR_UNSUPPORTED). Special ids come from tokenizer_config.json
 * in the same folder when present (eos_token, pad_token, bos_token); bos and pad default to
 * <|endoftext|> when it exists, eos to <|im_end|> then <|endoftext|>. */
int snug_vocab_from_hf_json(struct snug_vocab *v, const char *path, struct snug_err *err);

/* The built-in byte-level vocabulary: ids 0..255 are the bytes 0x00..0xFF (NORMAL), then
 * <|endoftext|> 256, <|im_start|> 257, <|im_end|> 258 (CONTROL), <think> 259, </think> 260,
 * <tool_call> 261, </tool_call> 262, <tool_response> 263, </tool_response> 264 (USER_DEFINED).
 * No merges; pre "qwen35"; bos = pad = <|endoftext|>, eos = <|im_end|>. */
int snug_vocab_builtin(struct snug_vocab *v, struct snug_err *err);

/* Add tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/padding_token_id} keys
 * (merges only when there are some; ids only when >= 0). */
int snug_vocab_write_gguf(const struct snug_vocab *v, struct snug_gguf_writer *w,
                          struct snug_err *err);

/* Build a tokenizer from the vocabulary (the vocabulary may be freed afterwards). */
int snug_vocab_tokenizer(const struct snug_vocab *v, struct snug_tokenizer **out,
                         struct snug_err *err);

void snug_vocab_free(struct snug_vocab *v);

#endif /* SNUG_TOOLS_VOCAB_H */

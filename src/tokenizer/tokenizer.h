/* tokenizer.h — byte-level BPE tokenizer (GPT-2 style, as used by Qwen2/Qwen3.5/3.6) and a
 * streaming UTF-8-safe detokenizer.
 *
 * A short tour:
 *   struct snug_tokenizer *tok;
 *   snug_tokenizer_load(&tok, gguf, &err);            // from the tokenizer.ggml.* keys
 *   snug_tokenizer_encode(tok, text, len, true, ids, cap, &n, &err);
 *   struct snug_detok d; snug_detok_init(&d, tok, 0, &err);
 *   for each id: snug_detok_push(&d, id, &bytes, &len);  // only whole UTF-8 characters come out
 *   snug_detok_flush(&d, &bytes, &len); snug_detok_free(&d);
 *
 * Encoding pipeline (facts from HF `tokenizers` and llama.cpp's llama-vocab.cpp, described in our
 * own words): (1) added tokens (token_type CONTROL=3, USER_DEFINED=4) are found in the raw text,
 * leftmost-longest; USER_DEFINED ones always, CONTROL ones only when parse_special is true (as
 * llama.cpp and HF do: HF never splits non-special added tokens); (2) each stretch of text between
 * them is NFC-normalised (unless turned off), (3) split by the pre-tokenizer regex (docs/qwen35.md
 * §5.3), (4) each piece's bytes are BPE-merged by merge rank (lowest rank first, leftmost first on
 * ties). Invalid UTF-8 in the input is NOT an error: each maximal invalid byte run is passed
 * through un-normalised as single-byte tokens and acts as a hard pre-token boundary, so every byte
 * string encodes and decode(encode(s)) returns the bytes of s (after NFC of its valid stretches).
 *
 * Ownership: the tokenizer owns copies of everything it needs (the GGUF may be closed after
 * load). It is immutable after load: encode/decode may run concurrently from several threads.
 * Read next: tokenizer.c (tables and loading), encode.c (pre-tokenizer and BPE), detok.c.
 */
#ifndef SNUG_TOKENIZER_H
#define SNUG_TOKENIZER_H

#include "gguf/gguf.h"
#include "snug.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF token types (tokenizer.ggml.token_type; values from llama.cpp's llama_token_type). */
enum snug_token_type {
    SNUG_TOKEN_UNDEFINED = 0,
    SNUG_TOKEN_NORMAL = 1,
    SNUG_TOKEN_UNKNOWN = 2,
    SNUG_TOKEN_CONTROL = 3,
    SNUG_TOKEN_USER_DEFINED = 4,
    SNUG_TOKEN_UNUSED = 5,
    SNUG_TOKEN_BYTE = 6,
};

/* Which pre-tokenizer regex to use (tokenizer.ggml.pre). */
enum snug_pretok {
    SNUG_PRETOK_QWEN35 = 0, /* "qwen35": Qwen2's regex with \p{M} joined to the letter classes */
    SNUG_PRETOK_QWEN2 = 1,  /* "qwen2" */
};

struct snug_tokenizer;

/* A tokenizer described by plain arrays (what a GGUF's tokenizer.ggml.* keys hold). Tokens of
 * type NORMAL are in the GPT-2 byte-to-unicode form ("Ġhello"); CONTROL / USER_DEFINED tokens
 * are literal text ("<|im_end|>"). Merges are "left right" in the same mapped form. Everything
 * is copied by snug_tokenizer_init; ids of -1 mean "none". */
struct snug_tokenizer_desc {
    uint64_t n_tokens;
    const struct snug_gguf_str *tokens; /* [n_tokens] */
    const int32_t *token_types;         /* [n_tokens], enum snug_token_type; NULL = all NORMAL */
    uint64_t n_merges;
    const struct snug_gguf_str *merges; /* [n_merges], rank = index */
    const char *pre;                    /* "qwen35" or "qwen2" (NUL-terminated) */
    int32_t bos_id, eos_id, pad_id;
    const char *name; /* for error messages (file name), may be NULL */
    bool no_nfc;      /* skip NFC normalisation (see snug_tokenizer_set_nfc) */
};

/* Build a tokenizer from arrays. Errors: SNUG_ERR_UNSUPPORTED for an unknown `pre`,
 * SNUG_ERR_FORMAT for malformed tokens/merges (naming the index and the problem). */
int snug_tokenizer_init(struct snug_tokenizer **out, const struct snug_tokenizer_desc *d,
                        struct snug_err *err);

/* Build a tokenizer from a GGUF's tokenizer.ggml.* metadata (model must be "gpt2"). The GGUF
 * may be closed afterwards. On failure *out is NULL and err names the file and key. */
int snug_tokenizer_load(struct snug_tokenizer **out, const struct snug_gguf *g,
                        struct snug_err *err);
void snug_tokenizer_free(struct snug_tokenizer *tok);

/* NFC normalisation of input text is on by default, as in HF tokenizer.json files of Qwen2/3.5
 * (normalizer "NFC"); a GGUF does not record the normalizer. llama.cpp never normalises, and the
 * expected ids in its ggml-vocab-*.out files are computed without NFC, so reproducing llama.cpp
 * exactly needs it off. Call right after loading, before the tokenizer is shared. */
void snug_tokenizer_set_nfc(struct snug_tokenizer *tok, bool on);

/* Encode `len` bytes of `text` (any bytes; see the file comment for invalid UTF-8). Writes up
 * to `cap` ids to out_ids (may be NULL when cap is 0) and the total count to *n_out. If the
 * ids do not fit, returns SNUG_ERR_BUDGET with *n_out = the count needed (call again with a
 * larger buffer). No special BOS/EOS is added. Allocates scratch for the call only. */
int snug_tokenizer_encode(const struct snug_tokenizer *tok, const char *text, size_t len,
                          bool parse_special, snug_token *out_ids, size_t cap, size_t *n_out,
                          struct snug_err *err);

/* A byte range of a text. */
struct snug_text_span {
    size_t off, len;
};

/* Encode with special tokens parsed (as parse_special = true) except inside the `plain` spans
 * (sorted, non-overlapping): a CONTROL token whose text overlaps a plain span is not matched
 * there, so that text is encoded as ordinary bytes. For a chat prompt, the plain spans are
 * what users wrote and only the template's own markers become special tokens; the text is
 * still encoded in one pass, so boundaries between spans tokenize exactly as without spans.
 * SNUG_ERR_INVALID for spans out of order or outside the text; otherwise as encode. */
int snug_tokenizer_encode_spans(const struct snug_tokenizer *tok, const char *text, size_t len,
                                const struct snug_text_span *plain, size_t n_plain,
                                snug_token *out_ids, size_t cap, size_t *n_out,
                                struct snug_err *err);

int32_t snug_tokenizer_n_vocab(const struct snug_tokenizer *tok);
enum snug_pretok snug_tokenizer_pretok(const struct snug_tokenizer *tok);
/* The id of a token given as literal text ("<|im_end|>", "hello" for the NORMAL token "hello"),
 * added tokens first; -1 if absent. */
snug_token snug_tokenizer_token_id(const struct snug_tokenizer *tok, const char *text);
snug_token snug_tokenizer_eos(const struct snug_tokenizer *tok);    /* -1 if none */
snug_token snug_tokenizer_bos(const struct snug_tokenizer *tok);    /* -1 if none */
snug_token snug_tokenizer_im_end(const struct snug_tokenizer *tok); /* "<|im_end|>" or -1 */
/* The end-of-generation set every generation loop stops on (`snug run` and the server alike):
 * the file's EOS, "<|im_end|>" (the end of a chat turn) and "<|endoftext|>" (the end of a
 * document, which a completion may reach). Writes the distinct ids present into
 * out[SNUG_TOKENIZER_EOG_MAX] and returns their count. */
#define SNUG_TOKENIZER_EOG_MAX 3
int32_t snug_tokenizer_eog(const struct snug_tokenizer *tok, snug_token *out);
enum snug_token_type snug_tokenizer_token_type(const struct snug_tokenizer *tok, snug_token id);
/* The raw bytes of token `id` (byte-level mapping undone for NORMAL tokens; literal text for
 * added tokens). Borrowed, not NUL-terminated, valid until _free. NULL (len 0) for a bad id. */
const char *snug_tokenizer_token_bytes(const struct snug_tokenizer *tok, snug_token id,
                                       size_t *len);
/* Longest token_bytes over the vocabulary (sizes detokenizer buffers). */
size_t snug_tokenizer_max_token_bytes(const struct snug_tokenizer *tok);

/* Concatenate the raw bytes of `n` ids into out (no UTF-8 repair). Writes up to cap bytes and
 * the total to *n_out; SNUG_ERR_BUDGET when it does not fit, SNUG_ERR_INVALID for a bad id. */
int snug_tokenizer_decode(const struct snug_tokenizer *tok, const snug_token *ids, size_t n,
                          char *out, size_t cap, size_t *n_out, struct snug_err *err);

/* ---- streaming detokenizer ----------------------------------------------------------------- */
/* Push ids one at a time; each push returns only complete, valid UTF-8 characters. Bytes of an
 * incomplete character wait for the next token; a byte sequence that can never become valid is
 * replaced by U+FFFD (one per maximal invalid subpart, as the Unicode "best practice" does);
 * an incomplete tail at flush becomes U+FFFD. So the concatenated output is always valid UTF-8,
 * and equals the raw bytes whenever those are valid UTF-8. No allocation after _init. */
#define SNUG_DETOK_SKIP_CONTROL 1u /* emit nothing for CONTROL tokens (<|im_end|>, ...) */

struct snug_detok {
    const struct snug_tokenizer *tok; /* borrowed */
    unsigned flags;
    uint8_t pending[4]; /* bytes of an unfinished UTF-8 character */
    size_t n_pending;
    char *buf; /* owned output buffer, buf_cap bytes */
    size_t buf_cap;
};

int snug_detok_init(struct snug_detok *d, const struct snug_tokenizer *tok, unsigned flags,
                    struct snug_err *err);
void snug_detok_free(struct snug_detok *d);
/* Forget any pending bytes (start a new stream). */
void snug_detok_reset(struct snug_detok *d);
/* Feed one token. *out / *out_len: the bytes now complete (borrowed, valid until the next call).
 * SNUG_ERR_INVALID for an id outside the vocabulary (state unchanged). */
int snug_detok_push(struct snug_detok *d, snug_token id, const char **out, size_t *out_len);
/* End of stream: returns what is left (an incomplete tail as U+FFFD) and resets. */
void snug_detok_flush(struct snug_detok *d, const char **out, size_t *out_len);

#endif /* SNUG_TOKENIZER_H */

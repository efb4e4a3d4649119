/* sample.h — the sampler chain: turn one logits vector [n_vocab] into one token.
 *
 * Chain, in this order: repetition penalty (CTRL / llama.cpp style: over the last N tokens a
 * positive logit is divided by the penalty, a negative one multiplied), presence and frequency
 * penalties (OpenAI semantics: logit -= presence·[count > 0] + frequency·count), temperature
 * (temperature <= 0 means greedy argmax of the penalised logits, ties -> lowest id), top-k,
 * top-p (smallest prefix of the probability-sorted tokens whose mass >= p), min-p (drop tokens
 * whose probability is below min_p × the largest), then a draw from the renormalised remainder
 * with a seeded xoshiro256** generator (reproducible for a seed on every platform).
 * Owned: every buffer the chain needs, allocated once at init; sampling allocates nothing.
 * Read next: sample.c.
 */
#ifndef SNUG_SAMPLE_H
#define SNUG_SAMPLE_H

#include "snug.h"

#include <stdint.h>

struct snug_sampler_params {
    float temperature;       /* <= 0: greedy argmax */
    int32_t top_k;           /* <= 0 or >= n_vocab: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off; must be > 0 */
    int32_t repeat_last_n;   /* window of recent tokens the penalties look at; < 0: all given */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    uint64_t seed;
};

/* Defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties
 * (repeat_penalty 1, repeat_last_n 64), seed 0. */
struct snug_sampler_params snug_sampler_params_default(void);

struct snug_sampler;

/* Validate params and allocate all buffers for a vocabulary of n_vocab tokens. */
int snug_sampler_init(struct snug_sampler **out, const struct snug_sampler_params *params,
                      int32_t n_vocab, struct snug_err *err);
void snug_sampler_free(struct snug_sampler *s);

/* Restart the random stream as if freshly initialised with `seed`. */
void snug_sampler_seed(struct snug_sampler *s, uint64_t seed);

/* Run the chain over logits[n_vocab] (not modified) and draw a token. recent[0..n_recent) are
 * the tokens so far (oldest first; ids outside the vocabulary are ignored); the penalties use
 * the last repeat_last_n of them. Allocates nothing. */
snug_token snug_sampler_sample(struct snug_sampler *s, const float *logits,
                               const snug_token *recent, int32_t n_recent);

/* The distribution the chain would draw from: probs[n_vocab] (filtered tokens are 0, the rest
 * sum to 1; greedy gives a one-hot vector). Does not advance the random stream. */
void snug_sampler_probs(struct snug_sampler *s, const float *logits, const snug_token *recent,
                        int32_t n_recent, float *probs);

/* ---- the generator, exposed for tests and for speculative verification ------------------ */
struct snug_rng {
    uint64_t s[4];
};
void snug_rng_seed(struct snug_rng *r, uint64_t seed); /* state from splitmix64(seed) */
uint64_t snug_rng_next(struct snug_rng *r);            /* xoshiro256** */
double snug_rng_uniform(struct snug_rng *r);           /* [0, 1) with 53 random bits */

#endif /* SNUG_SAMPLE_H */

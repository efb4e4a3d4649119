/* test_prefix_sched.c — checkpoint positions and chunk ends: on random chats (message starts,
 * system and last-message ends, interval, chunk size), a run restored at any checkpoint (or
 * any message start) cuts exactly the chunks the cold run cuts after that point; chunks are at
 * most n_chunk tokens; every checkpoint is a chunk end of the cold run; the checkpoint list
 * agrees with snug_prefix_checkpoint_at. */
#include "prefix/prefix_sched.h"
#include "test.h"

#include <stdint.h>

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* Chunk ends of a run from `from` to the end. */
static int32_t run(const struct snug_prefix_sched *s, int32_t from, int32_t *ends, int32_t cap) {
    int32_t n = 0;
    for (int32_t p = from; p < s->n_prompt;) {
        int32_t e = snug_prefix_chunk_end(s, p);
        if (e <= p || e > s->n_prompt || n == cap) return -1;
        ends[n++] = e;
        p = e;
    }
    return n;
}

int main(void) {
    static int32_t cold[20000], warm[20000], starts[64], cks[8192];
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        struct snug_prefix_sched s = {0};
        s.n_prompt = 1 + (int32_t)rnd(6000);
        s.n_chunk = 1 + (int32_t)rnd(700);
        s.every = rnd(4) ? 1 + (int32_t)rnd(2000) : 0;
        int32_t nm = (int32_t)rnd(40), prev = 0;
        for (int32_t i = 0; i < nm; i++) {
            prev += 1 + (int32_t)rnd((uint32_t)(s.n_prompt / 8 + 1));
            if (prev >= s.n_prompt) break;
            starts[s.n_msg_starts++] = prev;
        }
        s.msg_starts = starts;
        s.system_end = s.n_msg_starts ? starts[0] : 0;
        s.last_end = s.n_msg_starts ? starts[s.n_msg_starts - 1] : 0;
        int32_t nc = run(&s, 0, cold, 20000);
        if (nc < 0) {
            bad++;
            continue;
        }
        for (int32_t i = 0; i < nc; i++)
            if (cold[i] - (i ? cold[i - 1] : 0) > s.n_chunk) bad++;
        int32_t nk = snug_prefix_checkpoints(&s, 0, cks, 8192);

        int32_t n_at = 0;
        for (int32_t p = 1; p < s.n_prompt; p++) n_at += snug_prefix_checkpoint_at(&s, p);
        if (n_at != nk && bad++ < 5)
            fprintf(stderr, "iter %d: %d vs %d checkpoints\n", iter, n_at, nk);
        /* restore points: every checkpoint and every message start */
        for (int32_t k = 0; k < nk + s.n_msg_starts; k++) {
            int32_t p = k < nk ? cks[k] : starts[k - nk];
            if (k < nk && !snug_prefix_checkpoint_at(&s, p)) bad++;
            int32_t i0 = 0;
            while (i0 < nc && cold[i0] <= p) i0++;
            if (i0 == 0 || cold[i0 - 1] != p) { /* p must be a cold chunk end */
                if (bad++ < 5)
                    fprintf(stderr, "iter %d: restore point %d is not a cold chunk end\n", iter, p);
                continue;
            }
            int32_t nw = run(&s, p, warm, 20000);
            if (nw != nc - i0 || memcmp(warm, cold + i0, (size_t)nw * sizeof *warm)) {
                if (bad++ < 5) fprintf(stderr, "iter %d: chunks from %d differ\n", iter, p);
            }
        }
        /* a checkpoint list from a later start: the tail of the full list */
        if (nk > 1) {
            static int32_t tail[8192];
            int32_t nt = snug_prefix_checkpoints(&s, cks[0], tail, 8192);
            if ((nt != nk - 1 || memcmp(tail, cks + 1, (size_t)nt * sizeof *tail)) && bad++ < 5)
                fprintf(stderr, "iter %d: tail %d vs %d\n", iter, nt, nk - 1);
        }
    }
    CHECKF(bad == 0, "%d mismatches", bad);
    /* a worked example: 10000 tokens, system ends at 1200, the last message at 9000, every
     * 4096, chunks of 2048 */
    int32_t st[] = {1200, 5000, 9000};
    struct snug_prefix_sched s = {.n_prompt = 10000,
                                  .n_chunk = 2048,
                                  .every = 4096,
                                  .msg_starts = st,
                                  .n_msg_starts = 3,
                                  .system_end = 1200,
                                  .last_end = 9000};
    int32_t k[8];
    CHECK(snug_prefix_checkpoints(&s, 0, k, 8) == 4);
    CHECK(k[0] == 1200 && k[1] == 4096 && k[2] == 8192 && k[3] == 9000);
    int32_t n = run(&s, 0, cold, 64);
    int32_t want[] = {1200, 3248, 4096, 5000, 7048, 8192, 9000, 10000};
    CHECK(n == 8 && !memcmp(cold, want, sizeof want));
    CHECK(snug_prefix_chunk_end(&s, 100) == 1200); /* mid-way: joins the grid */
    CHECK(snug_prefix_chunk_end(&s, 1300) == 3248);
    return TEST_DONE();
}

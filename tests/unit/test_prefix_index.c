/* test_prefix_index.c — the prefix tree of token blocks against a brute-force reference (every
 * inserted sequence kept whole; the longest common prefix and the latest point found by
 * scanning them all), on random sequences over a tiny alphabet (so they share prefixes and
 * diverge inside blocks), block sizes 1..9; then eviction: bounded pool, LRU order, points
 * reported when their node goes, no allocation per lookup or insert. */
#include "prefix/prefix_index.h"
#include "test.h"

#define MAX_SEQ 64
#define MAX_LEN 200

static uint64_t rng = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

struct ref {
    snug_token seq[MAX_SEQ][MAX_LEN];
    int32_t len[MAX_SEQ];
    int n;
    /* points: (sequence, pos, handle) */
    int32_t pt_seq[1024], pt_pos[1024];
    uint64_t pt_handle[1024];
    bool pt_live[1024];
    int n_pt;
};

static int32_t lcp(const snug_token *a, const snug_token *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void ref_lookup(const struct ref *r, const snug_token *q, int32_t n, int32_t max_pos,
                       int32_t *n_common, int32_t *pos) {
    *n_common = 0;
    for (int i = 0; i < r->n; i++) {
        int32_t m = lcp(r->seq[i], q, SNUG_MIN(n, r->len[i]));
        if (m > *n_common) *n_common = m;
    }
    *pos = 0;
    for (int k = 0; k < r->n_pt; k++) {
        if (!r->pt_live[k]) continue;
        int32_t p = r->pt_pos[k];
        if (p > *n_common || p > max_pos || p > n) continue;
        if (lcp(r->seq[r->pt_seq[k]], q, p) == p && p > *pos) *pos = p;
    }
}

static void random_seq(snug_token *s, int32_t n, int alphabet) {
    for (int32_t i = 0; i < n; i++) s[i] = (snug_token)rnd((uint32_t)alphabet);
}

/* A new sequence: a prefix of an earlier one plus fresh tokens, or fresh. */
static int32_t make_seq(const struct ref *r, snug_token *s, int alphabet) {
    int32_t n = 1 + (int32_t)rnd(MAX_LEN);
    int32_t keep = 0;
    if (r->n && rnd(4)) {
        int src = (int)rnd((uint32_t)r->n);
        keep = (int32_t)rnd((uint32_t)r->len[src] + 1);
        if (keep > n) keep = n;
        memcpy(s, r->seq[src], (size_t)keep * sizeof *s);
    }
    random_seq(s + keep, n - keep, alphabet);
    return n;
}

static int evicted_calls;
static uint64_t evicted_last;
static void on_evict(void *user, int32_t point, uint64_t handle) {
    (void)user;
    (void)point;
    evicted_calls++;
    evicted_last = handle;
}

static void randomized_against_reference(void) {
    static struct ref r;
    for (int32_t B = 1; B <= 9; B++) {
        for (int alphabet = 2; alphabet <= 5; alphabet += 3) {
            memset(&r, 0, sizeof r);
            struct snug_prefix_index ix;
            struct snug_err err = {0};
            struct snug_prefix_index_cfg cfg = {
                .block = B, .max_tokens = MAX_SEQ * MAX_LEN + 64, .max_points = 1024};
            CHECK(snug_prefix_index_init(&ix, &cfg, &err) == SNUG_OK);
            int bad = 0;
            for (int step = 0; step < MAX_SEQ; step++) {
                snug_token *s = r.seq[r.n];
                int32_t n = make_seq(&r, s, alphabet);
                r.len[r.n] = n;
                CHECK(snug_prefix_index_insert(&ix, s, n) == n);
                /* a few points on it */
                for (int k = 0; k < 3 && r.n_pt < 1024; k++) {
                    int32_t pos = 1 + (int32_t)rnd((uint32_t)n);
                    uint64_t h = 1000 + (uint64_t)r.n_pt;
                    int32_t id = snug_prefix_index_add_point(&ix, s, pos, h);
                    CHECK(id >= 0);
                    if (snug_prefix_index_point_handle(&ix, id) == h) {
                        r.pt_seq[r.n_pt] = r.n;
                        r.pt_pos[r.n_pt] = pos;
                        r.pt_handle[r.n_pt] = h;
                        r.pt_live[r.n_pt] = true;
                        r.n_pt++;
                    }
                }
                r.n++;
                /* queries */
                for (int qn = 0; qn < 20; qn++) {
                    snug_token q[MAX_LEN + 8];
                    int32_t qlen = make_seq(&r, q, alphabet);
                    int32_t max_pos = rnd(3) ? qlen : (int32_t)rnd((uint32_t)qlen + 1);
                    int32_t rn, rpos;
                    ref_lookup(&r, q, qlen, max_pos, &rn, &rpos);
                    struct snug_prefix_match m;
                    uint64_t a0 = snug_alloc_count();
                    snug_prefix_index_lookup(&ix, q, qlen, max_pos, &m);
                    if (snug_alloc_count() != a0) bad++;
                    if (m.n_common != rn || m.pos != rpos) {
                        if (bad++ < 5)
                            fprintf(stderr, "B=%d: n_common %d vs %d, pos %d vs %d\n", B,
                                    m.n_common, rn, m.pos, rpos);
                    }
                    if (m.point >= 0) {
                        /* the handle names a point at that position on a matching sequence */
                        uint64_t h = m.handle;
                        int k = (int)(h - 1000);
                        if (k < 0 || k >= r.n_pt || r.pt_pos[k] != m.pos ||
                            lcp(r.seq[r.pt_seq[k]], q, m.pos) != m.pos)
                            bad++;
                    }
                }
            }
            /* remove half the points; the reference follows */
            for (int k = 0; k < r.n_pt; k += 2) {
                struct snug_prefix_match m;
                snug_prefix_index_lookup(&ix, r.seq[r.pt_seq[k]], r.pt_pos[k], r.pt_pos[k], &m);
                CHECK(m.pos == r.pt_pos[k]);
                /* remove the point the lookup names (another point of the same prefix and
                 * position may live in a sibling block; the reference keeps it too) */
                snug_prefix_index_remove_point(&ix, m.point);
                int j = (int)(m.handle - 1000);
                if (j >= 0 && j < r.n_pt) r.pt_live[j] = false;
            }
            for (int qn = 0; qn < 200; qn++) {
                snug_token q[MAX_LEN + 8];
                int32_t qlen = make_seq(&r, q, alphabet);
                int32_t rn, rpos;
                ref_lookup(&r, q, qlen, qlen, &rn, &rpos);
                struct snug_prefix_match m;
                snug_prefix_index_lookup(&ix, q, qlen, qlen, &m);
                if (m.n_common != rn || m.pos != rpos) bad++;
            }
            CHECKF(bad == 0, "B=%d alphabet=%d: %d mismatches", B, alphabet, bad);
            CHECK(ix.n_evicted_nodes == 0);
            snug_prefix_index_free(&ix);
        }
    }
}

static void eviction(void) {
    struct snug_prefix_index ix;
    struct snug_err err = {0};
    struct snug_prefix_index_cfg cfg = {
        .block = 4, .max_tokens = 40, .max_points = 8, .on_point_evicted = on_evict};
    CHECK(snug_prefix_index_init(&ix, &cfg, &err) == SNUG_OK);
    CHECK(ix.n_nodes == 11); /* root + 10 blocks */
    snug_token a[24], b[24], c[24];
    for (int i = 0; i < 24; i++) {
        a[i] = i;
        b[i] = i < 8 ? i : 100 + i; /* shares 2 blocks with a */
        c[i] = 200 + i;             /* shares nothing */
    }
    CHECK(snug_prefix_index_insert(&ix, a, 24) == 24); /* 6 nodes */
    CHECK(snug_prefix_index_add_point(&ix, a, 20, 7) >= 0);
    CHECK(snug_prefix_index_insert(&ix, b, 24) == 24); /* 4 more: pool full */
    CHECK(ix.n_used_nodes == 11 && ix.n_tokens == 40);
    struct snug_prefix_match m;
    snug_prefix_index_lookup(&ix, b, 24, 24, &m); /* b is now more recent than a */
    CHECK(m.n_common == 24 && m.point < 0);
    evicted_calls = 0;
    CHECK(snug_prefix_index_insert(&ix, c, 8) == 8); /* evicts a's two last blocks */
    CHECK(evicted_calls == 1 && evicted_last == 7);
    snug_prefix_index_lookup(&ix, a, 24, 24, &m);
    CHECK(m.n_common == 16 && m.point < 0);
    snug_prefix_index_lookup(&ix, b, 24, 24, &m);
    CHECK(m.n_common == 24);
    snug_prefix_index_lookup(&ix, c, 8, 8, &m);
    CHECK(m.n_common == 8);
    CHECK(ix.n_used_nodes <= ix.n_nodes);
    /* one path longer than the pool: indexed as far as it fits, never evicting itself */
    snug_token d[100];
    for (int i = 0; i < 100; i++) d[i] = 500 + i;
    int32_t got = snug_prefix_index_insert(&ix, d, 100);
    CHECK(got == 40);
    snug_prefix_index_lookup(&ix, d, 100, 100, &m);
    CHECK(m.n_common == 40);
    CHECK(snug_prefix_index_add_point(&ix, d, 60, 9) == -1);
    CHECK(snug_prefix_index_add_point(&ix, d, 0, 9) == -1);
    snug_prefix_index_free(&ix);

    cfg.max_points = 0;
    CHECK(snug_prefix_index_init(&ix, &cfg, &err) == SNUG_ERR_INVALID);
    CHECK(strstr(err.msg, "max points") != NULL);
}

int main(void) {
    randomized_against_reference();
    eviction();
    return TEST_DONE();
}

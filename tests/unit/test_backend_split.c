/* test_backend_split.c — the work division of the split tensor-core product
 * (src/backend/cuda/cuda_split.h, the functions k_mmv_split runs), replayed on the host the way
 * the kernel's warps use it: every warp walks its units tile by tile, stores a whole tile, or
 * writes its partial slot and counts on the tile's counter, the last one adding the slots in warp
 * order. Warps run interleaved in a random order (one segment at a time), as on a GPU where any
 * of a tile's warps may finish last. Checks, over shapes from one unit to the 27B's and warp
 * counts from 1 to the units: every unit is taken by exactly one warp, shares differ by at most
 * one unit, warp_of agrees with a search, no two writers share a slot or a live counter, every
 * tile is stored exactly once with its units summed in a fixed order (so the same bits whatever
 * warp finishes last: each case runs twice with different schedules and compares), and the
 * counters are all zero afterwards. Needs neither a GPU nor the toolkit; exit status 1 on any
 * failure. Read next: src/backend/cuda/cuda_split.h, src/backend/cuda/cuda_matvec.cu. */
#include "backend/cuda/cuda_split.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            if (failures++ < 20) {                                                                 \
                printf("FAIL %s:%d: ", __FILE__, __LINE__);                                        \
                printf(__VA_ARGS__);                                                               \
                printf("\n");                                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* One warp's place in its walk. */
struct warp {
    int64_t u, u1;
};

/* Runs the product of `tiles` × `nsb` units over W warps in the order `seed` draws: unit values
 * v, tile results into out (stored[t] counts the stores). */
static void run(int64_t tiles, int64_t nsb, int64_t W, const float *v, float *out, int *stored,
                float *part, int *slot_used, int32_t *cnt, struct warp *wp, uint64_t seed) {
    int64_t U = tiles * nsb;
    rng = seed;
    for (int64_t g = 0; g < W; g++) {
        wp[g].u = snug_split_u0(g, U, W);
        wp[g].u1 = snug_split_u0(g + 1, U, W);
    }
    memset(stored, 0, (size_t)tiles * sizeof *stored);
    memset(slot_used, 0, (size_t)(2 * W) * sizeof *slot_used);
    int64_t live = W;
    for (int64_t g = 0; g < W; g++)
        if (wp[g].u >= wp[g].u1) live--;
    while (live > 0) {
        int64_t g = (int64_t)(next() % (uint64_t)W); /* a random warp takes its next segment */
        while (wp[g].u >= wp[g].u1) g = (g + 1) % W;
        int64_t t = wp[g].u / nsb, x0 = t * nsb;
        int64_t sb0 = wp[g].u - x0, sb1 = (wp[g].u1 < x0 + nsb ? wp[g].u1 : x0 + nsb) - x0;
        wp[g].u = x0 + sb1;
        if (wp[g].u >= wp[g].u1) live--;
        float acc = 0.0f;
        for (int64_t sb = sb0; sb < sb1; sb++) acc += v[x0 + sb];
        if (sb0 == 0 && sb1 == nsb) {
            out[t] = acc;
            stored[t]++;
            continue;
        }
        int64_t gf = snug_split_warp_of(x0, U, W), gl = snug_split_warp_of(x0 + nsb - 1, U, W);
        CHECK(gf < g || g < gl, "tile %lld split but warp %lld alone (gf %lld gl %lld)",
              (long long)t, (long long)g, (long long)gf, (long long)gl);
        CHECK(gf <= g && g <= gl, "warp %lld outside %lld..%lld", (long long)g, (long long)gf,
              (long long)gl);
        int64_t s = snug_split_slot(g, x0, U, W);
        CHECK(s >= 0 && s < 2 * W && s < 2 * SNUG_CUDA_SPLIT_WARPS, "slot %lld", (long long)s);
        if (s < 0 || s >= 2 * W) return;
        CHECK(!slot_used[s], "slot %lld written twice", (long long)s);
        slot_used[s] = 1;
        part[s] = acc;
        CHECK(gf >= 0 && gf < W, "counter %lld", (long long)gf);
        int32_t old = cnt[gf]++;
        if (old != (int32_t)(gl - gf)) continue;
        float sum = 0.0f;
        for (int64_t h = gf; h <= gl; h++) {
            int64_t sh = snug_split_slot(h, x0, U, W);
            CHECK(slot_used[sh], "tile %lld: slot %lld of warp %lld not written", (long long)t,
                  (long long)sh, (long long)h);
            sum += part[sh];
        }
        out[t] = sum;
        stored[t]++;
        cnt[gf] = 0;
    }
}

static void check_shape(int64_t tiles, int64_t nsb, int64_t W) {
    int64_t U = tiles * nsb;
    if (W > U) W = U;
    float *v = malloc((size_t)U * sizeof *v), *out1 = malloc((size_t)tiles * sizeof(float));
    float *out2 = malloc((size_t)tiles * sizeof(float)), *part = malloc((size_t)(2 * W) * 4);
    int *stored = malloc((size_t)tiles * sizeof(int)), *slot_used = malloc((size_t)(2 * W) * 4);
    int32_t *cnt = calloc((size_t)W, sizeof *cnt);
    struct warp *wp = malloc((size_t)W * sizeof *wp);
    for (int64_t i = 0; i < U; i++) v[i] = (float)((int64_t)(next() % 2001) - 1000) * 1e-3f;
    /* shares and warp_of */
    int64_t lo = U / W, prev = 0, bad = 0;
    for (int64_t g = 0; g < W; g++) {
        int64_t a = snug_split_u0(g, U, W), b = snug_split_u0(g + 1, U, W);
        if (a != prev || b - a < lo || b - a > lo + 1) bad++;
        prev = b;
    }
    CHECK(!bad && prev == U, "U %lld W %lld: shares not contiguous or unequal", (long long)U,
          (long long)W);
    int64_t step = U > 5000 ? U / 997 : 1;
    for (int64_t x = 0; x < U; x += step) {
        int64_t g = snug_split_warp_of(x, U, W);
        bool ok = g >= 0 && g < W && snug_split_u0(g, U, W) <= x && x < snug_split_u0(g + 1, U, W);
        CHECK(ok, "U %lld W %lld: warp_of(%lld) = %lld", (long long)U, (long long)W, (long long)x,
              (long long)g);
        if (!ok) break;
    }
    uint64_t seed = next();
    for (int pass = 0; pass < 2; pass++) {
        float *out = pass ? out2 : out1;
        run(tiles, nsb, W, v, out, stored, part, slot_used, cnt, wp, seed + 7919u * (uint64_t)pass);
        int64_t once = 0, zero = 0;
        for (int64_t t = 0; t < tiles; t++) once += stored[t] == 1;
        for (int64_t g = 0; g < W; g++) zero += cnt[g] == 0;
        CHECK(once == tiles, "tiles %lld nsb %lld W %lld: %lld of %lld tiles stored once",
              (long long)tiles, (long long)nsb, (long long)W, (long long)once, (long long)tiles);
        CHECK(zero == W, "tiles %lld nsb %lld W %lld: counters left non-zero", (long long)tiles,
              (long long)nsb, (long long)W);
    }
    /* the same bits under another schedule, and close to the plain sum */
    int64_t diff = 0, far = 0;
    for (int64_t t = 0; t < tiles; t++) {
        diff += memcmp(&out1[t], &out2[t], sizeof(float)) != 0;
        double ref = 0;
        for (int64_t i = 0; i < nsb; i++) ref += v[t * nsb + i];
        far += (out1[t] - ref) * (out1[t] - ref) > 1e-6 * (1.0 + (double)nsb);
    }
    CHECK(!diff, "tiles %lld nsb %lld W %lld: %lld tiles differ between schedules",
          (long long)tiles, (long long)nsb, (long long)W, (long long)diff);
    CHECK(!far, "tiles %lld nsb %lld W %lld: %lld tiles off their sum", (long long)tiles,
          (long long)nsb, (long long)W, (long long)far);
    free(v), free(out1), free(out2), free(part), free(stored), free(slot_used), free(cnt), free(wp);
}

int main(void) {
    /* small shapes against every warp count */
    for (int64_t tiles = 1; tiles <= 9; tiles++)
        for (int64_t nsb = 1; nsb <= 9; nsb++)
            for (int64_t W = 1; W <= tiles * nsb; W++) check_shape(tiles, nsb, W);
    /* the 27B's products (16-row tiles × 256-element super-blocks) on an H100's 2,112 resident
     * warps, the cap, and odd counts: FFN up / down, attention q+gate / out, the output head */
    static const int64_t shapes[][2] = {{1088, 20}, {320, 68}, {768, 20}, {320, 24}, {15520, 20}};
    static const int64_t warps[] = {2112, SNUG_CUDA_SPLIT_WARPS, 1, 7, 999, 1089};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t w = 0; w < sizeof warps / sizeof warps[0]; w++)
            check_shape(shapes[s][0], shapes[s][1], warps[w]);
    printf("split work division: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

/* test_plan_cache.c — `--cache-ram auto`'s rule (src/plan/plan_cache.c), no file and no device
 * needed (the 27B preset shape with recipe weights):
 *   - on cuda the tier is a quarter of the host memory available less the plan's host items
 *     (snug_plan_host_bytes: the "host (not in the gpu budget)" figure snug_plan_format
 *     prints), in whole MiB, at most 16 GiB, none below 64 MiB; the boot line's reason shows
 *     the subtraction with its numbers;
 *   - on the cpu the host items are already in the budget: the rule is a quarter of the budget
 *     less the weights, host_items is not subtracted again, and the plan an automatic context
 *     gets beside the tier (its reserve) stays within the budget, the tier's item included;
 *   - a given --cache-ram (or 0) is left as it is.
 */
#include "model/presets.h"
#include "plan/plan_auto.h"
#include "plan/plan_cache.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

static const uint64_t GIB = (uint64_t)1 << 30, MIB = (uint64_t)1 << 20;

/* The rule on cuda for available bytes and host_items bytes (the expected value, by hand). */
static uint64_t expect_cuda(uint64_t available, uint64_t host_items) {
    uint64_t room = available > host_items ? available - host_items : 0;
    uint64_t q = room / 4 < 16 * GIB ? room / 4 : 16 * GIB;
    q = q / MIB * MIB;
    return q < 64 * MIB ? 0 : q;
}

static uint64_t tier_cuda(uint64_t available, uint64_t host_items, char *why, size_t n) {
    struct snug_plan_cache_flags f = {.ram_bytes = SNUG_CACHE_RAM_AUTO};
    snug_plan_cache_auto_at(&f, SNUG_BACKEND_CUDA, 0, 0, host_items, available, why, n);
    return f.ram_bytes;
}

static void test_rule_cuda(void) {
    char why[256];
    /* 8 GiB available, 1000 MiB of host items: (8192 - 1000) / 4 = 1798 MiB, not 2048 */
    uint64_t t = tier_cuda(8 * GIB, 1000 * MIB, why, sizeof why);
    CHECKF(t == 1798 * MIB && t == expect_cuda(8 * GIB, 1000 * MIB), "%llu", (unsigned long long)t);
    CHECKF(strstr(why, "(8.00 GiB - 1000.0 MiB = 7.02 GiB)") && strstr(why, "a quarter of") &&
               strstr(why, "--cache-ram 0 turns it off"),
           "%s", why);
    /* rounded down to whole MiB: 3 MiB + 3 bytes over the quarter do not make a MiB */
    t = tier_cuda(4 * GIB + 3 * MIB + 7, 4, why, sizeof why);
    CHECKF(t == 1024 * MIB && t == expect_cuda(4 * GIB + 3 * MIB + 7, 4), "%llu",
           (unsigned long long)t);
    /* the cap: 100 GiB less 3 GiB is still over 4 x 16 GiB */
    t = tier_cuda(100 * GIB, 3 * GIB, why, sizeof why);
    CHECKF(t == 16 * GIB, "%llu", (unsigned long long)t);
    /* ... and just under it: (65 GiB - 2 GiB) / 4 = 15.75 GiB */
    t = tier_cuda(65 * GIB, 2 * GIB, why, sizeof why);
    CHECKF(t == 63 * GIB / 4, "%llu", (unsigned long long)t);
    /* below 64 MiB: no cache, though the available memory alone would give one */
    t = tier_cuda(300 * MIB, 100 * MIB, why, sizeof why);
    CHECKF(t == 0 && expect_cuda(300 * MIB, 0) == 75 * MIB, "%llu", (unsigned long long)t);
    CHECKF(strstr(why, "auto: off") && strstr(why, "(300.0 MiB - 100.0 MiB = 200.0 MiB)") &&
               strstr(why, "under 64 MiB"),
           "%s", why);
    t = tier_cuda(256 * MIB, 0, why, sizeof why); /* exactly 64 MiB: on */
    CHECKF(t == 64 * MIB, "%llu", (unsigned long long)t);
    t = tier_cuda(256 * MIB, 1, why, sizeof why); /* one byte less: off */
    CHECKF(t == 0, "%llu", (unsigned long long)t);
    /* host items at or over what is available: nothing left, no cache */
    CHECK(tier_cuda(2 * GIB, 2 * GIB, why, sizeof why) == 0);
    CHECK(tier_cuda(2 * GIB, 3 * GIB, why, sizeof why) == 0);
    CHECK(tier_cuda(0, 0, why, sizeof why) == 0); /* unknown */
}

static void test_given(void) {
    char why[256];
    struct snug_plan_cache_flags f = {.ram_bytes = 256 * MIB};
    snug_plan_cache_auto_at(&f, SNUG_BACKEND_CUDA, 0, 0, GIB, 8 * GIB, why, sizeof why);
    CHECK(f.ram_bytes == 256 * MIB && !strcmp(why, "--cache-ram as given"));
    f.ram_bytes = 0;
    snug_plan_cache_auto(&f, SNUG_BACKEND_CUDA, 0, 0, GIB, why, sizeof why);
    CHECK(f.ram_bytes == 0 && !strcmp(why, "--cache-ram 0: off"));
    f.ram_bytes = 256 * MIB;
    snug_plan_cache_auto(&f, SNUG_BACKEND_CPU, 8 * GIB, GIB, 0, why, sizeof why);
    CHECK(f.ram_bytes == 256 * MIB);
}

/* The plan's host figure: what snug_plan_format prints as "host (not in the gpu budget)". */
static void test_plan_host(void) {
    struct snug_hparams hp;
    struct snug_plan_weights w;
    struct snug_err e = {0};
    CHECK(snug_preset_find("qwen3.6-27b", &hp, &e) == SNUG_OK);
    CHECK(snug_plan_weights_from_recipe(&hp, "q4_k_m", &w, &e) == SNUG_OK);
    struct snug_plan_limits l = snug_plan_limits_default();
    l.backend = SNUG_BACKEND_CUDA;
    l.n_draft = 3;
    l.n_threads = 1;
    l.kv_type = SNUG_KV_Q8_0;
    l.n_ctx = 65536;
    l.n_slots = 4;
    l.n_chunk = 2048;
    static struct snug_plan p;
    CHECK(snug_plan_make(&hp, &w, &l, &p, &e) == SNUG_OK);
    uint64_t host = snug_plan_host_bytes(&p), sum = 0;
    for (int i = 0; i < p.n_items; i++)
        if (p.items[i].device == SNUG_DEVICE_HOST) sum += p.items[i].bytes;
    CHECKF(host == sum && host == p.total - p.device_total && host > 16 * MIB,
           "host %llu, items %llu", (unsigned long long)host, (unsigned long long)sum);
    static char text[8192];
    snug_plan_format(&p, 0, text, sizeof text);
    char line[128];
    snprintf(line, sizeof line, "  %-30s %-9s %15llu ", "host (not in the gpu budget)", "",
             (unsigned long long)host);
    CHECKF(strstr(text, line) != NULL, "'%s' in\n%s", line, text);
    /* the tier on 8 GiB available: a quarter of what these items leave, less than 2 GiB */
    char why[256];
    uint64_t t = tier_cuda(8 * GIB, host, why, sizeof why);
    CHECKF(t == (8 * GIB - host) / 4 / MIB * MIB && t < 2 * GIB, "%llu", (unsigned long long)t);
    /* the tier's own item is host memory outside the gpu budget, added after the rule */
    struct snug_plan_cache_flags f = {.ram_bytes = t};
    uint64_t disk, gpu = p.device_total;
    CHECK(snug_plan_add_cache(&hp, &p, &f, &disk, &e) == SNUG_OK);
    CHECK(p.device_total == gpu && snug_plan_host_bytes(&p) > host + t / 2);

    /* on the cpu every item is in the budget: no host figure, and the rule is the budget's */
    l.backend = SNUG_BACKEND_CPU;
    CHECK(snug_plan_make(&hp, &w, &l, &p, &e) == SNUG_OK);
    CHECK(snug_plan_host_bytes(&p) == 0);
    struct snug_plan_cache_flags c = {.ram_bytes = SNUG_CACHE_RAM_AUTO};
    snug_plan_cache_auto_at(&c, SNUG_BACKEND_CPU, 24 * GIB, w.total, 5 * GIB, 0, why, sizeof why);
    CHECKF(c.ram_bytes == (24 * GIB - w.total) / 4 / MIB * MIB, "%llu",
           (unsigned long long)c.ram_bytes);
    CHECKF(strstr(why, "--budget leaves beside the weights") != NULL, "%s", why);
    struct snug_plan_cache_flags c2 = {.ram_bytes = SNUG_CACHE_RAM_AUTO};
    snug_plan_cache_auto(&c2, SNUG_BACKEND_CPU, 24 * GIB, w.total, 0, why, sizeof why);
    CHECK(c2.ram_bytes == c.ram_bytes);
    /* ... and an automatic context sized beside the tier keeps the tier and every host item
     * (logits, sampler, step tables, token history) within the budget */
    struct snug_plan_auto_req req = {.lim = l, .budget = 24 * GIB};
    req.lim.n_ctx = 0;
    CHECK(snug_plan_cache_reserve(&hp, &w, &req.lim, &c, &req.reserve, &e) == SNUG_OK);
    static struct snug_plan_auto a;
    CHECKF(snug_plan_auto(&hp, &w, &req, &a, &e) == SNUG_OK, "%s", e.msg);
    CHECK(snug_plan_add_cache(&hp, &a.plan, &c, &disk, &e) == SNUG_OK);
    CHECKF(a.plan.device_total == a.plan.total && a.plan.total <= 24 * GIB, "%llu",
           (unsigned long long)a.plan.total);
}

int main(void) {
    test_rule_cuda();
    test_given();
    test_plan_host();
    return TEST_DONE();
}

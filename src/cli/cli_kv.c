/* cli_kv.c — the KV cache format flags shared by run, logits, perplexity, bench-local and plan:
 * `--kv TYPE` sets K and V, `--kv-k TYPE` / `--kv-v TYPE` each (TYPE: f16 f32 bf16 q8_0 fp8
 * tq4 tq3, src/kv/kvfmt.h; `--kv auto` where the command sizes by itself). The later flag wins
 * for its half. Read next: docs/kv-formats.md.
 */
#include "cli.h"

#include "kv/kvfmt.h"
#include "plan/plan_auto.h"

#include <stdio.h>
#include <string.h>

int32_t cli_kv_code(const struct cli_kv *kv) {
    if (kv->k == SNUG_PLAN_KV_AUTO || kv->v == SNUG_PLAN_KV_AUTO) return SNUG_PLAN_KV_AUTO;
    return snug_kvfmt_code(kv->k, kv->v);
}

void cli_kv_params(const struct cli_kv *kv, struct snug_ctx_params *cp) {
    cp->kv_type = kv->k == kv->v ? kv->k : SNUG_KV_F16;
    cp->kv_type_k = kv->k == kv->v ? SNUG_KV_F16 : kv->k;
    cp->kv_type_v = kv->k == kv->v ? SNUG_KV_F16 : kv->v;
}

bool cli_kv_opt(const struct cli_args *p, int id, const struct cli_val *v, struct cli_kv *kv) {
    if (id != CLI_O_KV && id != CLI_O_KV_K && id != CLI_O_KV_V) return true;
    int which = id - CLI_O_KV; /* 0 both, 1 keys, 2 values */
    /* auto chooses K and V together; a name that is no format is an error (snug_kvfmt_parse's
     * -1 is also SNUG_PLAN_KV_AUTO's value, so it is never taken for auto) */
    bool is_auto = kv->allow_auto && which == 0 && !strcmp(v->s, "auto");
    int f = is_auto ? SNUG_PLAN_KV_AUTO : snug_kvfmt_parse(v->s);
    if (!is_auto && f < 0) {
        fprintf(stderr, "snug %s: %s '%s': expected one of", p->cmd->name, p->flag, v->s);
        for (int k = 0; k < SNUG_KVFMT_N; k++) fprintf(stderr, " %s", snug_kvfmt_name(k));
        fprintf(stderr, "%s\n", kv->allow_auto && which == 0 ? " auto" : "");
        return false;
    }
    if (which != 2) kv->k = f;
    if (which != 1) kv->v = f;
    return true;
}

/* test_scheduler.c - the streaming worker's policy (include/scheduler.h)
 * with a fake engine: sessions whose passes become due a step after their
 * last one was taken, and batches whose cost is scripted (a per-batch and
 * a per-pass cost, as the encoder and the batched decoder steps). Checks
 * the batch choice (oldest first, one variant, bounded, ties rotate),
 * fairness and no starvation under overload (against the old
 * newest-first rule, which starves), and the overload policy: the step
 * grows first, admission closes only at the largest step, reopens and
 * the step shrinks back once the load goes; and finals first: a final
 * pass waits at most for the batch in progress and earlier finals, never
 * shares a batch with partial passes, and does not starve them. */
#include "check.h"
#include "scheduler.h"

#include <stdio.h>
#include <string.h>

/* ---- the batch choice -------------------------------------------------------- */

static void test_pick(void) {
    int A = 0, B = 0; /* two variants: their addresses */
    int out[16];
    CHECK_EQ_INT(sotto_sched_pick(NULL, 0, 8, NULL, out), 0);

    /* oldest first, its variant only, sorted by age */
    sotto_sched_cand c[6] = {{&A, 5.0, 0}, {&B, 1.0, 0}, {&A, 3.0, 0}, {&B, 4.0, 0}, {&A, 0.5, 0}, {&B, 2.0, 0}};
    int n = sotto_sched_pick(c, 6, 8, NULL, out);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(out[0], 4);
    CHECK_EQ_INT(out[1], 2);
    CHECK_EQ_INT(out[2], 0);

    /* bounded by max_batch: the oldest ones of the variant stay */
    n = sotto_sched_pick(c, 6, 2, NULL, out);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(out[0], 4);
    CHECK_EQ_INT(out[1], 2);
    n = sotto_sched_pick(c, 6, 1, NULL, out);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(out[0], 4);

    /* B's pass is the oldest once A's are gone */
    n = sotto_sched_pick(c, 4, 8, NULL, out);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(out[0], 1);
    CHECK_EQ_INT(out[1], 3);

    /* a tie goes to the other variant than the last batch's */
    sotto_sched_cand t[4] = {{&A, 1.0, 0}, {&A, 1.0, 0}, {&B, 1.0, 0}, {&B, 2.0, 0}};
    n = sotto_sched_pick(t, 4, 8, &A, out);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(out[0], 2);
    n = sotto_sched_pick(t, 4, 8, &B, out);
    CHECK_EQ_INT(n, 2);
    CHECK(t[out[0]].variant == &A && t[out[1]].variant == &A);

    /* a final goes before older partial passes, in a batch of finals only, of the oldest
       final's variant; without finals the partial passes go as before */
    sotto_sched_cand f[6] = {{&A, 0.5, 0}, {&B, 3.0, 1}, {&A, 1.0, 0}, {&A, 4.0, 1},
                             {&B, 2.0, 1}, {&B, 0.2, 0}};
    n = sotto_sched_pick(f, 6, 8, NULL, out);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(out[0], 4);
    CHECK_EQ_INT(out[1], 1);
    n = sotto_sched_pick(f, 4, 8, NULL, out); /* B's final at 3.0 before A's at 4.0 */
    CHECK(n == 1 && out[0] == 1);
    sotto_sched_cand g[3] = {{&A, 0.5, 0}, {&A, 1.0, 0}, {&A, 4.0, 1}};
    n = sotto_sched_pick(g, 3, 8, NULL, out);
    CHECK(n == 1 && out[0] == 2);
    n = sotto_sched_pick(g, 2, 8, NULL, out);
    CHECK(n == 2 && out[0] == 0 && out[1] == 1);

    /* levels of finals: an ended utterance's (2) before older speculative ones (1),
       which still go before partial passes and share no batch with level 2 */
    sotto_sched_cand lv[5] = {{&A, 0.5, 1}, {&A, 3.0, 2}, {&A, 0.1, 0}, {&A, 2.0, 2}, {&A, 0.7, 1}};
    n = sotto_sched_pick(lv, 5, 8, NULL, out);
    CHECK(n == 2 && out[0] == 3 && out[1] == 1);
    n = sotto_sched_pick(lv, 3, 8, NULL, out); /* without index 3: the other level-2 final alone */
    CHECK(n == 1 && out[0] == 1);
    sotto_sched_cand lv1[3] = {{&A, 0.5, 1}, {&A, 0.1, 0}, {&A, 0.7, 1}};
    n = sotto_sched_pick(lv1, 3, 8, NULL, out);
    CHECK(n == 2 && out[0] == 0 && out[1] == 2);

    /* a long list in reverse age order comes out sorted */
    sotto_sched_cand r[40];
    for (int i = 0; i < 40; i++) r[i] = (sotto_sched_cand){&A, 100.0 - i, 0};
    n = sotto_sched_pick(r, 40, 16, NULL, out);
    CHECK_EQ_INT(n, 16);
    int sorted = 1;
    for (int i = 0; i < n; i++) sorted &= out[i] == 39 - i;
    CHECK(sorted);
}

/* ---- a fake engine ------------------------------------------------------------ */

#define MAX_S 32

typedef struct sim_params {
    int sessions;
    int variants;        /* session i uses variant i % variants */
    double per_batch_s;  /* scripted cost of a batch */
    double per_pass_s;   /* ... plus this per pass in it */
    int max_batch;
    int base_step_ms;
    double seconds;      /* simulated time */
    int old_policy;      /* the old rule: the first max_batch due sessions of the newest-first
                            list, all on the first one's variant; no overload policy */
    int end_at;          /* sessions from keep on end at this second (0: never) */
    int keep;
    int merged;          /* as the server: a pass in flight holds the session's next one, which
                            becomes due when its batch ends (its wait counts from then) */
    int lag_signal;      /* with merged: real-time clients' merged lag feeds the policy too */
    int start_together;  /* every session's first pass is due at 0 (no stagger) */
    double utt_s;        /* a session's utterance ends every utt_s (staggered; 0: never):
                            a final pass is due from then until taken */
    int finals_unmarked; /* the final passes are handed to the scheduler as partial ones
                            (the rule before finals went first) */
    const sotto_load_params *lp;
} sim_params;

typedef struct sim_result {
    int passes[MAX_S];
    double max_wait[MAX_S];     /* longest a session's pass waited */
    double max_wait_tail;       /* ... over the last quarter of the run */
    double max_scale;
    double scale_when_closed;   /* the scale when admission first closed (0: never) */
    int closed_ever, open_at_end;
    double final_scale;
    int batches, variant_switches, mixed_batches, oversized_batches;
    int finals;                 /* final passes run */
    double max_final_wait;      /* longest a final pass waited from its utterance's end */
    double sum_final_wait;
    int kind_mixed_batches;     /* batches holding a final and a partial pass */
} sim_result;

static void simulate(const sim_params *p, sim_result *r) {
    memset(r, 0, sizeof *r);
    int variant_tag[MAX_S]; /* the variant of session i is &variant_tag[variant_tag[i]]: one address per variant */
    double due[MAX_S], last_take[MAX_S], utt_end[MAX_S], final_since[MAX_S];
    int alive[MAX_S], final_due[MAX_S];
    for (int i = 0; i < p->sessions; i++) {
        variant_tag[i] = i % p->variants;
        due[i] = p->start_together ? 0.0 : 0.05 * i; /* staggered starts */
        last_take[i] = due[i] - p->base_step_ms / 1000.0;
        alive[i] = 1;
        utt_end[i] = p->utt_s > 0 ? p->utt_s * (1.0 + (double)i / p->sessions) : 1e30;
        final_due[i] = 0;
        final_since[i] = 0;
    }
    sotto_load l;
    sotto_load_init(&l, p->lp);
    const void *last = NULL;
    double now = 0;
    r->max_scale = 1;
    while (now < p->seconds) {
        if (p->end_at && now >= p->end_at)
            for (int i = p->keep; i < p->sessions; i++) alive[i] = 0;
        sotto_sched_cand c[MAX_S];
        int idx[MAX_S], n = 0;
        double next = 1e30;
        for (int i = 0; i < p->sessions; i++) {
            if (!alive[i]) continue;
            if (utt_end[i] <= now) { /* an utterance ended: its final is due at once */
                if (!final_due[i]) final_since[i] = utt_end[i];
                final_due[i] = 1;
                utt_end[i] += p->utt_s;
            }
            if (utt_end[i] < next) next = utt_end[i];
            if (final_due[i] || due[i] <= now) {
                /* as the server: a pass due since earlier keeps its time when it turns final */
                double since = final_due[i] && final_since[i] < due[i] ? final_since[i] : due[i];
                c[n] = (sotto_sched_cand){&variant_tag[variant_tag[i]], since,
                                          final_due[i] && !p->finals_unmarked};
                idx[n++] = i;
            } else if (due[i] < next) {
                next = due[i];
            }
        }
        if (!n) { /* idle until the next pass is due */
            now = next < p->seconds ? next : p->seconds;
            if (!p->old_policy) sotto_load_on_idle(&l, now);
            continue;
        }
        int out[MAX_S], k;
        if (p->old_policy) {
            /* newest first: the highest index is the newest session */
            k = 0;
            const void *v = NULL;
            for (int j = n - 1; j >= 0 && k < p->max_batch; j--) {
                if (v && c[j].variant != v) continue;
                v = c[j].variant;
                out[k++] = j;
            }
        } else {
            k = sotto_sched_pick(c, n, p->max_batch, last, out);
        }
        r->batches++;
        if (k > p->max_batch) r->oversized_batches++;
        const void *v = c[out[0]].variant;
        for (int j = 1; j < k; j++) r->mixed_batches += c[out[j]].variant != v;
        int n_final = 0;
        for (int j = 0; j < k; j++) n_final += final_due[idx[out[j]]];
        r->kind_mixed_batches += n_final > 0 && n_final < k;
        if (last && v != last) r->variant_switches++;
        last = v;
        double oldest = 0;
        int cur_step = p->old_policy ? p->base_step_ms : sotto_load_step_ms(&l, p->base_step_ms, 10000);
        for (int j = 0; j < k; j++) {
            double w = now - c[out[j]].due_since;
            /* clients at real-time pace: the audio since the last pass arrived at 1 s/s */
            if (p->lag_signal) {
                double lag = sotto_sched_merged_lag(now - last_take[idx[out[j]]], cur_step / 1000.0, 1.0);
                if (lag > w) w = lag;
            }
            if (w > oldest) oldest = w;
        }
        if (!p->old_policy) {
            int was_open = l.admit;
            sotto_load_on_batch(&l, oldest, now);
            if (was_open && !l.admit && !r->closed_ever) {
                r->closed_ever = 1;
                r->scale_when_closed = l.scale;
            }
            if (l.scale > r->max_scale) r->max_scale = l.scale;
        }
        int step_ms = p->old_policy ? p->base_step_ms : sotto_load_step_ms(&l, p->base_step_ms, 10000);
        for (int j = 0; j < k; j++) {
            int i = idx[out[j]];
            double w = now - due[i];
            r->passes[i]++;
            if (final_due[i]) { /* the final: its wait counts from the utterance's end */
                double fw = now - final_since[i];
                r->finals++;
                r->sum_final_wait += fw;
                if (fw > r->max_final_wait) r->max_final_wait = fw;
                final_due[i] = 0;
                w = 0; /* (as a partial pass it was not due before the end) */
            }
            if (w > r->max_wait[i]) r->max_wait[i] = w;
            if (now > 0.75 * p->seconds && w > r->max_wait_tail) r->max_wait_tail = w;
            /* the next pass: a step of new audio after this one's start */
            due[i] = now + step_ms / 1000.0;
            last_take[i] = now;
        }
        double cost = p->per_batch_s + p->per_pass_s * k;
        if (p->merged) /* not due before its batch ends, and seen as due only from then */
            for (int j = 0; j < k; j++)
                if (due[idx[out[j]]] < now + cost) due[idx[out[j]]] = now + cost;
        if (!p->old_policy) sotto_load_busy(&l, cost);
        now += cost;
    }
    r->open_at_end = l.admit;
    r->final_scale = l.scale;
}

static int min_passes(const sim_result *r, int from, int to) {
    int m = 1 << 30;
    for (int i = from; i < to; i++) m = r->passes[i] < m ? r->passes[i] : m;
    return m;
}

static int max_passes(const sim_result *r, int from, int to) {
    int m = 0;
    for (int i = from; i < to; i++) m = r->passes[i] > m ? r->passes[i] : m;
    return m;
}

static double worst_wait(const sim_result *r, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = r->max_wait[i] > m ? r->max_wait[i] : m;
    return m;
}

/* Light load: nothing changes, passes wait less than a step. */
static void test_light(void) {
    sim_params p = {.sessions = 4, .variants = 2, .per_batch_s = 0.05, .per_pass_s = 0.05,
                    .max_batch = 8, .base_step_ms = 1000, .seconds = 120};
    sim_result r;
    simulate(&p, &r);
    CHECK_NEAR(r.max_scale, 1.0, 1e-9);
    CHECK(!r.closed_ever);
    CHECK_MSG(worst_wait(&r, 4) < 0.5, "worst wait %.2f s", worst_wait(&r, 4));
    CHECK(min_passes(&r, 0, 4) >= 100);
    CHECK_EQ_INT(r.mixed_batches, 0);
}

/* Overload that a longer step absorbs: 16 sessions on two variants, a pass
 * costs 0.15 s (with a 0.1 s batch overhead), batches of 4: at a 1 s step
 * the demand is about 2.8 s of work per second. The old rule starves the
 * oldest sessions; the new one serves everyone about equally, and the step
 * grows until the waits are bounded, without closing admission. */
static void test_overload_absorbed(void) {
    sotto_load_params lp = sotto_load_default_params();
    sim_params p = {.sessions = 16, .variants = 2, .per_batch_s = 0.1, .per_pass_s = 0.15,
                    .max_batch = 4, .base_step_ms = 1000, .seconds = 300, .lp = &lp};
    sim_result old, r;
    p.old_policy = 1;
    simulate(&p, &old);
    p.old_policy = 0;
    simulate(&p, &r);
    printf("absorbed: passes per session %d..%d (old rule %d..%d), step scale up to %.2f, "
           "longest wait %.2f s (last quarter %.2f s), %d batches, %d variant switches\n",
           min_passes(&r, 0, 16), max_passes(&r, 0, 16), min_passes(&old, 0, 16),
           max_passes(&old, 0, 16), r.max_scale, worst_wait(&r, 16), r.max_wait_tail, r.batches,
           r.variant_switches);
    /* the scenario is an overload: the old rule leaves some session (nearly) unserved */
    CHECK_MSG(min_passes(&old, 0, 16) * 4 < max_passes(&old, 0, 16), "old rule: min %d, max %d",
              min_passes(&old, 0, 16), max_passes(&old, 0, 16));
    /* fairness: every session within 20% of the busiest */
    CHECK_MSG(min_passes(&r, 0, 16) * 10 >= max_passes(&r, 0, 16) * 8, "min %d, max %d",
              min_passes(&r, 0, 16), max_passes(&r, 0, 16));
    CHECK(min_passes(&r, 0, 16) > 20);
    /* latency gave: the step grew, admission stayed open */
    CHECK(r.max_scale > 1.0);
    CHECK(!r.closed_ever);
    /* and the waits are bounded once it settled */
    CHECK_MSG(r.max_wait_tail <= lp.high_wait_s * 2, "tail wait %.2f s", r.max_wait_tail);
    /* batches: one variant each, within the bound, and the variants take turns */
    CHECK_EQ_INT(r.mixed_batches, 0);
    CHECK_EQ_INT(r.oversized_batches, 0);
    CHECK_MSG(r.variant_switches * 3 >= r.batches, "%d switches in %d batches", r.variant_switches,
              r.batches);
}

/* Overload beyond what the largest step absorbs (24 sessions at 0.375 s a
 * pass: 9 s of work per 4 s step): the step reaches its maximum first,
 * then admission closes; when all but 6 sessions end, admission reopens
 * and the step shrinks back. */
static void test_overload_admission(void) {
    sotto_load_params lp = sotto_load_default_params();
    sim_params p = {.sessions = 24, .variants = 3, .per_batch_s = 0.1, .per_pass_s = 0.35,
                    .max_batch = 4, .base_step_ms = 1000, .seconds = 400, .end_at = 200, .keep = 6,
                    .lp = &lp};
    sim_result r;
    simulate(&p, &r);
    printf("admission: closed at scale %.2f, passes per ended session %d..%d, at the end: "
           "admission %s, scale %.2f\n",
           r.scale_when_closed, min_passes(&r, 6, 24), max_passes(&r, 6, 24),
           r.open_at_end ? "open" : "closed", r.final_scale);
    CHECK(r.closed_ever);
    CHECK_NEAR(r.scale_when_closed, lp.max_scale, 1e-9);
    CHECK_NEAR(r.max_scale, lp.max_scale, 1e-9);
    /* no starvation even now: the ended sessions were served like the others */
    CHECK_MSG(min_passes(&r, 6, 24) * 10 >= max_passes(&r, 6, 24) * 8, "min %d, max %d",
              min_passes(&r, 6, 24), max_passes(&r, 6, 24));
    CHECK(min_passes(&r, 6, 24) > 10);
    /* after the load went (6 sessions: 2.25 s of work per 4 s step) */
    CHECK(r.open_at_end);
    CHECK_MSG(r.final_scale < lp.max_scale, "final scale %.2f", r.final_scale);
}

/* Finals first: 16 sessions, each ending an utterance every 5 s, under
 * an overload the step absorbs (about 1.4 s of partial passes per 1 s
 * step). A final waits at most for the batch in progress and the finals
 * due before it, runs in a batch of finals only, and the partial passes
 * are still served to every session alike. Handed over as partial passes
 * (the rule before), the finals wait behind older partial passes. */
static void test_finals_first(void) {
    sotto_load_params lp = sotto_load_default_params();
    sim_params p = {.sessions = 16, .variants = 2, .per_batch_s = 0.05, .per_pass_s = 0.08,
                    .max_batch = 8, .base_step_ms = 1000, .seconds = 300, .utt_s = 5.0,
                    .lp = &lp};
    sim_result before, r;
    p.finals_unmarked = 1;
    simulate(&p, &before);
    p.finals_unmarked = 0;
    simulate(&p, &r);
    const double batch_s = p.per_batch_s + p.per_pass_s * p.max_batch; /* the longest batch */
    printf("finals first: %d finals, wait mean %.2f s, max %.2f s (as partials: mean %.2f s, "
           "max %.2f s); partial passes per session %d..%d (before %d..%d), step scale %.2f\n",
           r.finals, r.sum_final_wait / r.finals, r.max_final_wait,
           before.sum_final_wait / before.finals, before.max_final_wait, min_passes(&r, 0, 16),
           max_passes(&r, 0, 16), min_passes(&before, 0, 16), max_passes(&before, 0, 16),
           r.max_scale);
    /* every utterance's final ran (one per 5 s per session, less the last one in flight) */
    CHECK_MSG(r.finals >= 16 * ((int)(p.seconds / p.utt_s) - 2), "%d finals", r.finals);
    /* the scenario is an overload the step absorbs */
    CHECK(r.max_scale > 1.0 && !r.closed_ever);
    /* a final waits for the batch in progress and for finals that came before it: with the
       ends 5/16 s apart and a batch of finals at most batch_s, that is within two batches */
    CHECK_MSG(r.max_final_wait <= 2 * batch_s + 1e-9, "longest final wait %.2f s (bound %.2f s)",
              r.max_final_wait, 2 * batch_s);
    /* and it gains: behind older partial passes a final waits longer, at worst twice as long */
    CHECK_MSG(before.max_final_wait > 2 * r.max_final_wait &&
                  before.sum_final_wait / before.finals > r.sum_final_wait / r.finals,
              "final wait mean %.2f s, max %.2f s; as partials mean %.2f s, max %.2f s",
              r.sum_final_wait / r.finals, r.max_final_wait, before.sum_final_wait / before.finals,
              before.max_final_wait);
    CHECK_EQ_INT(r.kind_mixed_batches, 0);
    CHECK_EQ_INT(r.mixed_batches, 0);
    CHECK_EQ_INT(r.oversized_batches, 0);
    /* no partial starvation: every session within 20% of the busiest */
    CHECK_MSG(min_passes(&r, 0, 16) * 10 >= max_passes(&r, 0, 16) * 8, "min %d, max %d",
              min_passes(&r, 0, 16), max_passes(&r, 0, 16));
}

/* The controller alone: decisions per window, growth bounded, shrinking
 * back to exactly 1, and the step in its range. */
static void test_controller(void) {
    sotto_load l;
    sotto_load_init(&l, NULL);
    CHECK_NEAR(l.scale, 1.0, 0);
    CHECK(l.admit);
    double t = 0;
    /* waits within one window decide together: one change per window */
    CHECK_EQ_INT(sotto_load_on_batch(&l, 5.0, t), 0);
    CHECK_EQ_INT(sotto_load_on_batch(&l, 0.0, t + 1.0), 0);
    CHECK_EQ_INT(sotto_load_on_batch(&l, 0.0, t + 2.0), 1); /* the 5 s wait counts */
    CHECK_NEAR(l.scale, 1.5, 1e-9);
    t = 2.0;
    int closes_at = 0;
    for (int w = 1; w <= 10; w++) {
        t += 2.0;
        sotto_load_on_batch(&l, 10.0, t); /* behind at any scale (4 s at the largest) */
        if (!l.admit && !closes_at) closes_at = w;
        CHECK(l.scale <= l.p.max_scale);
        CHECK(l.admit || l.scale == l.p.max_scale); /* closed only at the largest step */
    }
    CHECK(closes_at > 0);
    CHECK_EQ_INT(sotto_load_step_ms(&l, 1000, 10000), 4000);
    CHECK_EQ_INT(sotto_load_step_ms(&l, 3000, 10000), 10000);
    /* thresholds times the scale (4): a 3 s wait neither grows, reopens nor shrinks */
    t += 2.0;
    sotto_load_on_batch(&l, 3.0, t);
    CHECK(!l.admit);
    CHECK_NEAR(l.scale, l.p.max_scale, 1e-9);
    /* reopens first (1.5 s <= 2 s), then shrinks back to 1 */
    t += 2.0;
    sotto_load_on_batch(&l, 1.5, t);
    CHECK(l.admit);
    CHECK_NEAR(l.scale, l.p.max_scale, 1e-9);
    /* a busy worker does not shrink the step even with short waits */
    t += 2.0;
    sotto_load_busy(&l, 1.8);
    sotto_load_on_batch(&l, 0.1, t);
    CHECK_NEAR(l.scale, l.p.max_scale, 1e-9);
    for (int w = 0; w < 10; w++) {
        t += 2.0;
        sotto_load_on_idle(&l, t);
    }
    CHECK_NEAR(l.scale, 1.0, 0);
    CHECK_EQ_INT(sotto_load_step_ms(&l, 1000, 10000), 1000);
    CHECK(l.grows >= 3 && l.shrinks >= 3 && l.closes == 1);
    /* an idle worker admits at once, mid-window */
    for (int w = 0; w < 8; w++) {
        t += 2.0;
        sotto_load_on_batch(&l, 10.0, t);
    }
    CHECK(!l.admit);
    CHECK_EQ_INT(sotto_load_on_idle(&l, t + 0.1), 1);
    CHECK(l.admit);
}

/* Merged steps: one variant, every session in each batch, batches longer
 * than the step. As in the server, a session's next pass is due only when
 * its batch ends, so no pass is seen to wait and the waits alone never
 * engage the policy. With the lag of real-time clients
 * (sotto_sched_merged_lag) it stretches the step until the lag is within
 * its bound, and refuses new sessions when even the longest step is not
 * enough. */
static void test_merged_steps(void) {
    sotto_load_params lp = sotto_load_default_params();
    sim_params p = {.sessions = 12, .variants = 1, .per_batch_s = 0.3, .per_pass_s = 0.15,
                    .max_batch = 16, .base_step_ms = 1000, .seconds = 120, .merged = 1,
                    .start_together = 1, .lp = &lp};
    sim_result blind, seen;
    simulate(&p, &blind);
    p.lag_signal = 1;
    simulate(&p, &seen);
    printf("merged steps, 12 sessions in 2.1 s batches: waits only: scale %.2f, %d passes each; "
           "with the lag: scale %.2f, %d..%d passes each, admission %s\n",
           blind.max_scale, min_passes(&blind, 0, 12), seen.final_scale, min_passes(&seen, 0, 12),
           max_passes(&seen, 0, 12), seen.open_at_end ? "open" : "closed");
    CHECK_MSG(blind.max_scale == 1.0 && !blind.closed_ever,
              "without the lag the policy should not see merged steps: %.2f", blind.max_scale);
    /* 2.1 s batches: a lag of 1.1 s at a 1 s step, 0.6 s at 1.5 s (within its bound) */
    CHECK_MSG(seen.final_scale >= 1.5 - 1e-9, "the step should stretch: %.2f", seen.final_scale);
    CHECK(seen.open_at_end && !seen.closed_ever);
    CHECK(seen.mixed_batches == 0 && seen.oversized_batches == 0);
    CHECK(max_passes(&seen, 0, 12) - min_passes(&seen, 0, 12) <= 2);

    /* 9.9 s batches: more than a 4 s step can hide (lag 5.9 s > 4 s): admission closes */
    p.per_pass_s = 0.8;
    p.lag_signal = 0;
    simulate(&p, &blind);
    p.lag_signal = 1;
    simulate(&p, &seen);
    printf("merged steps, 12 sessions in 9.9 s batches: waits only: scale %.2f, admission %s; "
           "with the lag: closed at scale %.2f\n", blind.max_scale,
           blind.closed_ever ? "closed" : "never closed", seen.scale_when_closed);
    CHECK(blind.max_scale == 1.0 && !blind.closed_ever);
    CHECK(seen.closed_ever && seen.scale_when_closed >= 4.0 - 1e-9);

    /* the pace estimate: real time, twice real time, a stall */
    sotto_pace pc;
    sotto_pace_init(&pc);
    CHECK(pc.pace < 0);
    unsigned long long n = 0;
    double t = 10.0;
    for (int i = 0; i <= 30; i++, t += 0.1, n += 1600) sotto_pace_update(&pc, n, t);
    CHECK_NEAR(pc.pace, 1.0, 0.06);
    for (int i = 0; i <= 50; i++, t += 0.1, n += 3200) sotto_pace_update(&pc, n, t);
    CHECK_NEAR(pc.pace, 2.0, 0.1);
    for (int i = 0; i <= 50; i++, t += 0.1) sotto_pace_update(&pc, n, t);
    CHECK(pc.pace < 0.05);
    /* the lag counts only for a known real-time pace */
    CHECK_NEAR(sotto_sched_merged_lag(3.0, 1.0, 1.0), 2.0, 1e-12);
    CHECK_NEAR(sotto_sched_merged_lag(0.5, 1.0, 1.0), 0.0, 1e-12);
    CHECK_NEAR(sotto_sched_merged_lag(3.0, 1.0, 2.0), 0.0, 1e-12);  /* a file sent fast */
    CHECK_NEAR(sotto_sched_merged_lag(3.0, 1.0, -1.0), 0.0, 1e-12); /* pace not known yet */
}

int main(void) {
    test_pick();
    test_controller();
    test_light();
    test_overload_absorbed();
    test_overload_admission();
    test_merged_steps();
    test_finals_first();
    return check_report();
}

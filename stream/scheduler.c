/* scheduler.c - see scheduler.h. */
#include "scheduler.h"

#include <stddef.h>

int sotto_sched_pick(const sotto_sched_cand *c, int n, int max_batch, const void *last_variant,
                     int *out) {
    if (n <= 0 || max_batch <= 0) return 0;
    /* finals first, the most urgent level of them: if any is due, only those are candidates */
    int kind = 0;
    for (int i = 0; i < n; i++)
        if (c[i].final > kind) kind = c[i].final;
    /* the oldest due pass of that kind; on a tie, one of another variant than the last batch's */
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].final != kind) continue;
        if (best < 0 || c[i].due_since < c[best].due_since ||
            (c[i].due_since == c[best].due_since && c[best].variant == last_variant &&
             c[i].variant != last_variant))
            best = i;
    }
    const void *v = c[best].variant;
    /* its kind's and variant's candidates, oldest first (insertion sort: n is a few dozen) */
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].variant != v || c[i].final != kind) continue;
        int j = k < max_batch ? k++ : max_batch;
        /* j: the slot to fill; shift younger ones right (the last falls off when full) */
        while (j > 0 && c[out[j - 1]].due_since > c[i].due_since) {
            if (j < max_batch) out[j] = out[j - 1];
            j--;
        }
        if (j < max_batch) out[j] = i;
    }
    return k;
}

sotto_load_params sotto_load_default_params(void) {
    sotto_load_params p = {.high_wait_s = 1.0, .reopen_wait_s = 0.5, .low_wait_s = 0.25,
                           .shrink_busy = 0.9, .hold_s = 2.0, .grow = 1.5, .max_scale = 4.0};
    return p;
}

void sotto_load_init(sotto_load *l, const sotto_load_params *p) {
    l->p = p ? *p : sotto_load_default_params();
    if (l->p.grow <= 1.0) l->p.grow = 1.5;
    if (l->p.max_scale < 1.0) l->p.max_scale = 1.0;
    l->scale = 1.0;
    l->admit = 1;
    l->window_start = -1;
    l->worst_wait = l->busy = l->last_wait = l->last_busy_share = 0;
    l->grows = l->shrinks = l->closes = 0;
}

void sotto_load_busy(sotto_load *l, double seconds) {
    if (seconds > 0) l->busy += seconds;
}

int sotto_load_on_batch(sotto_load *l, double wait_s, double now) {
    if (wait_s < 0) wait_s = 0;
    if (wait_s > l->worst_wait) l->worst_wait = wait_s;
    if (l->window_start < 0) l->window_start = now;
    const double span = now - l->window_start;
    if (span < l->p.hold_s) return 0;
    const double worst = l->worst_wait, k = l->scale;
    const double share = l->busy / span;
    const double scale = l->scale;
    const int admit = l->admit;
    if (worst > l->p.high_wait_s * k) {
        if (l->scale < l->p.max_scale) { /* latency gives first */
            l->scale *= l->p.grow;
            if (l->scale > l->p.max_scale) l->scale = l->p.max_scale;
            l->grows++;
        } else if (l->admit) { /* then admission */
            l->admit = 0;
            l->closes++;
        }
    } else {
        if (!l->admit && worst <= l->p.reopen_wait_s * k) l->admit = 1;
        if (l->admit && l->scale > 1.0 && worst <= l->p.low_wait_s * k &&
            share * l->p.grow < l->p.shrink_busy) {
            l->scale /= l->p.grow;
            if (l->scale < 1.0 + 1e-9) l->scale = 1.0;
            l->shrinks++;
        }
    }
    l->last_wait = worst;
    l->last_busy_share = share;
    l->window_start = now;
    l->worst_wait = 0;
    l->busy = 0;
    return l->scale != scale || l->admit != admit;
}

int sotto_load_on_idle(sotto_load *l, double now) {
    /* an idle worker is not behind: it admits at once (the step shrinks by the windows) */
    int reopened = !l->admit;
    l->admit = 1;
    return sotto_load_on_batch(l, 0.0, now) || reopened;
}

int sotto_load_step_ms(const sotto_load *l, int base_ms, int max_ms) {
    double s = base_ms * l->scale;
    if (s > max_ms) s = max_ms;
    if (s < base_ms) s = base_ms;
    return (int)(s + 0.5);
}

void sotto_pace_init(sotto_pace *p) {
    p->t0 = -1.0;
    p->samples0 = 0;
    p->pace = -1.0;
}

void sotto_pace_update(sotto_pace *p, unsigned long long samples_total, double now) {
    if (p->t0 < 0) {
        p->t0 = now;
        p->samples0 = samples_total;
        return;
    }
    double dt = now - p->t0;
    if (dt < SOTTO_PACE_WINDOW_S) return;
    p->pace = (double)(samples_total - p->samples0) / 16000.0 / dt;
    p->t0 = now;
    p->samples0 = samples_total;
}

double sotto_sched_merged_lag(double pending_s, double step_s, double pace) {
    if (pace < 0 || pace > SOTTO_PACE_REALTIME_MAX) return 0.0;
    return pending_s > step_s ? pending_s - step_s : 0.0;
}

/* scheduler.h - the streaming worker's policy, kept apart from the engine
 * and the server so that it can be tested with a fake engine
 * (tests/test_scheduler.c):
 *
 *   - which due passes run next: final passes (an utterance ended; its text
 *     settles with them) before partial ones, and within each kind the
 *     oldest due pass first, with the other due passes of its kind and
 *     weight variant, oldest first, up to the batch size (one batch is one
 *     variant: its decoder steps run together). A final never shares a
 *     batch with partial passes, whose encoder work would delay it. Since
 *     the oldest pass of a kind always goes next, no session and no
 *     variant starves; partial passes wait only while finals are due, and
 *     a session has at most one final due per ended utterance. A tie goes
 *     to a variant other than the last batch's, so that variants take
 *     turns;
 *   - the overload policy: when passes wait longer than the step, every
 *     session's step grows (partials come less often: latency) before
 *     anything else gives; when the step is at its largest and passes still
 *     wait, new sessions are not admitted (the server answers `overloaded`)
 *     until the waits shrink again.
 *
 * Pure: no threads, no clock of its own, no allocation. The caller passes
 * the times; one srv_load per worker, guarded by the caller.
 */
#ifndef SOTTO_SCHEDULER_H
#define SOTTO_SCHEDULER_H

/* A session with a pass due. */
typedef struct sotto_sched_cand {
    const void *variant; /* candidates with the same variant may share a batch */
    double due_since;    /* when its pass became due (the caller's clock, s) */
    int final;           /* 0: a partial pass; > 0: a final one (goes before every
                            partial pass), the higher the more urgent: only
                            candidates of the highest level present are picked */
} sotto_sched_cand;

/* Chooses the next batch from n candidates: writes their indices to out
 * (oldest due first; all finals or all partials) and returns how many (0
 * if n is 0). last_variant is the previous batch's variant (NULL for
 * none): it loses ties. */
int sotto_sched_pick(const sotto_sched_cand *c, int n, int max_batch, const void *last_variant,
                     int *out);

/* Waits are judged against the step: the thresholds are for a scale of 1
 * and grow with the scale (a pass that waits longer than its step has lost
 * the cadence; with a longer step, a longer wait is the same lag). */
typedef struct sotto_load_params {
    double high_wait_s;   /* behind: a pass waited longer than this (default 1.0) */
    double reopen_wait_s; /* admission reopens when none waited longer (default 0.5) */
    double low_wait_s;    /* the step may shrink when none waited longer (default 0.25) ... */
    double shrink_busy;   /* ... and the worker's busy share, times grow, stays below
                             this (the shorter step's projected load; default 0.9) */
    double hold_s;        /* decisions are made over windows this long (default 2.0) */
    double grow;          /* the step scale's factor per change (default 1.5) */
    double max_scale;     /* largest step scale (default 4.0) */
} sotto_load_params;

sotto_load_params sotto_load_default_params(void);

typedef struct sotto_load {
    sotto_load_params p;
    double scale;        /* every session's step is its own times this (1 .. max_scale) */
    int admit;           /* 1: new sessions are admitted */
    double window_start; /* the current decision window began (s; < 0: none yet) */
    double worst_wait;   /* largest wait seen in it */
    double busy;         /* seconds the worker ran batches in it */
    double last_wait, last_busy_share; /* of the last decided window, for metrics */
    unsigned long long grows, shrinks, closes; /* counters, for metrics */
} sotto_load;

void sotto_load_init(sotto_load *l, const sotto_load_params *p); /* p NULL: defaults */

/* A batch was taken at time now; its oldest pass had waited wait_s since
 * it was due. Once a window of hold_s has passed, its largest wait
 * decides (thresholds times the scale): above high_wait_s the scale grows
 * (at its maximum, admission closes instead); at most reopen_wait_s
 * reopens admission; at most low_wait_s, admission open and a busy share
 * that the shorter step would keep under shrink_busy, the scale shrinks
 * back towards 1. Returns 1 if scale or admit changed. */
int sotto_load_on_batch(sotto_load *l, double wait_s, double now);

/* Nothing is due at time now (the worker is idle): admission reopens at
 * once, and the window sees a wait of 0. */
int sotto_load_on_idle(sotto_load *l, double now);

/* The worker spent seconds running a batch (counts in the current window). */
void sotto_load_busy(sotto_load *l, double seconds);

/* A session's step under the current scale, within [base_ms, max_ms]. */
int sotto_load_step_ms(const sotto_load *l, int base_ms, int max_ms);

/* ---- merged steps ------------------------------------------------------------
 * A session's next pass is not due while its previous one runs, so when a
 * batch takes longer than the step, the sessions' next passes become due
 * the moment it ends and no pass is seen to wait: the steps merge (fewer,
 * longer passes) instead. For a client that streams at real-time pace the
 * audio a partial pass covers beyond one step is the lag it did not see:
 * the audio arrived that much earlier than its pass. A client that streams
 * faster than real time (a file sent as fast as the server takes it) always
 * has audio beyond the step, and that says nothing about load: it is left out. */

/* A session's pace: audio seconds received per wall second, measured over
 * windows of at least SOTTO_PACE_WINDOW_S. */
#define SOTTO_PACE_WINDOW_S 2.0
typedef struct sotto_pace {
    double t0;            /* the current window began (s; < 0: not started) */
    unsigned long long samples0; /* samples received when it began */
    double pace;          /* of the last complete window; < 0 until one is */
} sotto_pace;

void sotto_pace_init(sotto_pace *p);
/* samples_total: all 16 kHz samples received so far, at time now. */
void sotto_pace_update(sotto_pace *p, unsigned long long samples_total, double now);

/* A client counts as real-time paced at most this fast (jitter, bursts after a stall). */
#define SOTTO_PACE_REALTIME_MAX 1.25

/* The lag a partial pass taken now hides by merging steps: pending_s of
 * audio not yet in a pass minus one step_s, for a session whose pace is
 * known and real-time (<= SOTTO_PACE_REALTIME_MAX); 0 otherwise. */
double sotto_sched_merged_lag(double pending_s, double step_s, double pace);

#endif

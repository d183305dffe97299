/* dictation.c - streaming state machine of one session (see dictation.h). */
#include "dictation.h"

#include "repetition.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define SR 16000
#define MAX_CLOSED 64     /* windows waiting for their final pass */
#define IDLE_KEEP_S 2     /* audio kept while nobody speaks (pre-roll, VAD delay) */
#define MAX_CONTEXT 223   /* tokens of earlier text given as prompt (as Whisper: n_text_ctx / 2 - 1) */

typedef struct window {
    uint64_t id;
    uint64_t start, end; /* end == 0: still open */
    uint64_t from;       /* final passes decode [from, end]: start, or where the
                            previous final pass's transcription stopped */
    int continuations;   /* final passes after the first */
    int rest_after_end;  /* the last one decodes what followed a single-timestamp end */
    int no_lead;         /* decoded without the previous utterance's audio from now on */
    int after_cut;       /* opened where a full window was cut or a flush closed one, inside
                            the VAD's utterance (no speech_start of its own) */
    int shown;           /* a pass ran over it while open (its events may be out) */
} window;

#define MAX_CONTINUATIONS 6 /* final passes of one window after the first */
#define MIN_REST_S 0.5      /* untranscribed audio that gets another final pass */
#define SINGLE_END_REST_S 1.0 /* the same after a hypothesis ending in one timestamp */
#define PAST_AUDIO_S 0.5      /* a segment opening this far past a final's audio was invented */
#define CUT_SEARCH_S 3.0    /* a full window is cut at the quietest point of its last seconds */
#define CUT_QUIET_MS 100    /* ... measured as the energy of this much audio */
#define CUT_HOP_MS 10
#define LEAD_MAX_TOKENS 128 /* a longer previous final is not used as a lead */
#define LEAD_MAX_PREFIX 192 /* lead + committed tokens forced at most (the rest of 448 generates) */
#define LEAD_PAUSE_S 0.2    /* of the pause between a lead and its window, kept (plus tail and pre-roll) */
#define SPEC_MAX_TOKENS 512 /* a held speculative hypothesis (a pass generates at most 448) */

struct sotto_dictation {
    sotto_dictation_params p;
    const sotto_tokenizer *tok;
    int32_t eot;
    int32_t ts_begin; /* <|0.00|>: final passes with timestamps; -1: without */
    sotto_emit_fn emit;
    void *user;
    sotto_vad *vad;
    sotto_agreement agr;

    float *buf;         /* audio from buf_start to total */
    size_t cap;
    uint64_t buf_start; /* absolute sample of buf[0] */
    uint64_t total;     /* samples accepted so far (absolute: from origin) */
    uint64_t origin;    /* absolute sample of the first audio pushed (a restored session's resume point) */
    uint64_t final_end; /* end of the latest window whose final event was emitted */
    /* restored: the committed tokens of the utterance that was open, for the first window opened */
    int32_t restore_committed[SOTTO_AGREEMENT_MAX_TOKENS];
    int n_restore_committed;
    uint64_t restore_utterance, restore_bound;

    window closed[MAX_CLOSED]; /* FIFO of windows awaiting their final pass */
    int n_closed;
    window open;               /* the utterance being spoken (id 0: none) */
    uint64_t next_id;
    uint64_t last_pass_end;    /* audio the latest pass of the front window covered */
    uint64_t prev_pass_end;    /* ... and the partial pass before it */
    uint64_t commit_bound;     /* the front window's committed words were spoken before this */

    int32_t committed[SOTTO_AGREEMENT_MAX_TOKENS]; /* of the front window */
    int n_committed;
    int32_t context[MAX_CONTEXT]; /* latest finalized text */
    int n_context;
    int32_t pass_context[MAX_CONTEXT];

    /* the latest finalized window, as a lead for the next one (n_lead 0: none) */
    int32_t lead[LEAD_MAX_TOKENS];
    int n_lead;
    uint64_t lead_id, lead_start, lead_end;

    int in_flight;
    sotto_pass pass;
    float *pass_buf;
    int32_t pass_prefix[SOTTO_AGREEMENT_MAX_TOKENS];
    int32_t pass_tokens[SOTTO_AGREEMENT_MAX_TOKENS];
    int n_pass_tokens;
    uint64_t pass_counter;

    /* the speculative final pass (spec_silence_ms): 1 in flight, 2 result held */
    int spec_state;
    uint64_t spec_window, spec_end, spec_pass;
    int32_t spec_tokens[SPEC_MAX_TOKENS];
    int spec_n, spec_flags;
    int base_step_ms; /* the step asked for: a longer one means overload */

    int eos;
    int dropping; /* inside a run of dropped audio (one warning per run) */
    sotto_dictation_stats st;
};

sotto_dictation_params sotto_dictation_default_params(void) {
    sotto_dictation_params p;
    p.step_ms = 1000;
    p.agreement_n = 2;
    p.max_window_s = 28.0f;
    p.max_backlog_s = 60.0f;
    p.partials = 1;
    p.final_timestamps = 1;
    p.vad = sotto_vad_default_params();
    /* Endpoint after 2 s of silence, not the VAD's 600 ms: shorter pauses
       inside a sentence then stay in one window, and Whisper transcribes
       whole sentences better than pieces (docs/PERF.md: streamed WER on the
       dev clips, 600 vs 800 vs 1000 ms; in noise, 1000 vs 1500 vs 2000 ms,
       where the network ends utterances at pauses inside sentences more
       often). The final comes that much later; partial and commit events
       do not wait for it. Sessions may ask for less. */
    p.vad.silence_ms = 2000;
    /* The Silero VAD ends utterances at real pauses inside sentences; with
       the previous utterance's audio and text leading the next one, Whisper
       sees the sentence whole again (docs/PERF.md: streamed WER with and
       without the lead). */
    p.lead_max_s = 20.0f;
    p.lead_gap_s = 5.0f;
    p.spec_silence_ms = 0;
    p.spec_silence_load_ms = 0;
    return p;
}

int sotto_dictation_params_check(const sotto_dictation_params *p, sotto_err *err) {
    if (p->step_ms < 100 || p->step_ms > 10000)
        return sotto_err_set(err, SOTTO_E_INVALID, "step_ms %d out of range 100..10000", p->step_ms);
    if (p->agreement_n < 1 || p->agreement_n > SOTTO_AGREEMENT_MAX_N)
        return sotto_err_set(err, SOTTO_E_INVALID, "agreement %d out of range 1..%d", p->agreement_n,
                             SOTTO_AGREEMENT_MAX_N);
    if (!(p->max_window_s >= 2.0f && p->max_window_s <= 30.0f))
        return sotto_err_set(err, SOTTO_E_INVALID, "max_window_s %g out of range 2..30",
                             (double)p->max_window_s);
    if (!(p->max_backlog_s >= p->max_window_s && p->max_backlog_s <= 600.0f))
        return sotto_err_set(err, SOTTO_E_INVALID, "max_backlog_s %g out of range %g..600",
                             (double)p->max_backlog_s, (double)p->max_window_s);
    if (!(p->lead_max_s >= 0.0f && p->lead_max_s <= p->max_window_s))
        return sotto_err_set(err, SOTTO_E_INVALID, "lead_max_s %g out of range 0..%g",
                             (double)p->lead_max_s, (double)p->max_window_s);
    if (!(p->lead_gap_s >= 0.0f && p->lead_gap_s <= 10.0f))
        return sotto_err_set(err, SOTTO_E_INVALID, "lead_gap_s %g out of range 0..10",
                             (double)p->lead_gap_s);
    if (p->spec_silence_ms < 0 || p->spec_silence_ms > 10000)
        return sotto_err_set(err, SOTTO_E_INVALID, "spec_silence_ms %d out of range 0..10000",
                             p->spec_silence_ms);
    if (p->spec_silence_load_ms < 0 || p->spec_silence_load_ms > 10000)
        return sotto_err_set(err, SOTTO_E_INVALID, "spec_silence_load_ms %d out of range 0..10000",
                             p->spec_silence_load_ms);
    return sotto_vad_params_check(&p->vad, err);
}

sotto_dictation *sotto_dictation_create(const sotto_dictation_params *p,
                                        const sotto_tokenizer *tok, int32_t eot,
                                        sotto_emit_fn emit, void *user, sotto_err *err) {
    if (sotto_dictation_params_check(p, err)) return NULL;
    sotto_dictation *d = calloc(1, sizeof *d);
    if (!d) goto oom;
    d->p = *p;
    d->tok = tok;
    d->eot = eot;
    d->ts_begin = -1;
    d->emit = emit;
    d->user = user;
    d->next_id = 1;
    d->base_step_ms = p->step_ms;
    d->cap = (size_t)((p->max_backlog_s + IDLE_KEEP_S + 1 + p->lead_max_s + p->lead_gap_s) * SR);
    d->buf = malloc(sizeof(float) * d->cap);
    d->pass_buf = malloc(sizeof(float) * (size_t)((p->max_window_s + 1) * SR));
    if (!d->buf || !d->pass_buf) goto oom;
    sotto_agreement_init(&d->agr, p->agreement_n);
    d->vad = sotto_vad_create(&p->vad, err);
    if (!d->vad) {
        sotto_dictation_free(d);
        return NULL;
    }
    return d;
oom:
    sotto_dictation_free(d);
    sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a dictation session");
    return NULL;
}

static void add_context(sotto_dictation *d, const int32_t *t, int n) {
    if (n >= MAX_CONTEXT) {
        memcpy(d->context, t + n - MAX_CONTEXT, sizeof(int32_t) * MAX_CONTEXT);
        d->n_context = MAX_CONTEXT;
        return;
    }
    int keep = d->n_context + n > MAX_CONTEXT ? MAX_CONTEXT - n : d->n_context;
    memmove(d->context, d->context + d->n_context - keep, sizeof(int32_t) * (size_t)keep);
    memcpy(d->context + keep, t, sizeof(int32_t) * (size_t)n);
    d->n_context = keep + n;
}

void sotto_dictation_set_timestamps(sotto_dictation *d, int32_t timestamp_begin) {
    d->ts_begin = timestamp_begin > d->eot && d->p.final_timestamps ? timestamp_begin : -1;
}

void sotto_dictation_set_context(sotto_dictation *d, const int32_t *tokens, int n) {
    d->n_context = 0;
    if (n > 0) add_context(d, tokens, n);
}

void sotto_dictation_free(sotto_dictation *d) {
    if (!d) return;
    sotto_vad_free(d->vad);
    free(d->buf);
    free(d->pass_buf);
    free(d);
}

/* ---- events ---------------------------------------------------------------- */

static sotto_event event(sotto_event_kind kind, uint64_t utterance) {
    sotto_event e = {0};
    e.kind = kind;
    e.utterance = utterance;
    return e;
}

static void send(sotto_dictation *d, const sotto_event *e) { d->emit(d->user, e); }

static char *text_of(const sotto_dictation *d, const int32_t *t, int n) {
    char *s = sotto_tokenizer_decode(d->tok, t, (size_t)n, NULL);
    return s ? s : calloc(1, 1);
}

/* 1 when the committed text ends in an ellipsis ("that..."): Whisper's own
 * mark of a sentence cut at the window's end. As a lead it makes the next
 * utterance open with "..." and bend its first word to fit ("...Treyfels"
 * for "trifles"; docs/PERF.md), so such a final leads nothing. */
static int ends_cut(const sotto_dictation *d) {
    char *t = text_of(d, d->committed + d->n_committed - 1, 1);
    size_t n = strlen(t);
    int cut = n >= 3 && (!strcmp(t + n - 3, "...") || !strcmp(t + n - 3, "\xe2\x80\xa6")); /* or U+2026 */
    free(t);
    return cut;
}

/* ---- windows ----------------------------------------------------------------- */

/* The window passes work on: the oldest closed one, else the open one. */
static const window *front(const sotto_dictation *d) {
    if (d->n_closed) return &d->closed[0];
    return d->open.id ? &d->open : NULL;
}

/* The absolute sample of offset `off` into the pass's audio (past its gap). */
static uint64_t pass_abs(const sotto_dictation *d, size_t off) {
    return d->pass.start + off + (d->pass.gap && off >= d->pass.gap_at ? d->pass.gap : 0);
}

static void close_open(sotto_dictation *d, uint64_t end) {
    if (!d->open.id) return;
    if (end <= d->open.start) { /* nothing in it */
        d->open.id = 0;
        return;
    }
    if (d->n_closed == MAX_CLOSED) { /* worker far behind: merge into the last */
        d->closed[MAX_CLOSED - 1].end = end;
    } else {
        d->closed[d->n_closed] = d->open;
        d->closed[d->n_closed].end = end;
        d->n_closed++;
    }
    d->open.id = 0;
}

/* A window that goes on from `at` inside the VAD's utterance, where a full
 * window was cut or a flush closed one (no speech_start: the VAD's
 * SPEECH_END closes it); open_window starts from it. */
static void open_after(sotto_dictation *d, uint64_t at) {
    d->open.id = d->next_id++;
    d->open.start = at;
    d->open.from = at;
    d->open.continuations = 0;
    d->open.rest_after_end = 0;
    d->open.after_cut = 1;
    d->open.shown = 0;
    d->open.end = 0;
    if (!d->n_closed) d->last_pass_end = d->prev_pass_end = d->commit_bound = at;
}

static void open_window(sotto_dictation *d, uint64_t start) {
    uint64_t floor = d->n_closed ? d->closed[d->n_closed - 1].end : d->buf_start;
    if (start < floor) start = floor;
    if (start < d->buf_start) start = d->buf_start;
    open_after(d, start);
    d->open.after_cut = 0; /* the VAD's own start */
    d->st.utterances++;
    if (d->n_restore_committed && d->open.id == d->restore_utterance && !d->n_closed) {
        /* a restored session goes on with what its utterance had committed */
        memcpy(d->committed, d->restore_committed, sizeof(int32_t) * (size_t)d->n_restore_committed);
        d->n_committed = d->n_restore_committed;
        if (d->restore_bound > d->commit_bound) d->commit_bound = d->restore_bound;
    }
    d->n_restore_committed = 0;
}

/* Where the audio a pass over w decodes begins: the previous utterance's
 * start when it may lead w (see lead_max_s), else w's own start. end: the
 * end of the pass's audio. */
static uint64_t lead_of(const sotto_dictation *d, const window *w, uint64_t end) {
    if (!d->n_lead || w->no_lead || w->id != d->lead_id + 1) return w->start;
    if (w->start < d->lead_end || w->start - d->lead_end > (uint64_t)(d->p.lead_gap_s * SR))
        return w->start;
    if (end - d->lead_start > (uint64_t)(d->p.max_window_s * SR)) return w->start;
    if (d->lead_start < d->buf_start) return w->start;
    if (d->n_lead + d->n_committed > LEAD_MAX_PREFIX) return w->start; /* room to generate */
    return d->lead_start;
}

/* Drops audio no window needs any more. */
static void trim(sotto_dictation *d) {
    uint64_t keep = d->total > (uint64_t)IDLE_KEEP_S * SR ? d->total - (uint64_t)IDLE_KEEP_S * SR : 0;
    const window *w = front(d);
    /* the latest final's audio, while the next utterance may still use it as its lead */
    if (d->n_lead && d->lead_start < keep &&
        (w ? w->id == d->lead_id + 1 && !w->no_lead
           : d->total - d->lead_end <= (uint64_t)((d->p.lead_gap_s + IDLE_KEEP_S) * SR)))
        keep = d->lead_start;
    if (w && w->start < keep) keep = w->start;
    if (keep <= d->buf_start) return;
    size_t drop = (size_t)(keep - d->buf_start), len = (size_t)(d->total - d->buf_start);
    memmove(d->buf, d->buf + drop, sizeof(float) * (len - drop));
    d->buf_start = keep;
}

static void handle_vad(sotto_dictation *d, const sotto_vad_event *ev, int n) {
    for (int i = 0; i < n; i++) {
        uint64_t at = ev[i].sample + d->origin; /* the VAD counts from the first sample pushed */
        if (ev[i].type == SOTTO_VAD_SPEECH_START && !d->open.id) {
            open_window(d, at);
            sotto_event e = event(SOTTO_EVENT_SPEECH_START, d->open.id);
            e.start = d->open.start;
            send(d, &e);
        } else if (ev[i].type == SOTTO_VAD_SPEECH_END && d->open.id) {
            uint64_t id = d->open.id;
            uint64_t end = at > d->total ? d->total : at;
            if (end <= d->open.start && d->open.after_cut) {
                /* the speech had ended before the cut (or flush) that opened
                   this window, in its trailing silence: nothing of it is left.
                   Unseen, its number goes back (the speech ended in the window
                   before), so that every utterance number gets its final; seen,
                   it is decoded to the last sample like any window */
                if (!d->open.shown && id + 1 == d->next_id && id > 1) {
                    d->open.id = 0;
                    d->next_id--;
                    id--;
                } else {
                    close_open(d, d->total);
                }
            } else {
                close_open(d, end);
            }
            sotto_event e = event(SOTTO_EVENT_SPEECH_END, id);
            e.end = end;
            send(d, &e);
        }
    }
}

/* Where a full window is cut: the middle of the quietest CUT_QUIET_MS of
 * its last CUT_SEARCH_S seconds (the pause between two words, or the
 * weakest sound where none is silent), never past the audio received. */
static uint64_t quiet_cut(const sotto_dictation *d) {
    const size_t win = (size_t)CUT_QUIET_MS * SR / 1000, hop = (size_t)CUT_HOP_MS * SR / 1000;
    uint64_t lo = d->total > (uint64_t)(CUT_SEARCH_S * SR) ? d->total - (uint64_t)(CUT_SEARCH_S * SR) : 0;
    if (lo < d->open.start + SR) lo = d->open.start + SR; /* a window keeps at least 1 s */
    if (lo < d->buf_start) lo = d->buf_start;
    /* committed words must lie before the cut: they were in the hypotheses
       of passes that ended by commit_bound */
    if (!d->n_closed && d->commit_bound > lo) lo = d->commit_bound;
    uint64_t best = d->total;
    double best_e = -1;
    for (uint64_t at = lo; at + win <= d->total; at += hop) {
        const float *x = d->buf + (at - d->buf_start);
        double e = 0;
        for (size_t i = 0; i < win; i++) e += (double)x[i] * x[i];
        if (best_e < 0 || e < best_e) best_e = e, best = at + win / 2;
    }
    return best;
}

/* The front window ended where a held speculative pass assumed, with no
 * other pass since: its result is the window's first final pass, completed
 * now exactly as the worker would have completed that pass. */
static void try_spec(sotto_dictation *d) {
    if (d->spec_state != 2 || d->in_flight || !d->n_closed) return;
    const window *w = &d->closed[0];
    if (w->id != d->spec_window) return; /* an earlier window first (it cannot match later) */
    int same = w->end == d->spec_end && w->from == w->start && !w->continuations &&
               d->spec_pass == d->pass_counter;
    d->spec_state = 0;
    if (!same) return;
    const sotto_pass *p = sotto_dictation_take_pass(d);
    if (!p || !p->final || p->speculative) return; /* cannot happen: the closed window is due */
    d->st.spec_used++;
    sotto_dictation_complete_pass_flags(d, p->id, d->spec_tokens, d->spec_n, d->spec_flags);
}

int sotto_dictation_push(sotto_dictation *d, const float *x, size_t n) {
    if (d->eos) return SOTTO_E_INVALID;
    while (n > 0) {
        const window *w = front(d);
        uint64_t oldest = w ? w->start : d->total;
        uint64_t limit = oldest + (uint64_t)(d->p.max_backlog_s * SR);
        size_t room = d->total < limit ? (size_t)(limit - d->total) : 0;
        size_t space = d->cap - (size_t)(d->total - d->buf_start);
        if (room > space) room = space;
        size_t take = n < room ? n : room;
        if (take == 0) { /* backlog full: drop, count, warn once per run */
            d->st.samples_dropped += n;
            if (!d->dropping) {
                d->dropping = 1;
                sotto_event e = event(SOTTO_EVENT_WARNING, 0);
                e.code = "backlog";
                e.message = "audio arrives faster than it is transcribed; new audio is being dropped";
                e.dropped = d->st.samples_dropped;
                send(d, &e);
            }
            return SOTTO_OK;
        }
        d->dropping = 0;
        /* VAD in pieces so that window-full checks see the time advance */
        size_t chunk = take < SR / 10 ? take : SR / 10;
        memcpy(d->buf + (d->total - d->buf_start), x, sizeof(float) * chunk);
        d->total += chunk;
        d->st.samples_in += chunk;
        sotto_vad_event ev[8];
        int ne = 0, rc;
        do {
            rc = sotto_vad_push(d->vad, x, chunk, ev, 8, &ne);
            handle_vad(d, ev, ne);
            x += chunk, n -= chunk, chunk = 0; /* further calls only drain events */
        } while (rc == SOTTO_E_RANGE);
        if (d->open.id && d->total - d->open.start >= (uint64_t)(d->p.max_window_s * SR)) {
            /* window full: finalize it at a pause, continue in a new one */
            uint64_t cut = quiet_cut(d);
            close_open(d, cut);
            open_after(d, cut);
        }
        try_spec(d);
        trim(d);
    }
    return SOTTO_OK;
}

void sotto_dictation_flush(sotto_dictation *d, int end_of_stream) {
    if (end_of_stream && !d->eos) {
        /* An utterance already in its trailing silence ends where the VAD would
           have ended it had the silence lasted (its last speech plus the tail),
           not at the last sample: the same window a speculative pass took. */
        uint64_t pending;
        int silent = sotto_vad_pending_end(d->vad, &pending) >= 0;
        sotto_vad_event ev[8];
        int ne = 0;
        sotto_vad_finish(d->vad, ev, 8, &ne);
        for (int i = 0; i < ne; i++)
            if (silent && ev[i].type == SOTTO_VAD_SPEECH_END && pending < ev[i].sample)
                ev[i].sample = pending;
        handle_vad(d, ev, ne);
        d->eos = 1;
    }
    if (!d->eos && d->open.id && d->open.after_cut && d->total <= d->open.start) {
        try_spec(d); /* nothing since the last flush: the window stays */
        return;
    }
    const int going_on = !d->eos && d->open.id && sotto_vad_in_speech(d->vad);
    close_open(d, d->total);
    /* mid-stream, inside the VAD's utterance: what is said next goes into a new
       window (the VAD sends no new start until this utterance ends) */
    if (going_on) open_after(d, d->total);
    try_spec(d);
}

/* ---- passes ------------------------------------------------------------------ */

void sotto_dictation_set_step_ms(sotto_dictation *d, int step_ms) {
    d->p.step_ms = step_ms < 100 ? 100 : step_ms > 10000 ? 10000 : step_ms;
}

int sotto_dictation_step_ms(const sotto_dictation *d) { return d->p.step_ms; }

/* A speculative final pass is due: the open utterance has been silent for
 * spec_silence_ms (spec_silence_load_ms while the step is stretched) and
 * its would-be end (*end) was not tried yet. */
static int spec_due(const sotto_dictation *d, uint64_t *end) {
    if (!d->p.spec_silence_ms || d->in_flight || d->n_closed || !d->open.id || d->eos) return 0;
    int need = d->p.spec_silence_ms;
    if (d->p.step_ms > d->base_step_ms) { /* overloaded: less work that may be wasted */
        if (!d->p.spec_silence_load_ms) return 0;
        need = d->p.spec_silence_load_ms;
    }
    uint64_t e;
    int ms = sotto_vad_pending_end(d->vad, &e);
    if (ms < need) return 0;
    e += d->origin; /* the VAD counts from the first sample pushed */
    if (e > d->total || e <= d->open.start || d->open.from != d->open.start) return 0;
    if (d->spec_state && d->spec_window == d->open.id && d->spec_end == e) return 0;
    *end = e;
    return 1;
}

/* A speculative result waits on the silence it was made for. */
static int spec_holds(const sotto_dictation *d) {
    uint64_t e;
    return d->spec_state == 2 && d->spec_window == d->open.id && d->spec_pass == d->pass_counter &&
           sotto_vad_pending_end(d->vad, &e) >= 0 && e + d->origin == d->spec_end;
}

int sotto_dictation_pass_due(const sotto_dictation *d) {
    if (d->in_flight) return 0;
    if (d->n_closed) return 1;
    uint64_t e;
    if (spec_due(d, &e)) return 1;
    if (d->open.id && spec_holds(d)) return 0; /* nothing new to hear */
    return d->open.id && d->total - d->last_pass_end >= (uint64_t)d->p.step_ms * SR / 1000;
}

int sotto_dictation_final_due(const sotto_dictation *d) {
    uint64_t e;
    if (d->in_flight) return 0;
    return d->n_closed > 0 ? 2 : spec_due(d, &e);
}

int sotto_dictation_final_behind_partial(const sotto_dictation *d) {
    return d->in_flight && !d->pass.final && d->n_closed > 0;
}

size_t sotto_dictation_pending_samples(const sotto_dictation *d) {
    if (d->n_closed || !d->open.id || d->total < d->last_pass_end) return 0;
    return (size_t)(d->total - d->last_pass_end);
}

const sotto_pass *sotto_dictation_take_pass(sotto_dictation *d) {
    if (!sotto_dictation_pass_due(d)) return NULL;
    window *w = d->n_closed ? &d->closed[0] : &d->open;
    int final = d->n_closed > 0, spec = 0;
    if (!final) d->open.shown = 1;
    uint64_t end = final ? w->end : d->total;
    uint64_t start = final ? w->from : w->start;
    if (!final && spec_due(d, &end)) { /* the final pass it would be if the VAD ends it at `end` */
        final = spec = 1;
        start = w->from;
    }
    int lead = 0;
    if (start == w->start) {
        uint64_t at = lead_of(d, w, end);
        if (at < start) {
            start = at;
            lead = d->n_lead;
            d->st.lead_passes++;
        } else if (d->n_lead && w->id == d->lead_id + 1) {
            w->no_lead = 1; /* the window outgrew it: its passes stay comparable */
        }
    }
    /* a lead's audio comes with the window's, without the pause between them
       but LEAD_PAUSE_S of it (the VAD's tail and pre-roll add some 0.6 s):
       what was heard in the pause (talkers in the background, noise) is not
       decoded, as faster-whisper's VAD filter leaves it out */
    size_t gap_at = 0;
    uint64_t gap = 0;
    if (lead && w->start > d->lead_end + (uint64_t)(LEAD_PAUSE_S * SR)) {
        gap_at = (size_t)(d->lead_end + (uint64_t)(LEAD_PAUSE_S * SR) - start);
        gap = w->start - (start + gap_at);
    }
    size_t n = (size_t)(end - start - gap);
    size_t max = (size_t)((d->p.max_window_s + 1) * SR);
    if (n > max) n = max; /* cannot happen: windows are cut at max_window_s */
    if (gap) {
        memcpy(d->pass_buf, d->buf + (start - d->buf_start), sizeof(float) * gap_at);
        memcpy(d->pass_buf + gap_at, d->buf + (w->start - d->buf_start), sizeof(float) * (n - gap_at));
    } else {
        memcpy(d->pass_buf, d->buf + (start - d->buf_start), sizeof(float) * n);
    }
    /* prefix: the committed tokens; a final pass with timestamps puts <|0.00|>
       before them, and a continuation (from > start) forces nothing and sees
       the committed text as context instead */
    int n_prefix = 0, cont = final && start > w->start;
    if (final && d->ts_begin >= 0 && (d->n_committed > 0 || lead) && !cont)
        d->pass_prefix[n_prefix++] = d->ts_begin;
    if (lead) {
        memcpy(d->pass_prefix + n_prefix, d->lead, sizeof(int32_t) * (size_t)lead);
        n_prefix += lead;
    }
    if (!cont) {
        memcpy(d->pass_prefix + n_prefix, d->committed, sizeof(int32_t) * (size_t)d->n_committed);
        n_prefix += d->n_committed;
    }
    d->pass.utterance = w->id;
    d->pass.id = ++d->pass_counter;
    d->pass.final = final;
    d->pass.speculative = spec;
    d->pass.timestamps = final && d->ts_begin >= 0;
    d->pass.start = start;
    d->pass.samples = d->pass_buf;
    d->pass.n = n;
    d->pass.gap_at = gap_at;
    d->pass.gap = gap;
    d->pass.prefix = d->pass_prefix;
    d->pass.n_prefix = n_prefix;
    d->pass.lead_only = lead && d->n_committed == 0;
    /* the lead's text is in the prefix: not again in the prompt */
    int ctx_end = d->n_context;
    if (lead && ctx_end >= lead &&
        memcmp(d->context + ctx_end - lead, d->lead, sizeof(int32_t) * (size_t)lead) == 0)
        ctx_end -= lead;
    int nc = ctx_end, nk = cont ? d->n_committed : 0;
    if (nk > MAX_CONTEXT) nk = MAX_CONTEXT;
    if (nc + nk > MAX_CONTEXT) nc = MAX_CONTEXT - nk;
    memcpy(d->pass_context, d->context + ctx_end - nc, sizeof(int32_t) * (size_t)nc);
    memcpy(d->pass_context + nc, d->committed + d->n_committed - nk, sizeof(int32_t) * (size_t)nk);
    d->pass.context = d->pass_context;
    d->pass.n_context = nc + nk;
    d->n_pass_tokens = 0;
    d->in_flight = 1;
    d->st.passes++;
    if (spec) {
        d->spec_state = 1;
        d->spec_window = w->id;
        d->spec_end = end;
        d->spec_pass = d->pass.id;
    }
    return &d->pass;
}

/* A partial event of the pass in flight: the committed text, then the tentative
 * tokens (none: what an earlier partial showed is withdrawn). */
static void emit_partial(sotto_dictation *d, const int32_t *tent, int n_tent) {
    char *committed = text_of(d, d->committed, d->n_committed);
    char *tentative = text_of(d, tent, n_tent);
    sotto_event e = event(SOTTO_EVENT_PARTIAL, d->pass.utterance);
    e.pass = d->pass.id;
    e.committed = committed;
    e.committed_tokens = d->committed;
    e.n_committed = d->n_committed;
    e.tentative = tentative;
    e.tentative_tokens = tent;
    e.n_tentative = n_tent;
    send(d, &e);
    free(committed);
    free(tentative);
}

void sotto_dictation_on_token(sotto_dictation *d, uint64_t pass_id, int32_t token) {
    if (!d->in_flight || pass_id != d->pass.id || token >= d->eot) return; /* text only */
    if (d->n_pass_tokens < SOTTO_AGREEMENT_MAX_TOKENS) d->pass_tokens[d->n_pass_tokens++] = token;
    if (d->p.partials) emit_partial(d, d->pass_tokens, d->n_pass_tokens);
}

/* The tokens of a final pass with timestamps before the first segment that
 * opens more than PAST_AUDIO_S after the end of the pass's audio: speech
 * that begins after the audio ended was not in it. (A segment's closing
 * timestamp is no such sign: on a short window padded to 30 s, Whisper
 * closes real words up to a second late, e.g. " Chapter 1" in 1.3 s of
 * audio.) Returns the count kept: up to and with the timestamp before it. */
static int within_audio(const sotto_dictation *d, const int32_t *t, int n) {
    const double limit = (double)d->pass.n / SR + PAST_AUDIO_S;
    for (int i = 0; i < n; i++) {
        if (t[i] < d->ts_begin) continue;
        /* a segment's opening timestamp: the first, or one after another */
        const int32_t *pre = d->pass.prefix;
        int after_ts = i ? t[i - 1] >= d->ts_begin
                         : !d->pass.n_prefix || pre[d->pass.n_prefix - 1] >= d->ts_begin;
        int opens = after_ts && i + 1 < n && t[i + 1] < d->ts_begin;
        if (opens && (t[i] - d->ts_begin) * 0.02 > limit) return i;
    }
    return n;
}

/* Where a final pass with timestamps stopped transcribing, as Whisper's
 * long-form loop decides it: after the last complete segment when the
 * hypothesis has segment boundaries (two timestamps in a row) and does not
 * end in a single timestamp. Unlike Whisper, a hypothesis that ends in a
 * single timestamp more than SINGLE_END_REST_S before the window's end
 * stopped there too: with committed text forced as one long segment the
 * model tends to close it and end (the VAD window ends 0.3 s after the
 * last speech, so a longer rest holds words). Else: the window's end.
 * *keep: the tokens of the hypothesis before that point; *single: it ended
 * in a single timestamp. */
static uint64_t transcribed_until(const sotto_dictation *d, const int32_t *t, int n, int *keep,
                                  int *single) {
    const uint64_t all = pass_abs(d, d->pass.n);
    int single_end = n >= 1 && t[n - 1] >= d->ts_begin && (n == 1 || t[n - 2] < d->ts_begin);
    int last_pair = -1;
    for (int i = 1; i < n; i++)
        if (t[i] >= d->ts_begin && t[i - 1] >= d->ts_begin) last_pair = i;
    *keep = n;
    *single = single_end;
    if (single_end) {
        uint64_t at = pass_abs(d, (size_t)(t[n - 1] - d->ts_begin) * (SR / 50));
        return at + (uint64_t)(SINGLE_END_REST_S * SR) < all ? at : all;
    }
    if (last_pair < 0) return all;
    *keep = last_pair; /* the text after it belongs to an unfinished segment */
    uint64_t at = pass_abs(d, (size_t)(t[last_pair - 1] - d->ts_begin) * (SR / 50));
    return at < all ? at : all;
}

/* Lower-case words (letters, digits, apostrophes) of text, in place into
 * w[] (pointers into buf); returns the count. */
static int words_of(char *buf, char **w, int max) {
    int n = 0;
    for (char *p = buf; *p && n < max;) {
        while (*p && !(isalnum((unsigned char)*p) || (unsigned char)*p >= 0x80 || *p == '\'')) p++;
        if (!*p) break;
        w[n++] = p;
        while (*p && (isalnum((unsigned char)*p) || (unsigned char)*p >= 0x80 || *p == '\'')) {
            *p = (char)tolower((unsigned char)*p);
            p++;
        }
        if (*p) *p++ = 0;
    }
    return n;
}

/* 1 if the words of t[0..n) appear, in a row, among the committed text's words. */
static int repeats_committed(const sotto_dictation *d, const int32_t *t, int n) {
    char *a = text_of(d, d->committed, d->n_committed), *b = text_of(d, t, n);
    char *wa[512], *wb[512];
    int na = a ? words_of(a, wa, 512) : 0, nb = b ? words_of(b, wb, 512) : 0, found = 0;
    for (int i = 0; nb > 0 && i + nb <= na && !found; i++) {
        int k = 0;
        while (k < nb && strcmp(wa[i + k], wb[k]) == 0) k++;
        found = k == nb;
    }
    free(a);
    free(b);
    return found;
}

/* The longest j <= n such that base[0..k) + t[0..j) holds no loop (base
 * itself is loop-free: everything committed went through here). *period:
 * the loop's pattern length when j < n. */
static int loop_free_prefix(const sotto_dictation *d, const int32_t *base, int k, const int32_t *t,
                            int n, int *period) {
    int32_t all[3 * SOTTO_AGREEMENT_MAX_TOKENS];
    if (n <= 0) return 0;
    if (k + n > (int)(sizeof all / sizeof all[0])) n = (int)(sizeof all / sizeof all[0]) - k;
    memcpy(all, base, sizeof(int32_t) * (size_t)k);
    memcpy(all + k, t, sizeof(int32_t) * (size_t)n);
    sotto_repetition r;
    if (!sotto_repetition_find(all, k + n, d->eot, &r)) return n;
    *period = r.period;
    if (r.at >= k) return r.at - k;
    /* the new tokens complete a loop whose first copy is committed: the
       longest prefix that does not complete it */
    int j = n - 1;
    while (j > 0 && sotto_repetition_find(all, k + j, d->eot, &r)) j--;
    return j;
}

/* The tokens of t[0..n) that may be committed, into out (returns the
 * count): a partial pass commits the loop-free prefix (what agreement
 * holds is a prefix); a final pass also skips each looping run and keeps
 * the text after it, so that a phrase said once more than the detector
 * allows costs that phrase, not the rest of the window. */
static int loop_filter(sotto_dictation *d, const int32_t *t, int n, int final, int32_t *out) {
    int32_t base[3 * SOTTO_AGREEMENT_MAX_TOKENS];
    int k = d->n_committed, m = 0, i = 0, cuts = 0;
    memcpy(base, d->committed, sizeof(int32_t) * (size_t)k);
    while (i < n && cuts < 16) {
        int period = 1, j = loop_free_prefix(d, base, k, t + i, n - i, &period);
        memcpy(out + m, t + i, sizeof(int32_t) * (size_t)j);
        memcpy(base + k, t + i, sizeof(int32_t) * (size_t)j);
        m += j, k += j, i += j;
        if (i >= n) break;
        cuts++;
        if (!final) break;
        /* skip the run that continues the pattern of the last `period` text tokens */
        int32_t pat[64];
        int np = 0;
        for (int q = k - 1; q >= 0 && np < period && np < 64; q--)
            if (base[q] < d->eot) pat[np++] = base[q];
        int step = 0;
        while (i < n && np > 0 && (t[i] >= d->eot || t[i] == pat[np - 1 - (step % np)])) {
            if (t[i] < d->eot) step++;
            i++;
        }
        if (step == 0) i++; /* never stall */
    }
    if (cuts) d->st.loops_cut++;
    return m;
}

/* The word rule (repetition.h: copies whose tokens differ, e.g. in a
 * capital, or assembled across passes) over the committed text followed by
 * t[0..n): n if that holds no loop, else how many of t's tokens come before
 * the first copy that begins in t (the earlier copy is kept). */
static int word_loop_free(const sotto_dictation *d, const int32_t *t, int n) {
    int32_t all[2 * SOTTO_AGREEMENT_MAX_TOKENS];
    const int k = d->n_committed;
    memcpy(all, d->committed, sizeof(int32_t) * (size_t)k);
    for (int round = 0; round < 8 && n > 0; round++) {
        memcpy(all + k, t, sizeof(int32_t) * (size_t)n);
        char *s = text_of(d, all, k + n);
        int starts[3], found = sotto_repetition_find_word_copies(s, starts);
        free(s);
        if (!found) return n;
        char *c = text_of(d, all, k);
        const int wc = sotto_repetition_count_words(c);
        free(c);
        int cut_word = -1;
        for (int i = 1; i < 3 && cut_word < 0; i++)
            if (starts[i] >= wc) cut_word = starts[i];
        if (cut_word < 0) return 0;
        /* the token of t that begins cut_word: the shortest prefix with more words */
        int cut = n;
        for (int j = 1; j <= n; j++) {
            char *p = text_of(d, all, k + j);
            int words = sotto_repetition_count_words(p);
            free(p);
            if (words > cut_word) {
                cut = j - 1;
                break;
            }
        }
        if (cut >= n) cut = n - 1; /* never stall */
        n = cut;
    }
    return n;
}

/* Adds the loop-free part of t[0..n) to the committed text and tells the
 * client. */
static void commit(sotto_dictation *d, const int32_t *in, int n, int final) {
    int32_t t[SOTTO_AGREEMENT_MAX_TOKENS];
    if (n > SOTTO_AGREEMENT_MAX_TOKENS) n = SOTTO_AGREEMENT_MAX_TOKENS;
    n = loop_filter(d, in, n, final, t);
    /* the word rule over the committed text and the new tokens: commit what
       comes before the first loop copy that begins in them (the token rule
       above misses copies that differ in a token, and loops assembled across
       passes) */
    if (n > 0) {
        int m = word_loop_free(d, t, n);
        if (m < n) d->st.loops_cut++;
        n = m;
    }
    if (n <= 0) return;
    if (d->n_committed + n > SOTTO_AGREEMENT_MAX_TOKENS) n = SOTTO_AGREEMENT_MAX_TOKENS - d->n_committed;
    char *before = text_of(d, d->committed, d->n_committed);
    memcpy(d->committed + d->n_committed, t, sizeof(int32_t) * (size_t)n);
    d->n_committed += n;
    char *after = text_of(d, d->committed, d->n_committed);
    size_t bl = strlen(before);
    const char *delta = strncmp(after, before, bl) == 0 ? after + bl : after;
    sotto_event e = event(SOTTO_EVENT_COMMIT, d->pass.utterance);
    e.pass = d->pass.id;
    e.text = delta;
    e.committed = after;
    e.committed_tokens = d->committed;
    e.n_committed = d->n_committed;
    send(d, &e);
    free(before);
    free(after);
}

int sotto_dictation_complete_pass(sotto_dictation *d, uint64_t pass_id, const int32_t *tokens,
                                  int n) {
    return sotto_dictation_complete_pass_flags(d, pass_id, tokens, n, 0);
}

int sotto_dictation_complete_pass_flags(sotto_dictation *d, uint64_t pass_id,
                                        const int32_t *tokens, int n, int flags) {
    if (!d->in_flight || pass_id != d->pass.id) return SOTTO_E_INVALID;
    d->in_flight = 0;
    if (d->pass.speculative) { /* held until the VAD ends the utterance (try_spec) */
        d->st.spec_passes++;
        d->spec_state = 0;
        if (n >= 0 && n <= SPEC_MAX_TOKENS && (n == 0 || tokens)) {
            if (n) memcpy(d->spec_tokens, tokens, sizeof(int32_t) * (size_t)n);
            d->spec_n = n;
            d->spec_flags = flags;
            d->spec_state = 2;
        }
        try_spec(d);
        return SOTTO_OK;
    }
    if (d->pass.final && d->pass.timestamps && n > 0) {
        int in = within_audio(d, tokens, n);
        if (in < n) {
            n = in;
            d->st.tails_dropped++;
        }
    }
    int keep = n;
    uint64_t stop = 0;
    int cont = 0, single = 0;
    if (d->pass.final) {
        const window *w = &d->closed[0];
        stop = d->pass.timestamps ? transcribed_until(d, tokens, n, &keep, &single)
                                  : pass_abs(d, d->pass.n);
        /* the decoder stopped before the window's end: another final pass
           decodes the rest (from the end of the last complete segment) */
        cont = stop > d->pass.start && stop + (uint64_t)(MIN_REST_S * SR) < w->end &&
               w->continuations < MAX_CONTINUATIONS;
        if (!cont) keep = n;
    }
    /* keep text tokens only: the hypothesis never carries specials on purpose */
    int32_t clean[SOTTO_AGREEMENT_MAX_TOKENS] = {0};
    int m = 0;
    for (int i = 0; i < keep && m < SOTTO_AGREEMENT_MAX_TOKENS; i++)
        if (tokens[i] < d->eot) clean[m++] = tokens[i];
    if (d->pass.final) {
        window *w = &d->closed[0];
        /* a continuation that only repeats words already committed is the decoder
           echoing its context, not new speech: drop it */
        if (d->pass.start > w->start && m > 0 && repeats_committed(d, clean, m)) {
            m = 0;
            cont = 0;
            d->st.repeats_dropped++;
        }
        /* the rest after a single-timestamp end, where no attempt passed the
           guardrails: the decoder filling silence (Whisper would not have
           decoded this audio at all) */
        if (d->pass.start > w->start && w->rest_after_end && m > 0 && (flags & SOTTO_PASS_ALL_FAILED)) {
            m = 0;
            cont = 0;
            d->st.tails_dropped++;
        }
        commit(d, clean, m, 1);
        if (cont) { /* the rest gets a final pass, with the text so far as context */
            w->from = stop;
            w->rest_after_end = single;
            w->continuations++;
            d->st.continuations++;
            return SOTTO_OK;
        }
        char *text = text_of(d, d->committed, d->n_committed);
        sotto_event e = event(SOTTO_EVENT_FINAL, w->id);
        e.pass = d->pass.id;
        e.text = text;
        e.committed_tokens = d->committed;
        e.n_committed = d->n_committed;
        e.start = w->start;
        e.end = w->end;
        send(d, &e);
        free(text);
        d->st.samples_final += w->end - w->start;
        if (w->end > d->final_end) d->final_end = w->end;
        if (flags & SOTTO_PASS_RESET_CONTEXT) {
            d->n_context = 0; /* as Whisper's prompt reset: nothing earlier is carried */
            d->st.context_resets++;
        } else {
            add_context(d, d->committed, d->n_committed);
        }
        /* this window's audio and text may lead the next one (lead_max_s) */
        d->n_lead = 0;
        if (!(flags & SOTTO_PASS_RESET_CONTEXT) && d->n_committed > 0 &&
            d->n_committed <= LEAD_MAX_TOKENS &&
            w->end - w->start <= (uint64_t)(d->p.lead_max_s * SR) && !ends_cut(d)) {
            memcpy(d->lead, d->committed, sizeof(int32_t) * (size_t)d->n_committed);
            d->n_lead = d->n_committed;
            d->lead_id = w->id;
            d->lead_start = w->start;
            d->lead_end = w->end;
        }
        memmove(&d->closed[0], &d->closed[1], sizeof(window) * (size_t)(d->n_closed - 1));
        d->n_closed--;
        d->n_committed = 0;
        sotto_agreement_reset(&d->agr);
        const window *next = front(d);
        d->last_pass_end = next ? next->start : d->total;
        d->prev_pass_end = d->commit_bound = d->last_pass_end;
        trim(d);
        return SOTTO_OK;
    }
    int k = 0;
    sotto_agreement_update(&d->agr, clean, m, &k);
    commit(d, clean, k, 0);
    /* agreed tokens were also in the previous pass's hypothesis */
    if (k > 0) d->commit_bound = d->agr.n > 1 ? d->prev_pass_end : pass_abs(d, d->pass.n);
    d->last_pass_end = d->prev_pass_end = pass_abs(d, d->pass.n);
    return SOTTO_OK;
}

void sotto_dictation_reject_pass(sotto_dictation *d, uint64_t pass_id) {
    if (!d->in_flight || pass_id != d->pass.id) return;
    if (d->pass.final) {
        sotto_dictation_complete_pass_flags(d, pass_id, NULL, 0, SOTTO_PASS_RESET_CONTEXT);
        return;
    }
    d->in_flight = 0;
    d->st.passes_rejected++;
    d->last_pass_end = pass_abs(d, d->pass.n);
    if (d->p.partials && d->n_pass_tokens > 0) emit_partial(d, NULL, 0); /* withdraw what it showed */
}

void sotto_dictation_abandon_pass(sotto_dictation *d, uint64_t pass_id) {
    if (d->in_flight && pass_id == d->pass.id) {
        d->in_flight = 0;
        if (d->pass.speculative) d->spec_state = 0;
    }
}

int sotto_dictation_done(const sotto_dictation *d) {
    return d->eos && !d->in_flight && !d->n_closed && !d->open.id;
}

uint64_t sotto_dictation_durable(const sotto_dictation *d) {
    if (sotto_dictation_done(d)) return d->total;
    const window *w = front(d);
    if (w) return w->start;
    /* nobody speaking: the last IDLE_KEEP_S may still become an utterance's
       pre-roll once the VAD is sure of it */
    uint64_t idle = d->total > (uint64_t)IDLE_KEEP_S * SR ? d->total - (uint64_t)IDLE_KEEP_S * SR : 0;
    uint64_t at = idle > d->final_end ? idle : d->final_end;
    return at < d->origin ? d->origin : at > d->total ? d->total : at;
}

int sotto_dictation_restore(sotto_dictation *d, uint64_t origin, uint64_t next_utterance) {
    if (d->total != d->origin || d->next_id != 1 || d->in_flight || d->eos) return SOTTO_E_INVALID;
    if (next_utterance < 1) return SOTTO_E_INVALID;
    d->origin = d->total = d->buf_start = d->final_end = origin;
    d->last_pass_end = d->prev_pass_end = d->commit_bound = origin;
    d->next_id = next_utterance;
    return SOTTO_OK;
}

int sotto_dictation_restore_committed(sotto_dictation *d, const int32_t *tokens, int n, uint64_t bound) {
    if (d->total != d->origin || d->open.id || d->n_closed || n < 0 || n > SOTTO_AGREEMENT_MAX_TOKENS)
        return SOTTO_E_INVALID;
    memcpy(d->restore_committed, tokens, sizeof(int32_t) * (size_t)n);
    d->n_restore_committed = n;
    d->restore_utterance = d->next_id;
    d->restore_bound = bound;
    return SOTTO_OK;
}

uint64_t sotto_dictation_get_committed(const sotto_dictation *d, const int32_t **tokens, int *n,
                                       uint64_t *bound) {
    const window *w = front(d);
    *tokens = d->committed;
    *n = w ? d->n_committed : 0;
    *bound = d->commit_bound;
    return w ? w->id : 0;
}

uint64_t sotto_dictation_next_utterance(const sotto_dictation *d) {
    const window *w = front(d);
    return w ? w->id : d->next_id;
}

void sotto_dictation_get_context(const sotto_dictation *d, const int32_t **tokens, int *n) {
    *tokens = d->context;
    *n = d->n_context;
}

void sotto_dictation_get_stats(const sotto_dictation *d, sotto_dictation_stats *st) { *st = d->st; }

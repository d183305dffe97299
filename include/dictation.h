/* dictation.h - the streaming state machine of one dictation session:
 * 16 kHz audio in, utterances found by the VAD, decode passes requested
 * while the person speaks, tokens committed by agreement between passes,
 * and the events that tell the client about it.
 *
 * It does no inference itself. The session owner feeds audio with
 * sotto_dictation_push(); when a pass is due, sotto_dictation_take_pass()
 * hands out a request (a copy of the utterance's audio window and the
 * committed tokens to force as prefix); whoever runs the model reports
 * generated tokens with sotto_dictation_on_token() (partial events) and the
 * pass's hypothesis with sotto_dictation_complete_pass() (commit and final
 * events). At most one pass is in flight per session.
 *
 * Windows: an utterance is decoded over [utterance start, now]. When it
 * reaches max_window_s without an endpoint, it is cut at the quietest
 * point of its last CUT_SEARCH_S seconds (a pause between words, not the
 * middle of one), finalized there, and the next window continues from the
 * cut: nothing is lost or decoded twice. Utterances that end while the
 * worker is busy queue up and are finalized in order.
 *
 * Guardrails: committed text never holds a loop. Before tokens are
 * committed (by agreement or by a final pass), the repetition detector
 * (include/repetition.h) runs over the window's committed text plus the
 * new tokens; tokens from where a loop begins are not committed.
 *
 * Events are typed values (event.h) handed to the emit callback, borrowed
 * for the call; the dictation builds no JSON. Kinds: speech_start, partial,
 * commit, final, speech_end, warning.
 *
 * Thread-safety: none inside; the owner serialises calls with its own lock
 * (audio arrives on the network thread, passes complete on a worker).
 */
#ifndef SOTTO_DICTATION_H
#define SOTTO_DICTATION_H

#include "agreement.h"
#include "event.h"
#include "sotto_err.h"
#include "tokenizer.h"
#include "vad.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sotto_dictation_params {
    int step_ms;          /* re-decode after this much new audio (default 1000) */
    int agreement_n;      /* LocalAgreement-n (default 2) */
    float max_window_s;   /* longest window decoded at once, <= 30 (default 28) */
    float max_backlog_s;  /* audio allowed to wait for transcription (default 60) */
    int partials;         /* send partial events (default 1) */
    int final_timestamps; /* final passes with timestamps and continuations, when the
                             owner enables them with sotto_dictation_set_timestamps
                             (default 1) */
    /* Audio context across a pause: an utterance that starts at most
       lead_gap_s after the previous one ended is decoded with that previous
       utterance's audio before it (when it lasted at most lead_max_s and its
       final passed the guardrails) and the previous final's tokens forced as
       a hidden prefix, so that a sentence the VAD split at a pause is still
       transcribed with what came before it. The pause between them is left
       out of that audio but for 0.2 s (sotto_pass.gap). Nothing of the
       earlier utterance is emitted again. 0 turns it off (default 20 s, gap 5 s). */
    float lead_max_s;
    float lead_gap_s;
    /* Speculative final passes: once the VAD has heard this many ms of
       non-speech after speech, the utterance's final pass is decoded over the
       window it will have if the VAD ends it there (sotto_vad_pending_end),
       before the VAD decides (silence_ms). When the utterance does end there
       and nothing else ran in between, that result is the final at once,
       exactly as the final pass would have made it (same audio, prefix and
       context); when speech comes back it is dropped. No partial pass runs
       while such a result waits on unchanged silence. 0 turns it off (the
       default here; the server turns it on, --speculate-ms). */
    int spec_silence_ms;
    /* While the step is stretched (overload, scheduler.h), a speculative
       pass waits for this much silence instead: a later guess is wasted
       less often (speech resumes after most short pauses) and still leaves
       the worker time to run it before the VAD decides. 0: none under
       overload (the default here; the server's --speculate-load-ms). Has no
       effect while spec_silence_ms is 0. */
    int spec_silence_load_ms;
    sotto_vad_params vad;
} sotto_dictation_params;

sotto_dictation_params sotto_dictation_default_params(void);
int sotto_dictation_params_check(const sotto_dictation_params *p, sotto_err *err);

/* A decode request. Owned by the dictation until completed or abandoned. */
typedef struct sotto_pass {
    uint64_t utterance; /* 1, 2, ... */
    uint64_t id;        /* pass number within the session */
    int final;          /* a final pass over this window: commit everything */
    int speculative;    /* (with final) over the open utterance as the VAD may end it
                           (spec_silence_ms): its result is held, not emitted */
    int timestamps;     /* decode with timestamp tokens (final passes, when enabled) */
    uint64_t start;     /* absolute 16 kHz sample of samples[0] */
    const float *samples;
    size_t n;
    size_t gap_at;      /* with a lead, samples[gap_at..n) are those from absolute sample
                           start + gap_at + gap: the pause between the lead and the
                           window is left out but for 0.2 s (gap 0: none left out) */
    uint64_t gap;
    const int32_t *prefix; /* forced: the window's committed tokens (after <|0.00|>
                              when timestamps is set), preceded by the previous
                              utterance's final tokens when its audio leads the
                              window (lead_max_s); none on a continuation */
    int n_prefix;
    int lead_only;         /* the prefix holds only the previous utterance's tokens (and
                              <|0.00|>): nothing of this window is committed yet, so
                              the pass must not end before its first token (Whisper's
                              blank suppression after a prefix) */
    const int32_t *context; /* earlier text (initial prompt, finalized windows) */
    int n_context;
} sotto_pass;

typedef struct sotto_dictation sotto_dictation;

/* tok: the model's tokenizer (text of events); borrowed for the lifetime. */
sotto_dictation *sotto_dictation_create(const sotto_dictation_params *p,
                                        const sotto_tokenizer *tok, int32_t eot,
                                        sotto_emit_fn emit, void *user, sotto_err *err);
void sotto_dictation_free(sotto_dictation *d); /* accepts NULL */

/* Final passes decode with timestamps (timestamp_begin: the id of
 * <|0.00|>; a value <= eot turns it off, the default). A final pass whose
 * hypothesis stops before the window's end, as Whisper's segment
 * timestamps tell, is followed by another final pass over the rest (up to
 * 6), with the text so far as context; the final event comes after the
 * last. Without timestamps a window gets a single final pass. */
void sotto_dictation_set_timestamps(sotto_dictation *d, int32_t timestamp_begin);

/* Text to condition the first window on (the session's initial prompt),
 * as tokens; the latest finalized text replaces it as windows complete. */
void sotto_dictation_set_context(sotto_dictation *d, const int32_t *tokens, int n);

/* Appends n samples (16 kHz mono). Audio beyond the backlog bound is
 * dropped, counted and reported with a warning event. */
int sotto_dictation_push(sotto_dictation *d, const float *x, size_t n);

/* Finalizes the current utterance now (client "flush" or end of stream):
 * its last pass is final. end_of_stream: no more audio will come. */
void sotto_dictation_flush(sotto_dictation *d, int end_of_stream);

/* Changes the step (the overload policy stretches it; see scheduler.h):
 * from the next pass on, partial passes come after step_ms of new audio,
 * clamped to 100..10000. Final passes are due at once, whatever the step. */
void sotto_dictation_set_step_ms(sotto_dictation *d, int step_ms);
int sotto_dictation_step_ms(const sotto_dictation *d);

/* 1 if a pass is due and none is in flight. */
int sotto_dictation_pass_due(const sotto_dictation *d);
/* Nonzero if the due pass is a final one: 2 if an utterance ended (its
 * text settles with it), 1 if it is a speculative final (the open
 * utterance has been silent for spec_silence_ms; the VAD may yet end it
 * there). 0 if it is a partial pass or none is due. The scheduler runs
 * finals first, ended utterances before speculative ones. */
int sotto_dictation_final_due(const sotto_dictation *d);
/* 1 if a partial pass is in flight although the utterance it covers has
 * ended since it was taken: its text will not be shown for long, and the
 * final waits for it. The worker may abandon it (sotto_dictation_abandon_pass)
 * so that the final runs at once. */
int sotto_dictation_final_behind_partial(const sotto_dictation *d);
/* Samples of the open utterance that no pass has covered yet (what the next
 * partial pass adds); 0 while a final pass is waiting or nothing is open. */
size_t sotto_dictation_pending_samples(const sotto_dictation *d);

/* Hands out the due pass (NULL if none); it stays valid until completed. */
const sotto_pass *sotto_dictation_take_pass(sotto_dictation *d);

/* A token generated by the pass in flight (partial events). */
void sotto_dictation_on_token(sotto_dictation *d, uint64_t pass_id, int32_t token);

/* The pass's hypothesis (tokens after its prefix, without <|endoftext|>;
 * timestamp tokens only on passes with timestamps).
 * Commits by agreement (everything on a final pass) and emits events. */
int sotto_dictation_complete_pass(sotto_dictation *d, uint64_t pass_id, const int32_t *tokens,
                                  int n);

/* As sotto_dictation_complete_pass, with flags:
 *   SOTTO_PASS_RESET_CONTEXT  (final passes) the window's text is final but is
 *                             not given as context to the next window, and the
 *                             context so far is dropped: the hypothesis needed
 *                             temperature fallback or was cut by the guardrails,
 *                             and a loop must not be fed forward. */
#define SOTTO_PASS_RESET_CONTEXT 1
/*   SOTTO_PASS_ALL_FAILED     (final passes) every attempt failed the guardrails;
 *                             tokens are the least bad one. A pass over the rest
 *                             of a window after a hypothesis that ended in a
 *                             single timestamp (which Whisper would not decode at
 *                             all) then commits nothing. */
#define SOTTO_PASS_ALL_FAILED 2
int sotto_dictation_complete_pass_flags(sotto_dictation *d, uint64_t pass_id,
                                        const int32_t *tokens, int n, int flags);

/* A partial pass whose hypothesis failed the guardrails (a loop, too many
 * words for its audio, ...): nothing is committed, the agreement does not
 * see it, the tentative text it showed is withdrawn (a partial event with
 * the committed text only), and the next pass is due a step later. On a
 * final pass it is a completion with no new text and the context reset. */
void sotto_dictation_reject_pass(sotto_dictation *d, uint64_t pass_id);

/* The pass failed: its audio stays and the pass is due again later. */
void sotto_dictation_abandon_pass(sotto_dictation *d, uint64_t pass_id);

/* 1 once end of stream was flushed and every final pass completed. */
int sotto_dictation_done(const sotto_dictation *d);

/* Durability (resume on another server). Everything before
 * sotto_dictation_durable() is either in a final event already emitted or
 * audio no utterance will use; nothing after it is in any final. A session
 * that is restored elsewhere from that point (its client resends the audio
 * from there) therefore neither loses nor repeats a final word. An
 * utterance that was open or awaiting its final is decoded again from its
 * start, with its committed tokens restored (sotto_dictation_restore_committed).
 * Absolute 16 kHz samples. */
uint64_t sotto_dictation_durable(const sotto_dictation *d);
/* The id the next final event will carry (the front window's, or the next
 * utterance's when none is open). */
uint64_t sotto_dictation_next_utterance(const sotto_dictation *d);
/* The committed tokens of the front window (the utterance at the durable
 * point) and the sample its committed words were spoken before; returns
 * that utterance's id, 0 (and *n 0) when none is open. Borrowed. */
uint64_t sotto_dictation_get_committed(const sotto_dictation *d, const int32_t **tokens, int *n,
                                       uint64_t *bound);
/* After sotto_dictation_restore: the first utterance opened (the one that
 * was open at the durable point) starts with these committed tokens, so
 * that what the client saw committed stays so (passes force them, its
 * final begins with them). SOTTO_E_INVALID once audio was pushed. */
int sotto_dictation_restore_committed(sotto_dictation *d, const int32_t *tokens, int n, uint64_t bound);
/* The text context passes are conditioned on (latest finalized text);
 * borrowed until the next call into d. */
void sotto_dictation_get_context(const sotto_dictation *d, const int32_t **tokens, int *n);
/* A fresh dictation (nothing pushed yet) continues a session from a
 * durable point: its first sample pushed is absolute sample `origin`, and
 * its first utterance is numbered next_utterance. SOTTO_E_INVALID after
 * audio was pushed. */
int sotto_dictation_restore(sotto_dictation *d, uint64_t origin, uint64_t next_utterance);

typedef struct sotto_dictation_stats {
    uint64_t samples_in;      /* 16 kHz samples accepted */
    uint64_t samples_dropped; /* dropped by the backlog bound */
    uint64_t samples_final;   /* covered by final passes */
    uint64_t passes, utterances;
    uint64_t continuations;   /* extra final passes for audio a final pass left out */
    uint64_t repeats_dropped; /* continuations dropped for only repeating committed words */
    uint64_t tails_dropped;   /* final text dropped as invented: a segment opening past the audio, or a
                                 failed pass over the rest after a single-timestamp end */
    uint64_t passes_rejected; /* partial passes that failed the guardrails */
    uint64_t loops_cut;       /* commits cut short by the repetition detector */
    uint64_t context_resets;  /* finals whose text was not carried as context */
    uint64_t lead_passes;     /* passes led by the previous utterance's audio (lead_max_s) */
    uint64_t spec_passes;     /* speculative final passes completed (spec_silence_ms) */
    uint64_t spec_used;       /* ... whose result became the final */
} sotto_dictation_stats;

void sotto_dictation_get_stats(const sotto_dictation *d, sotto_dictation_stats *st);

#endif

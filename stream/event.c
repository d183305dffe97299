/* event.c - names of the dictation's event kinds (see event.h). */
#include "event.h"

const char *sotto_event_kind_name(sotto_event_kind kind) {
    switch (kind) {
    case SOTTO_EVENT_SPEECH_START: return "speech_start";
    case SOTTO_EVENT_SPEECH_END: return "speech_end";
    case SOTTO_EVENT_PARTIAL: return "partial";
    case SOTTO_EVENT_COMMIT: return "commit";
    case SOTTO_EVENT_FINAL: return "final";
    case SOTTO_EVENT_WARNING: return "warning";
    }
    return "?";
}

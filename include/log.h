/* log.h - leveled logging to stderr with an optional session id.
 *
 * Lines look like: "2026-11-29T10:00:00.123Z warn  [s42] message".
 * Thread-safe (one write(2) per line). Nothing per audio frame at INFO.
 */
#ifndef SOTTO_LOG_H
#define SOTTO_LOG_H

#include <stdint.h>

typedef enum sotto_log_level {
    SOTTO_LOG_DEBUG = 0,
    SOTTO_LOG_INFO = 1,
    SOTTO_LOG_WARN = 2,
    SOTTO_LOG_ERROR = 3,
    SOTTO_LOG_OFF = 4
} sotto_log_level;

void sotto_log_set_level(sotto_log_level level);
sotto_log_level sotto_log_get_level(void);
/* Parses "debug|info|warn|error|off"; returns 0 or SOTTO_E_INVALID. */
int sotto_log_parse_level(const char *s, sotto_log_level *out);

/* session_id 0 means "no session". */
void sotto_log(sotto_log_level level, uint64_t session_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define SOTTO_DEBUG(...) sotto_log(SOTTO_LOG_DEBUG, 0, __VA_ARGS__)
#define SOTTO_INFO(...) sotto_log(SOTTO_LOG_INFO, 0, __VA_ARGS__)
#define SOTTO_WARN(...) sotto_log(SOTTO_LOG_WARN, 0, __VA_ARGS__)
#define SOTTO_ERROR(...) sotto_log(SOTTO_LOG_ERROR, 0, __VA_ARGS__)

#endif

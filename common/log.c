#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include "sotto_err.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_level = SOTTO_LOG_INFO;

void sotto_log_set_level(sotto_log_level level) { atomic_store(&g_level, (int)level); }

sotto_log_level sotto_log_get_level(void) { return (sotto_log_level)atomic_load(&g_level); }

int sotto_log_parse_level(const char *s, sotto_log_level *out) {
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++) {
        if (s && strcmp(s, names[i]) == 0) {
            *out = (sotto_log_level)i;
            return SOTTO_OK;
        }
    }
    return SOTTO_E_INVALID;
}

void sotto_log(sotto_log_level level, uint64_t session_id, const char *fmt, ...) {
    if ((int)level < atomic_load(&g_level) || level >= SOTTO_LOG_OFF) return;
    static const char *tags[] = {"debug", "info ", "warn ", "error"};
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03ldZ %s ", ts.tv_nsec / 1000000L,
                  tags[level]);
    if (session_id)
        n += snprintf(line + n, sizeof line - (size_t)n, "[s%llu] ",
                      (unsigned long long)session_id);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    n += m;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

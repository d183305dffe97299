#include "sotto_err.h"

#include <stdarg.h>
#include <stdio.h>

const char *sotto_strerror(int code) {
    switch (code) {
    case SOTTO_OK: return "ok";
    case SOTTO_E_NOMEM: return "out of memory";
    case SOTTO_E_IO: return "i/o error";
    case SOTTO_E_FORMAT: return "bad format";
    case SOTTO_E_INVALID: return "invalid argument";
    case SOTTO_E_UNSUPPORTED: return "unsupported";
    case SOTTO_E_NOTFOUND: return "not found";
    case SOTTO_E_RANGE: return "out of range";
    case SOTTO_E_INTERNAL: return "internal error";
    default: return "unknown error";
    }
}

int sotto_err_set(sotto_err *err, int code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void sotto_err_clear(sotto_err *err) {
    if (err) {
        err->code = SOTTO_OK;
        err->msg[0] = '\0';
    }
}

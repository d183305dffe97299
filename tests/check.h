/* check.h - minimal assertion helpers for sotto's C unit tests.
 *
 * Each CHECK records a failure (with file:line and the expression) and the
 * test goes on; main() ends with `return check_report();`, which prints a
 * summary and returns non-zero if anything failed or nothing was checked.
 */
#ifndef SOTTO_CHECK_H
#define SOTTO_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures_ = 0;
static int check_count_ = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        check_count_++;                                                             \
        if (!(cond)) {                                                              \
            check_failures_++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        check_count_++;                                                             \
        if (!(cond)) {                                                              \
            check_failures_++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                          \
    CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a),     \
              (long long)(b))

#define CHECK_NEAR(a, b, tol)                                                       \
    CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)",     \
              (double)(a), (double)(b), (double)(tol))

#define CHECK_STR(a, b)                                                             \
    CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))

/* max |a - b| / max |b|: an error relative to the reference's scale, so that
 * tiny entries of b do not dominate. */
static inline double check_rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return num / den;
}

/* The same against a float reference. */
static inline double check_rel_err_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
        den = fabs(b[i]) > den ? fabs(b[i]) : den;
    }
    return num / den;
}

static inline int check_report(void) {
    if (check_count_ == 0) {
        fprintf(stderr, "no checks ran\n");
        return 1;
    }
    fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif

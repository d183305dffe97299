/* linear_ref.h - plain-C scalar reference of sotto_linear for every weight
 * format: one element decoded at a time (no tables shared with the fast
 * kernels beyond the format's own code tables), sums in double. Tests hold
 * the optimized kernels to it; setting SOTTO_LINEAR_REF=1 in the
 * environment makes sotto_linear/sotto_linear_acc use it (slow; debugging). */
#ifndef SOTTO_LINEAR_REF_H
#define SOTTO_LINEAR_REF_H

#include "linear.h"

/* y[n][rows] (= or, if accumulate, +=) x[n][cols] * W^T + bias. */
void sotto_linear_ref(const sotto_wmat *w, const float *bias, const float *x, int n, float *y,
                      int accumulate);

#endif

#include "threads.h"

#include <cblas.h>
#include <omp.h>

int sotto_threads_set(int n) {
    if (n <= 0) n = omp_get_num_procs();
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}

int sotto_threads_get(void) { return omp_get_max_threads(); }

/* threads.h - the CPU thread pool shared by sotto's OpenMP loops and BLAS.
 *
 * sotto links the OpenMP build of OpenBLAS, so one setting governs both.
 * The setting is process-wide; a program sets it once at start-up.
 */
#ifndef SOTTO_THREADS_H
#define SOTTO_THREADS_H

/* n <= 0 means one thread per available core. Returns the count in use. */
int sotto_threads_set(int n);
int sotto_threads_get(void);

#endif

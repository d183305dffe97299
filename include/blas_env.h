/* blas_env.h - make sure OpenBLAS runs kernels that fit the CPU.
 *
 * OpenBLAS picks its kernels once, when the library is loaded, from the
 * CPU model. CPUs newer than the library (Debian 12 ships 0.3.21) are
 * misdetected as "Prescott" and get SSE3 kernels, 2-3x slower than the
 * AVX2/AVX-512 ones. The only remedy is the OPENBLAS_CORETYPE variable, read
 * at load time, so a program must set it and re-execute itself.
 */
#ifndef SOTTO_BLAS_ENV_H
#define SOTTO_BLAS_ENV_H

/* If OPENBLAS_CORETYPE is unset and OpenBLAS chose a core older than the
 * CPU's instruction set, sets it (SkylakeX for AVX-512, Haswell for
 * AVX2+FMA) and re-executes /proc/self/exe with argv. Returns only when no
 * re-execution was needed or it failed (then the program goes on, slower). */
void sotto_blas_check_coretype(char **argv);

/* The core OpenBLAS uses ("Haswell", ...). */
const char *sotto_blas_corename(void);

#endif

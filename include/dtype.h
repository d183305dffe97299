/* dtype.h - the element types a checkpoint may hold (CTranslate2's
 * model.bin, safetensors), with their sizes and names. */
#ifndef SOTTO_DTYPE_H
#define SOTTO_DTYPE_H

#include <stddef.h>

typedef enum sotto_dtype {
    SOTTO_DT_F32 = 0,
    SOTTO_DT_F16,
    SOTTO_DT_BF16,
    SOTTO_DT_I8,
    SOTTO_DT_I16,
    SOTTO_DT_I32,
    SOTTO_DT_U8,
    SOTTO_DT_F8E4M3,
    SOTTO_DT_OTHER
} sotto_dtype;

size_t sotto_dtype_size(sotto_dtype dt);     /* bytes per element; 0 for OTHER */
const char *sotto_dtype_name(sotto_dtype dt); /* "float32", ... */

#endif

/* dtype.c - see dtype.h. */
#include "dtype.h"

size_t sotto_dtype_size(sotto_dtype dt) {
    switch (dt) {
    case SOTTO_DT_F32: return 4;
    case SOTTO_DT_F16: return 2;
    case SOTTO_DT_BF16: return 2;
    case SOTTO_DT_I8: return 1;
    case SOTTO_DT_I16: return 2;
    case SOTTO_DT_I32: return 4;
    case SOTTO_DT_U8: return 1;
    case SOTTO_DT_F8E4M3: return 1;
    default: return 0;
    }
}

const char *sotto_dtype_name(sotto_dtype dt) {
    static const char *names[] = {"float32", "float16", "bfloat16", "int8",       "int16",
                                  "int32",   "uint8",   "float8_e4m3", "other"};
    return names[dt <= SOTTO_DT_OTHER ? dt : SOTTO_DT_OTHER];
}

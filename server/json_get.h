/* json_get.h - reading fields of received JSON messages (cJSON), for every
 * part of the server that parses one. */
#ifndef SOTTO_SERVER_JSON_GET_H
#define SOTTO_SERVER_JSON_GET_H

#include <cjson/cJSON.h>

/* o[k] if it is a string, else NULL. */
static inline const char *srv_jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* o[k] if it is a number, else 0. */
static inline double srv_jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

#endif

/* lang.c - Whisper language codes and names. Codes come from the model's own
 * language tokens ("<|de|>"); the name table only lets users say "german". */
#include "log.h"
#include "model.h"
#include "transcribe.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const k_names[][2] = {
    {"en", "english"},     {"zh", "chinese"},    {"de", "german"},      {"es", "spanish"},
    {"ru", "russian"},     {"ko", "korean"},     {"fr", "french"},      {"ja", "japanese"},
    {"pt", "portuguese"},  {"tr", "turkish"},    {"pl", "polish"},      {"ca", "catalan"},
    {"nl", "dutch"},       {"ar", "arabic"},     {"sv", "swedish"},     {"it", "italian"},
    {"id", "indonesian"},  {"hi", "hindi"},      {"fi", "finnish"},     {"vi", "vietnamese"},
    {"he", "hebrew"},      {"uk", "ukrainian"},  {"el", "greek"},       {"ms", "malay"},
    {"cs", "czech"},       {"ro", "romanian"},   {"da", "danish"},      {"hu", "hungarian"},
    {"ta", "tamil"},       {"no", "norwegian"},  {"th", "thai"},        {"ur", "urdu"},
    {"hr", "croatian"},    {"bg", "bulgarian"},  {"lt", "lithuanian"},  {"la", "latin"},
    {"mi", "maori"},       {"ml", "malayalam"},  {"cy", "welsh"},       {"sk", "slovak"},
    {"te", "telugu"},      {"fa", "persian"},    {"lv", "latvian"},     {"bn", "bengali"},
    {"sr", "serbian"},     {"az", "azerbaijani"}, {"sl", "slovenian"},  {"kn", "kannada"},
    {"et", "estonian"},    {"mk", "macedonian"}, {"br", "breton"},      {"eu", "basque"},
    {"is", "icelandic"},   {"hy", "armenian"},   {"ne", "nepali"},      {"mn", "mongolian"},
    {"bs", "bosnian"},     {"kk", "kazakh"},     {"sq", "albanian"},    {"sw", "swahili"},
    {"gl", "galician"},    {"mr", "marathi"},    {"pa", "punjabi"},     {"si", "sinhala"},
    {"km", "khmer"},       {"sn", "shona"},      {"yo", "yoruba"},      {"so", "somali"},
    {"af", "afrikaans"},   {"oc", "occitan"},    {"ka", "georgian"},    {"be", "belarusian"},
    {"tg", "tajik"},       {"sd", "sindhi"},     {"gu", "gujarati"},    {"am", "amharic"},
    {"yi", "yiddish"},     {"lo", "lao"},        {"uz", "uzbek"},       {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},  {"tk", "turkmen"},     {"nn", "nynorsk"},
    {"mt", "maltese"},     {"sa", "sanskrit"},   {"lb", "luxembourgish"}, {"my", "myanmar"},
    {"bo", "tibetan"},     {"tl", "tagalog"},    {"mg", "malagasy"},    {"as", "assamese"},
    {"tt", "tatar"},       {"haw", "hawaiian"},  {"ln", "lingala"},     {"ha", "hausa"},
    {"ba", "bashkir"},     {"jw", "javanese"},   {"su", "sundanese"},   {"yue", "cantonese"},
};

int sotto_language_code(const sotto_model *m, int i, char *buf, size_t bufsz) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    if (!sotto_model_is_multilingual(m)) {
        if (i != 0) return SOTTO_E_RANGE;
        snprintf(buf, bufsz, "en");
        return SOTTO_OK;
    }
    if (i < 0 || i >= sp->n_langs) return SOTTO_E_RANGE;
    const char *s = sotto_tokenizer_token_str(sotto_model_tokenizer(m), sp->lang_begin + i);
    size_t n = s ? strlen(s) : 0;
    if (n < 5 || strncmp(s, "<|", 2) != 0 || strcmp(s + n - 2, "|>") != 0 || n - 4 >= bufsz)
        return SOTTO_E_FORMAT;
    memcpy(buf, s + 2, n - 4);
    buf[n - 4] = '\0';
    return SOTTO_OK;
}

const char *sotto_language_name(const char *code) {
    for (size_t i = 0; code && i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcasecmp(code, k_names[i][0]) == 0) return k_names[i][1];
    return code ? code : "";
}

int sotto_language_index(const sotto_model *m, const char *lang) {
    if (!lang || !*lang) return -1;
    const char *code = lang;
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++)
        if (strcasecmp(lang, k_names[i][1]) == 0) code = k_names[i][0];
    if (!sotto_model_is_multilingual(m)) return strcasecmp(code, "en") == 0 ? 0 : -1;
    const sotto_special_tokens *sp = sotto_model_special(m);
    char buf[16];
    for (int i = 0; i < sp->n_langs; i++)
        if (sotto_language_code(m, i, buf, sizeof buf) == 0 && strcasecmp(buf, code) == 0)
            return i;
    return -1;
}

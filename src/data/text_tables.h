/* src/data/text_tables.h - the tables of the CLIP tokenizer, generated from Python by
 * scripts/gen_text_tables.py into text_tables.c: character classes (the `regex` module's
 * \p{L}, \p{N}, \s under the pattern's flags, str.isspace, and the two properties of str.lower's
 * final-sigma rule), str.lower's mappings, the code points the pattern's literal letters also
 * match under IGNORECASE, and html.unescape's entities. Used only by tokenizer.c. */
#ifndef TUBELET_DATA_TEXT_TABLES_H
#define TUBELET_DATA_TEXT_TABLES_H

#include <stdint.h>

/* Class bits. LETTER, NUMBER and OTHER are the pattern's [\p{L}], [\p{N}] and [^\s\p{L}\p{N}]
 * under IGNORECASE (not complementary: U+0345 is in none); RE_SPACE is \s without flags
 * (whitespace_clean); PY_SPACE is str.isspace (strip); CASED and CASE_IGNORABLE drive the
 * final-sigma rule of str.lower. */
enum {
    TBI_TC_LETTER = 1,
    TBI_TC_NUMBER = 2,
    TBI_TC_OTHER = 4,
    TBI_TC_RE_SPACE = 8,
    TBI_TC_PY_SPACE = 16,
    TBI_TC_CASED = 32,
    TBI_TC_CASE_IGNORABLE = 64,
};

/* Code points from first up to the next run's first have these bits. */
struct tbi_class_run {
    uint32_t first;
    uint8_t bits;
};

/* A code point and its one-code-point image (str.lower; html's invalid charrefs). */
struct tbi_lower1 {
    uint32_t cp, to;
};

/* str.lower mappings to several code points (U+0130 -> i + U+0307). */
struct tbi_lowern {
    uint32_t cp;
    uint8_t n;
    uint32_t to[3];
};

/* The other code points a literal character of the pattern matches under IGNORECASE. */
struct tbi_literal_alts {
    char lit;
    uint8_t n;
    uint32_t cps[3];
};

/* An HTML5 named character reference (name as html.entities.html5 has it, with or without
 * the ';') and its replacement. Sorted by name (strcmp). */
struct tbi_entity {
    const char *name;
    uint8_t n;
    uint32_t cps[2];
};

extern const char tbi_text_unicode_version[];
extern const uint8_t tbi_text_ascii_class[128];
extern const struct tbi_class_run tbi_text_class_runs[];
extern const int tbi_text_n_class_runs;
extern const struct tbi_lower1 tbi_text_lower1[]; /* sorted by cp */
extern const int tbi_text_n_lower1;
extern const struct tbi_lowern tbi_text_lowern[];
extern const int tbi_text_n_lowern;
extern const struct tbi_literal_alts tbi_text_literal_alts[];
extern const int tbi_text_n_literal_alts;
extern const struct tbi_entity tbi_text_entities[];
extern const int tbi_text_n_entities;
extern const struct tbi_lower1 tbi_text_bad_charrefs[]; /* html._invalid_charrefs, sorted */
extern const int tbi_text_n_bad_charrefs;
extern const uint32_t tbi_text_bad_codepoints[]; /* html._invalid_codepoints, sorted */
extern const int tbi_text_n_bad_codepoints;

#endif /* TUBELET_DATA_TEXT_TABLES_H */

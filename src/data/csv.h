/* src/data/csv.h - the CSV walker and splitter every CSV reader of the project shares (the
 * annotation formats, src/data/annotations.c; the MIR sentence list, src/metrics/mir.c; the
 * classes CSV of zero-shot classification, src/train/clip_task.c), so that all of them read a
 * file as RFC 4180 and pandas do. Not public API. */
#ifndef TUBELET_DATA_CSV_H
#define TUBELET_DATA_CSV_H

#include <stddef.h>

/* A text walked record by record, in place. A record is a line, or several where a quoted
 * field holds line breaks (RFC 4180; pandas reads them so); a UTF-8 byte order mark at the
 * start is skipped. */
struct tbi_csv {
    char *p;        /* the rest of the text */
    int next_line;  /* the 1-based line the next record starts on */
    int quotes;     /* 1: quoted fields may span lines (CSV); 0: one record a line (lists) */
};

void tbi_csv_begin(struct tbi_csv *c, char *text, int quotes);
/* The next record, NUL-terminated in place without its line ending (LF or CRLF), *line the
 * line it starts on; NULL at the end. A quoted field still open at the end of the text ends
 * its record at its own line, so one stray quote costs one row, not the rest of the file (the
 * splitter then refuses that row). */
char *tbi_csv_next(struct tbi_csv *c, int *line);

/* Split a record in place into at most max fields. Double quotes at a field's start protect
 * commas and line breaks; "" inside quotes is a quote. Spaces and tabs around a field are
 * dropped (inside quotes they are kept). Returns the number of fields, or a negative
 * TBI_CSV_E* (tbi_csv_why names it). */
enum { TBI_CSV_EQUOTE = -1, TBI_CSV_EAFTER = -2, TBI_CSV_EMANY = -3 };
int tbi_csv_split(char *rec, char **fields, int max);
/* Why tbi_csv_split refused a record (code < 0), as a phrase. */
const char *tbi_csv_why(int code);

/* Read a CSV or list file whole (at most max_bytes) for tbi_csv_begin: a file holding a NUL
 * byte or starting with a UTF-16 byte order mark is TB_EFORMAT (it is not UTF-8 text, and
 * would otherwise end where its first NUL is). */
int tbi_csv_read(const char *path, char **text, size_t max_bytes);

/* Strip spaces and tabs at both ends (and a trailing CR) in place; returns the new start. */
char *tbi_csv_trim(char *s);

#endif /* TUBELET_DATA_CSV_H */

/* src/data/csv.h - the CSV line splitter and field trimming the annotation readers share
 * (src/data/annotations.c; the MIR sentence list, src/train/mir.c). Not public API. */
#ifndef TUBELET_DATA_CSV_H
#define TUBELET_DATA_CSV_H

/* Split a CSV line in place into at most max fields. Double quotes protect commas; "" inside
 * quotes is a quote. Returns the number of fields, or -1 (an unbalanced quote, text after a
 * closing quote, more than max fields). */
int tbi_csv_split(char *line, char **fields, int max);

/* Strip spaces and tabs at both ends (and a trailing CR) in place; returns the new start. */
char *tbi_csv_trim(char *s);

#endif /* TUBELET_DATA_CSV_H */

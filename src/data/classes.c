/* src/data/classes.c - a classes CSV (EPIC_100_verb_classes.csv: a header, then id,key,...
 * rows; row k names class k), read by the shared CSV splitter: the id and key columns found by
 * name where the header names them, else the first two; every row as many fields as the
 * header, the ids 0, 1, 2, ... in order. Tests: tests/test_data.c, tests/test_cli_data.c. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "data/csv.h"
#include "tubelet/data.h"

/* The id and key columns of the header (col), and its number of fields; TB_EFORMAT. */
static int classes_header(char *line, const char *path, int line_no, int *col)
{
    char *f[64];
    int n = tbi_csv_split(line, f, 64);
    if (n < 0)
        return tbi_err(TB_EFORMAT, "%s:%d: the header: %s", path, line_no,
                       n == TBI_CSV_EMANY ? "more than 64 columns" : tbi_csv_why(n));
    col[0] = col[1] = -1;
    for (int c = 0; c < n; c++)
        for (int k = 0; k < 2; k++)
            if (!strcmp(f[c], k ? "key" : "id"))
                col[k] = col[k] < 0 ? c : col[k];
    if (col[0] < 0 || col[1] < 0) {
        col[0] = 0;
        col[1] = 1;
    }
    return n < 2 ? tbi_err(TB_EFORMAT, "%s:%d: a classes CSV has id,key,... columns", path,
                           line_no) : n;
}

/* Row k: its key into *key (malloc'ed). */
static int classes_row(char *line, const char *path, int line_no, const int *col, int n_fields,
                       int k, char **key)
{
    char *f[64];
    int64_t id;
    int n = tbi_csv_split(line, f, 64);
    if (n != n_fields)
        return tbi_err(TB_EFORMAT, "%s:%d: %s, the header has %d fields", path, line_no,
                       n == TBI_CSV_EMANY || n > n_fields ? "more fields (a comma outside "
                       "quotes? a field holding one is quoted)" : n < 0 ? tbi_csv_why(n)
                       : "fewer fields", n_fields);
    if (tbi_parse_i64(f[col[0]], 0, INT32_MAX, &id) < 0 || id != k)
        return tbi_err(TB_EFORMAT, "%s:%d: expected class id %d (the classes in order), got "
                       "'%s'", path, line_no, k, f[col[0]]);
    if (!(*key = tbi_strdup(f[col[1]])))
        return tbi_err(TB_ENOMEM, "out of memory");
    return 0;
}

int tb_classes_load(const char *path, char ***keys, int *n)
{
    char *text = NULL, *line;
    struct tbi_csv csv;
    int cap = 0, rc, line_no = 0, n_fields = 0, col[2] = {0, 1};
    *keys = NULL;
    *n = 0;
    if ((rc = tbi_csv_read(path, &text, 1u << 28)) < 0)
        return rc;
    tbi_csv_begin(&csv, text, 1);
    while (rc == 0 && (line = tbi_csv_next(&csv, &line_no))) {
        char *t = tbi_csv_trim(line);
        if (!*t)
            continue;
        if (!n_fields) {
            rc = (n_fields = classes_header(t, path, line_no, col)) < 0 ? n_fields : 0;
            continue;
        }
        if (*n == cap) {
            char **g = tbi_realloc(*keys, sizeof(*g) * (size_t)(cap = cap ? 2 * cap : 64));
            if (!g) {
                rc = tbi_err(TB_ENOMEM, "out of memory");
                break;
            }
            *keys = g;
        }
        if ((rc = classes_row(t, path, line_no, col, n_fields, *n, &(*keys)[*n])) == 0)
            (*n)++;
    }
    free(text);
    if (rc == 0 && *n == 0)
        rc = tbi_err(TB_EFORMAT, "%s: no classes", path);
    if (rc < 0)
        tb_classes_free(keys, n);
    return rc;
}

void tb_classes_free(char ***keys, int *n)
{
    for (int i = 0; keys && *keys && i < *n; i++)
        free((*keys)[i]);
    if (keys) {
        free(*keys);
        *keys = NULL;
    }
    *n = 0;
}

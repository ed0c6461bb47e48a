/* src/train/labels.c - a classifier's label space: what each output of its head means. Made
 * from the run's annotation files (the classes' names where EPIC's verb and noun columns give
 * them; for actions, AVION's numbering of the "verb:noun" pairs over train + val), carried in
 * the checkpoint's metadata as one string, and checked against the files an evaluation reads,
 * so a checkpoint is scored only against labels that mean what its head learnt.
 * Tests: tests/test_train.c (eval of a checkpoint alone, a CSV of other classes refused). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/strbuf.h"
#include "train/task.h"
#include "tubelet/train.h"

static const char *const kind_names[] = {"verb", "noun", "action"};

void tb_label_space_free(struct tb_label_space **ps)
{
    if (!ps || !*ps)
        return;
    struct tb_label_space *s = *ps;
    for (int i = 0; s->names && i < s->n_classes; i++)
        free(s->names[i]);
    free(s->names);
    free(s->verb);
    free(s->noun);
    free(s);
    *ps = NULL;
}

static struct tb_label_space *space_new(enum tb_label_kind kind, int n)
{
    struct tb_label_space *s = tbi_calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->kind = kind;
    s->n_classes = n;
    s->names = tbi_calloc((size_t)n, sizeof(*s->names));
    if (kind == TB_LABEL_ACTION) {
        s->verb = tbi_malloc(sizeof(int) * (size_t)n);
        s->noun = tbi_malloc(sizeof(int) * (size_t)n);
    }
    if (!s->names || (kind == TB_LABEL_ACTION && (!s->verb || !s->noun))) {
        tb_label_space_free(&s);
        return NULL;
    }
    for (int i = 0; kind == TB_LABEL_ACTION && i < n; i++)
        s->verb[i] = s->noun[i] = -1;
    return s;
}

/* Item it's name of its class of kind k (an action's: "verb:noun" of its names), into buf;
 * NULL where the file names none. */
static const char *item_name(const struct tb_ann_item *it, enum tb_label_kind k, char *buf,
                             size_t size)
{
    if (k == TB_LABEL_VERB)
        return it->verb_name;
    if (k == TB_LABEL_NOUN)
        return it->noun_name;
    if (!it->verb_name || !it->noun_name)
        return NULL;
    snprintf(buf, size, "%s:%s", it->verb_name, it->noun_name);
    return buf;
}

int tb_label_space_build(struct tb_label_space **out, enum tb_label_kind kind, int n_classes,
                         const struct tb_annotations *const *sets, int n_sets)
{
    *out = NULL;
    if (n_classes < 1 || (unsigned)kind > TB_LABEL_ACTION)
        return tbi_err(TB_EINVAL, "a label space of %d %s classes", n_classes,
                       (unsigned)kind > TB_LABEL_ACTION ? "unknown" : kind_names[kind]);
    struct tb_label_space *s = space_new(kind, n_classes);
    if (!s)
        return tbi_err(TB_ENOMEM, "out of memory");
    char buf[512];
    for (int k = 0; k < n_sets; k++)
        for (int i = 0; sets[k] && i < sets[k]->n_items; i++) {
            const struct tb_ann_item *it = &sets[k]->items[i];
            int y = tb_item_label(it, kind);
            if (y < 0 || y >= n_classes)
                continue; /* the model's classes are the caller's to check */
            if (kind == TB_LABEL_ACTION) {
                s->verb[y] = it->verb;
                s->noun[y] = it->noun;
            }
            const char *name = item_name(it, kind, buf, sizeof(buf));
            if (name && !s->names[y] && !(s->names[y] = tbi_strdup(name))) {
                tb_label_space_free(&s);
                return tbi_err(TB_ENOMEM, "out of memory");
            }
            if (name && strcmp(name, s->names[y])) {
                int rc = tbi_err(TB_EINVAL, "%s:%d: %s class %d is '%s' here, '%s' in an "
                                 "earlier row: one class, two names", sets[k]->path, it->line,
                                 kind_names[kind], y, name, s->names[y]);
                tb_label_space_free(&s);
                return rc;
            }
        }
    *out = s;
    return 0;
}

int tb_label_space_check(const struct tb_label_space *s, const struct tb_annotations *a)
{
    char buf[512];
    for (int i = 0; i < a->n_items; i++) {
        const struct tb_ann_item *it = &a->items[i];
        int y = tb_item_label(it, s->kind);
        const char *name = item_name(it, s->kind, buf, sizeof(buf));
        if (y < 0 || y >= s->n_classes)
            return tbi_err(TB_ERANGE, "%s:%d: %s %d is not one of the model's %d classes",
                           a->path, it->line, kind_names[s->kind], y, s->n_classes);
        if (s->kind == TB_LABEL_ACTION && (s->verb[y] != it->verb || s->noun[y] != it->noun))
            return tbi_err(TB_EINVAL, "%s:%d: action %d is verb %d, noun %d here, but verb %d, "
                           "noun %d to the model", a->path, it->line, y, it->verb, it->noun,
                           s->verb[y], s->noun[y]);
        if (name && s->names[y] && strcmp(name, s->names[y]))
            return tbi_err(TB_EINVAL, "%s:%d: %s class %d is '%s' here, but '%s' to the model: "
                           "another class list", a->path, it->line, kind_names[s->kind], y,
                           name, s->names[y]);
    }
    return 0;
}

int tb_label_space_map_actions(const struct tb_label_space *s, struct tb_annotations *a)
{
    if (s->kind != TB_LABEL_ACTION)
        return tbi_err(TB_EINVAL, "a %s label space numbers no actions", kind_names[s->kind]);
    for (int i = 0; i < a->n_items; i++) {
        struct tb_ann_item *it = &a->items[i];
        it->action = -1;
        for (int y = 0; y < s->n_classes && it->action < 0; y++)
            if (s->verb[y] == it->verb && s->noun[y] == it->noun)
                it->action = y;
        if (it->action < 0)
            return tbi_err(TB_EINVAL, "%s:%d: the action verb %d, noun %d is none of the "
                           "model's %d (its training and validation sets had no such pair)",
                           a->path, it->line, it->verb, it->noun, s->n_classes);
    }
    return 0;
}

/* Names travel percent-encoded: the separators, '%', '"', '\\' and control bytes. */
static void put_name(struct tbi_sb *sb, const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || strchr("%|;,\"\\", *p))
            tbi_sb_printf(sb, "%%%02X", *p);
        else
            tbi_sb_printf(sb, "%c", *p);
}

void tbi_label_space_meta(struct tbi_sb *sb, const struct tb_label_space *s)
{
    tbi_sb_printf(sb, ",\"label_space\":\"%s;%d;", kind_names[s->kind], s->n_classes);
    for (int i = 0; i < s->n_classes; i++) {
        tbi_sb_printf(sb, "%s", i ? "|" : "");
        if (s->names[i])
            put_name(sb, s->names[i]);
    }
    tbi_sb_printf(sb, ";");
    for (int i = 0; s->kind == TB_LABEL_ACTION && i < s->n_classes; i++)
        tbi_sb_printf(sb, "%s%d:%d", i ? "," : "", s->verb[i], s->noun[i]);
    tbi_sb_printf(sb, "\"");
}

static int hex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One name of the list from p up to '|' or ';', decoded (NULL when empty); *end after it. */
static int take_name(const char *p, const char **end, char **out)
{
    size_t n = strcspn(p, "|;");
    *out = NULL;
    *end = p + n;
    if (!n)
        return 0;
    char *d = tbi_malloc(n + 1), *q = d;
    if (!d)
        return TB_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (p[i] == '%' && i + 2 < n && (h = hex(p[i + 1])) >= 0 && (l = hex(p[i + 2])) >= 0) {
            *q++ = (char)(h * 16 + l);
            i += 2;
        } else {
            *q++ = p[i];
        }
    }
    *q = '\0';
    *out = d;
    return 0;
}

int tbi_label_space_parse(struct tb_label_space **out, const char *text, const char *path)
{
    char kind[16];
    int n = 0, used = 0, k;
    *out = NULL;
    if (sscanf(text, "%15[a-z];%d;%n", kind, &n, &used) != 2 || !used || n < 1 ||
        n > (1 << 24))
        return tbi_err(TB_EFORMAT, "%s: a malformed label space in its metadata", path);
    for (k = 0; k <= TB_LABEL_ACTION && strcmp(kind, kind_names[k]); k++)
        ;
    if (k > TB_LABEL_ACTION)
        return tbi_err(TB_EFORMAT, "%s: a label space of kind '%s'", path, kind);
    struct tb_label_space *s = space_new((enum tb_label_kind)k, n);
    if (!s)
        return tbi_err(TB_ENOMEM, "out of memory");
    const char *p = text + used;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        if ((rc = take_name(p, &p, &s->names[i])) < 0)
            break;
        if (*p != (i + 1 < n ? '|' : ';'))
            rc = tbi_err(TB_EFORMAT, "%s: the label space names %d of its %d classes", path, i + 1,
                         n);
        else
            p++;
    }
    for (int i = 0; rc == 0 && s->kind == TB_LABEL_ACTION && i < n; i++) {
        int used_i = 0;
        if (sscanf(p, "%d:%d%n", &s->verb[i], &s->noun[i], &used_i) != 2 || s->verb[i] < 0 ||
            s->noun[i] < 0 || p[used_i] != (i + 1 < n ? ',' : '\0'))
            rc = tbi_err(TB_EFORMAT, "%s: the label space's action %d is malformed", path, i);
        p += used_i + (i + 1 < n);
    }
    if (rc < 0) {
        tb_label_space_free(&s);
        return rc == TB_ENOMEM ? tbi_err(TB_ENOMEM, "out of memory") : rc;
    }
    *out = s;
    return 0;
}

/* src/core/choices.h - a list of names written "a|b|c", as a flag's metavar lists its values
 * and the settings table an enum's (src/cli/flags.c, src/train/settings.c): the name at an
 * index, and the index of a name. */
#ifndef TUBELET_CORE_CHOICES_H
#define TUBELET_CORE_CHOICES_H

#include <string.h>

/* The i-th name of list (its length into *len), or NULL past the last or for i < 0. */
static inline const char *tbi_choice_at(const char *list, int i, size_t *len)
{
    const char *p = list;
    for (int k = 0; k < i && *p; k++)
        p += strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
    *len = strcspn(p, "|");
    return i >= 0 && *p ? p : NULL;
}

/* name's index in list, or -1. */
static inline int tbi_choice_index(const char *list, const char *name)
{
    size_t len, n = strlen(name);
    const char *p;
    for (int i = 0; (p = tbi_choice_at(list, i, &len)) != NULL; i++)
        if (len == n && !strncmp(p, name, n))
            return i;
    return -1;
}

#endif /* TUBELET_CORE_CHOICES_H */

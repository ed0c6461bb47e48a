/* tests/ek100_split.c - see ek100_split.h. */
#include <stdio.h>

#include "ek100_split.h"
#include "tubelet/rng.h"

/* An index of 0 .. n-1 with probability proportional to 1 / (k + 1): cdf's cumulative sums. */
static int zipf(tb_rng *g, const double *cdf, int n)
{
    double u = tb_rng_uniform(g) * cdf[n - 1];
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

int tbt_write_ek100_split(const char *path, int n, int distinct)
{
    double cv[97], cn[300];
    for (int k = 0; k < 300; k++) {
        if (k < 97)
            cv[k] = (k ? cv[k - 1] : 0) + 1.0 / (k + 1);
        cn[k] = (k ? cn[k - 1] : 0) + 1.0 / (k + 1);
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs("narration_id,participant_id,video_id,narration_timestamp,start_timestamp,"
          "stop_timestamp,start_frame,stop_frame,narration,verb,verb_class,noun,noun_class,"
          "all_nouns,all_noun_classes\n", f);
    for (int i = 0; i < n; i++) {
        tb_rng g;
        tb_rng_init_for(&g, 1, TB_RNG_TEST, 100, (uint64_t)i);
        int v = zipf(&g, cv, 97), a = zipf(&g, cn, 300), b = a;
        if (tb_rng_uniform(&g) < 0.1)
            b = zipf(&g, cn, 300);
        int lo = a < b ? a : b, hi = a < b ? b : a;
        char narr[96], nouns[32];
        if (lo == hi)
            snprintf(nouns, sizeof(nouns), "%d", lo);
        else
            snprintf(nouns, sizeof(nouns), "%d, %d", lo, hi);
        if (distinct)
            snprintf(narr, sizeof(narr), "verb%d noun%d clip%d", v, lo, i);
        else if (lo == hi)
            snprintf(narr, sizeof(narr), "verb%d noun%d", v, lo);
        else
            snprintf(narr, sizeof(narr), "verb%d noun%d and noun%d", v, lo, hi);
        fprintf(f, "P01_01_%d,P01,P01_01,00:00:01.00,00:00:01.00,00:00:02.00,30,60,%s,v,%d,n,%d,"
                "\"['n']\",\"[%s]\"\n", i, narr, v, lo, nouns);
    }
    return fclose(f);
}

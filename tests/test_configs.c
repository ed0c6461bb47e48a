/* tests/test_configs.c - configs/, one file per published AVION run: each parses with the
 * data flags on the command line, and its --print-config fed back prints the same; each runs
 * 2 steps of its task on a tiny synthetic dataset (model, clip size, batch and epochs cut down
 * on the command line, which wins over the file), and the run directory's config.txt is that
 * --print-config, and its evaluation tests with the views and crops the recipe states. The
 * fine-tuning recipes start from the pretraining runs' checkpoints; the LLM-augmented
 * pretraining trains from a caption-list CSV. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include "tb_test.h"
#include "tubelet/data.h"

struct recipe {
    const char *file;     /* under configs/ */
    const char *data;     /* --train/--val/--format flags on the synthetic data */
    const char *tiny;     /* the task's own size flags */
    const char *init;     /* --init: a run of an earlier recipe (its file), "" none, NULL as is */
    const char *more;     /* more flags for the cut-down run */
    const char *init_new; /* what the init log names as new, for an --init run */
    const char *says;     /* a line its run prints, or NULL */
};

static char train_csv[4400], val_csv[4400], narr_csv[4400], llm_csv[4400], k400_list[4400];

/* The synthetic EPIC rows as a narration CSV (video_id,start_s,end_s,text), the form
 * docs/RECIPES.md makes of Ego4D's narrations. */
static void write_narrations(const char *epic, const char *path)
{
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&a, epic, &o), 0);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fprintf(f, "video_id,start_s,end_s,text\n");
    for (int i = 0; a && f && i < a->n_items; i++)
        fprintf(f, "%s,%.2f,%.2f,%s\n", a->items[i].video, a->items[i].start_s,
                a->items[i].end_s, a->items[i].text);
    if (f)
        fclose(f);
    tb_ann_free(&a);
}

/* The same rows with a caption list each (video_id,start_s,end_s,captions: a JSON list), the
 * form docs/RECIPES.md makes of LaViLa's rephrased and narrated captions. */
static void write_caption_lists(const char *epic, const char *path)
{
    struct tb_annotations *a = NULL;
    struct tb_ann_opts o = {.format = TB_ANN_EPIC};
    CHECK_EQ(tb_ann_load(&a, epic, &o), 0);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f)
        fprintf(f, "video_id,start_s,end_s,captions\n");
    for (int i = 0; a && f && i < a->n_items; i++)
        fprintf(f, "%s,%.2f,%.2f,\"[\"\"%s\"\", \"\"C %s, then stops\"\"]\"\n",
                a->items[i].video, a->items[i].start_s, a->items[i].end_s, a->items[i].text,
                a->items[i].text);
    if (f)
        fclose(f);
    tb_ann_free(&a);
}

/* Each prepared video once, labelled 0..3: VideoMAE's list ("path label"). */
static void write_kinetics(const char *path)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (int i = 0; f && i < 4; i++)
        fprintf(f, "P01_0%d.mp4 %d\n", i + 1, i);
    if (f)
        fclose(f);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static int n_evaluated; /* recipes whose run evaluated */

static void run_recipe(const struct recipe *r, const char *data)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char cfg[4400], flags[6000], run[4400], dump[4400], init[4600] = "", *out = NULL,
         *out2 = NULL;
    tbt_case = r->file;
    snprintf(cfg, sizeof(cfg), "%s/configs/%s", TB_SOURCE_DIR, r->file);
    snprintf(run, sizeof(run), "%s/run-%s", d, r->file);
    snprintf(dump, sizeof(dump), "%s/dump-%s", d, r->file);
    if (r->init && !r->init[0])
        snprintf(init, sizeof(init), "--init ''");
    else if (r->init)
        snprintf(init, sizeof(init), "--init %s/run-%s/last.safetensors", d, r->init);
    snprintf(flags, sizeof(flags), "--config %s --data %s %s", cfg, data, r->data);

    /* It parses, and what it prints reads back to the same text. */
    int rc = tbt_run(&out, 30, "%s train %s --print-config", t, flags);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "# tubelet train ");
    FILE *f = fopen(dump, "w");
    if (f) {
        fputs(out ? out : "", f);
        fclose(f);
    }
    rc = tbt_run(&out2, 30, "%s train --config %s --print-config", t, dump);
    CHECK_MSG(rc == 0 && out && out2 &&
                  !strcmp(tbt_config_values(out), tbt_config_values(out2)),
              "--print-config of its dump differs:\n%s\n---\n%s", out, out2);
    free(out);
    free(out2);

    /* Two steps of the recipe, cut down; the run's config.txt is the resolved config. */
    char small[3000];
    int frames = strstr(r->tiny, "--frames") || strstr(r->more, "--frames"); /* given once */
    snprintf(small, sizeof(small), "--dim 32 --depth 1 --heads 2 %s --size 32 --epochs 1 "
             "--workers 2 --log-every 1 %s %s %s", frames ? "" : "--frames 4", r->tiny, init,
             r->more);
    rc = tbt_run(&out2, 30, "%s train %s %s --out %s --print-config", t, flags, small, run);
    CHECK_MSG(rc == 0, "%s", out2);
    rc = tbt_run(&out, 120, "%s train %s %s --out %s", t, flags, small, run);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_HAS(out, "step 2/2 ");
    CHECK_STR_HAS(out, "/last.safetensors after");
    if (r->says)
        CHECK_STR_HAS(out, r->says);
    if (r->init_new) {
        char want[4700];
        snprintf(want, sizeof(want), "run-%s/last.safetensors; new: %s\n", r->init, r->init_new);
        CHECK_STR_HAS(out, want);
    }
    free(out);
    char path[4500];
    snprintf(path, sizeof(path), "%s/config.txt", run);
    out = tbt_read(path, NULL);
    CHECK_MSG(out && out2 && !strcmp(out, out2), "config.txt differs from --print-config:\n%s"
              "\n---\n%s", out, out2);
    free(out);
    free(out2);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *metrics = tbt_read(path, NULL);
    CHECK_EQ(count(metrics, "{\"step\": "), 2);
    /* the final evaluation tests as the recipe states: its views and crops */
    snprintf(path, sizeof(path), "%s/config.txt", run);
    char *resolved = tbt_read(path, NULL);
    const char *v = resolved ? strstr(resolved, "\nval-views = ") : NULL;
    const char *c = resolved ? strstr(resolved, "\nval-crops = ") : NULL;
    int views = v ? atoi(v + 13) : -1, crops = c ? atoi(c + 13) : -1;
    free(resolved);
    char want[64];
    snprintf(want, sizeof(want), "\"views\": %d, \"crops\": %d", views, crops);
    const char *ev = metrics ? strstr(metrics, "{\"eval_epoch\": 1, ") : NULL;
    CHECK_MSG(!ev || (views >= 1 && strstr(ev, want)), "%s: wanted %s in the evaluation line of "
              "%s", r->file, want, metrics);
    n_evaluated += ev != NULL; /* the pretraining recipes evaluate nothing here */
    free(metrics);
}

/* The learning rate of RUN/metrics.jsonl's first step, or -1. */
static double first_lr(const char *run)
{
    char path[4500];
    snprintf(path, sizeof(path), "%s/metrics.jsonl", run);
    char *m = tbt_read(path, NULL);
    const char *step = m ? strstr(m, "{\"step\": ") : NULL;
    const char *lr = step ? strstr(step, "\"lr\": ") : NULL;
    double v = lr ? atof(lr + 6) : -1;
    free(m);
    return v;
}

/* S1 of issue 42: --lr on the command line wins over a recipe's blr, and the run says so; the
 * first step (no warmup) runs at it. The MAE recipe and the classification one. */
static void lr_over_blr(const char *data, const char *k400, const char *epic)
{
    const char *t = tbt_tubelet(), *d = tbt_dir();
    struct {
        const char *file, *set, *more;
    } runs[] = {
        {"avion-videomae-pretrain.cfg", k400, "--dec-dim 32 --dec-depth 1 --dec-heads 2"},
        {"avion-ek100-cls.cfg", epic, "--init %s/run-avion-lavila-pretrain.cfg/"
         "last.safetensors"},
    };
    for (int i = 0; i < 2; i++) {
        char more[4600], run[4600], *out = NULL;
        tbt_case = runs[i].file;
        snprintf(more, sizeof(more), runs[i].more, d);
        snprintf(run, sizeof(run), "%s/lr-%s", d, runs[i].file);
        int rc = tbt_run(&out, 120, "%s train --config %s/configs/%s --data %s %s --dim 32 "
                         "--depth 1 --heads 2 --frames 4 --size 32 --epochs 1 --workers 2 "
                         "--log-every 1 --warmup-epochs 0 --lr 0.0003 %s --out %s", t,
                         TB_SOURCE_DIR, runs[i].file, data, runs[i].set, more, run);
        CHECK_MSG(rc == 0, "%s", out);
        CHECK_STR_HAS(out, "peak lr 0.0003 (--lr, from the command line)");
        CHECK_STR_HAS(out, "is not used: the later source wins");
        double lr = first_lr(run);
        CHECK_MSG(fabs(lr - 0.0003) < 1e-9, "%s: the first step ran at lr %g, not --lr 0.0003",
                  runs[i].file, lr);
        free(out);
    }
}

int main(void)
{
    tbt_begin("configs");
    const char *t = tbt_tubelet(), *d = tbt_dir();
    char data[4200], *out = NULL;
    snprintf(data, sizeof(data), "%s/data", d);
    snprintf(train_csv, sizeof(train_csv), "%s/syn/annotations/EPIC_100_train.csv", d);
    snprintf(val_csv, sizeof(val_csv), "%s/syn/annotations/EPIC_100_validation.csv", d);
    snprintf(narr_csv, sizeof(narr_csv), "%s/narrations.csv", d);
    snprintf(llm_csv, sizeof(llm_csv), "%s/caption_lists.csv", d);
    snprintf(k400_list, sizeof(k400_list), "%s/k400.txt", d);
    int rc = tbt_run(&out, 300, "%s synth --out %s/syn --videos 4 --seconds 20 --size 96x64 && "
                     "%s prep %s/syn/videos/*.mp4 --out %s --short-side 48 --preset veryfast",
                     t, d, t, d, data);
    CHECK_MSG(rc == 0, "%s", out);
    free(out);
    if (rc)
        TBT_EXIT();
    write_narrations(train_csv, narr_csv);
    write_caption_lists(train_csv, llm_csv);
    write_kinetics(k400_list);

    /* 18 training rows (batch 8) or 4 videos (batch 2): 2 steps an epoch. */
    char epic[9000], narr[4600], llm[4600], k400[9400],
        k400_pre[4600]; /* pretraining reads no --val */
    snprintf(epic, sizeof(epic), "--train %s --val %s --batch 8", train_csv, val_csv);
    snprintf(narr, sizeof(narr), "--train %s --batch 8", narr_csv);
    snprintf(llm, sizeof(llm), "--train %s --batch 8", llm_csv);
    snprintf(k400, sizeof(k400), "--train %s --val %s --batch 2", k400_list, k400_list);
    snprintf(k400_pre, sizeof(k400_pre), "--train %s --batch 2", k400_list);
    const char *clip = "--embed 16 --text-width 32 --text-heads 2 --text-depth 1 --context 16";
    const struct recipe recipes[] = {
        {"avion-lavila-pretrain.cfg", narr, clip, "", "", NULL, NULL},
        /* the LLM-augmented run: a caption drawn from each clip's list at every visit */
        {"avion-lavila-pretrain-llm.cfg", llm, clip, "", "", NULL,
         "36 captions for 18 clips, one drawn from its clip's list at every visit"},
        {"avion-ek100-mir.cfg", epic, clip, "avion-lavila-pretrain.cfg", "--frames 8",
         "none"},
        /* 8 frames from the pretraining's 4: its temporal embedding inflated */
        {"avion-ek100-cls.cfg", epic, "--frames 8", "avion-lavila-pretrain.cfg", "",
         "head.weight, head.bias"},
        {"avion-videomae-pretrain.cfg", k400_pre, "--dec-dim 32 --dec-depth 1 --dec-heads 2",
         NULL, "", NULL},
        {"avion-videomae-k400-ft.cfg", k400, "", "avion-videomae-pretrain.cfg", "",
         "fc_norm.weight, fc_norm.bias, head.weight, head.bias"},
    };
    for (size_t i = 0; i < sizeof(recipes) / sizeof(recipes[0]); i++)
        run_recipe(&recipes[i], data);
    lr_over_blr(data, k400_pre, epic);
    tbt_case = "evaluations as the recipes state";
    CHECK_MSG(n_evaluated >= 3, "only %d recipes evaluated (EK-100 CLS and MIR, Kinetics "
              "fine-tuning should)", n_evaluated);

    /* Every file in configs/ is one of the above. */
    tbt_case = "configs/";
    rc = tbt_run(&out, 10, "ls %s/configs/*.cfg | wc -l", TB_SOURCE_DIR);
    CHECK_MSG(rc == 0 && out && atoi(out) == (int)(sizeof(recipes) / sizeof(recipes[0])),
              "configs/ holds %s files", out);
    free(out);

    /* CLS's tower: a clip checkpoint's visual.* weights do not fit timm's ViT. */
    tbt_case = "cls-backbone";
    rc = tbt_run(&out, 60, "%s train --config %s/configs/avion-ek100-cls.cfg --data %s %s "
                 "--dim 32 --depth 1 --heads 2 --frames 4 --size 32 --epochs 1 "
                 "--cls-backbone vit --init %s/run-avion-lavila-pretrain.cfg/"
                 "last.safetensors --out %s/cls-from-clip", t, TB_SOURCE_DIR, data, epic, d, d);
    CHECK_MSG(rc != 0 && out && strstr(out, "holds none of this model's block weights"),
              "%s", out);
    free(out);
    TBT_EXIT();
}

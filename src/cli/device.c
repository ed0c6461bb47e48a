/* src/cli/device.c - where a command runs: --device, --backend and --precision to the
 * backend's name and the model's dtype, and the line that says which (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tubelet/dist.h"

/* Rank 0, or no launcher: the process that speaks. */
static int lead_process(void)
{
    struct tb_launch l;
    return tb_launch_detect(&l) < 0 || l.rank == 0;
}

static char said[512]; /* cli_device's choice, for cli_device_say */

int cli_device(const char *cmd, const char *device, const char *backend, const char *precision,
               const char **backend_out, enum tb_dtype *dtype)
{
    const char *name = backend;
    char why[256] = "--backend";
    if (!name[0]) {
        if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "auto")) {
            fprintf(stderr, "tubelet %s: --device is cpu, cuda or auto\n", cmd);
            return 2;
        }
        name = strcmp(device, "auto") ? device : "cpu";
        snprintf(why, sizeof(why), "--device %s", device);
        if (!strcmp(device, "auto")) {
            int rc = tb_backend_probe("cuda");
            name = rc ? "cpu" : "cuda";
            snprintf(why, sizeof(why), "--device auto: %s", rc ? tb_errmsg() : "a GPU is found");
        }
    }
    int rc = tb_backend_probe(name);
    if (rc < 0) {
        fprintf(stderr, "tubelet %s: %s (%s)\n", cmd, tb_errmsg(), why);
        return 2;
    }
    int cuda = !strncmp(name, "cuda", 4);
    if (!strcmp(precision, "auto"))
        *dtype = cuda ? TB_DTYPE_BF16 : TB_DTYPE_F32;
    else if (cli_precision(precision, dtype) < 0) {
        fprintf(stderr, "tubelet %s: --precision is auto, fp32 or bf16\n", cmd);
        return 2;
    }
    snprintf(said, sizeof(said), "backend %s (%s), precision %s", name, why,
             *dtype == TB_DTYPE_BF16 ? "bf16" : "fp32");
    *backend_out = name;
    return 0;
}

void cli_device_say(void)
{
    if (said[0] && lead_process())
        fprintf(stderr, "tubelet: info: %s\n", said);
    said[0] = '\0';
}

int cli_precision(const char *name, enum tb_dtype *out)
{
    if (!strcmp(name, "fp32"))
        *out = TB_DTYPE_F32;
    else if (!strcmp(name, "bf16"))
        *out = TB_DTYPE_BF16;
    else
        return -1;
    return 0;
}

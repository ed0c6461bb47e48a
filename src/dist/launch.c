/* src/dist/launch.c - who started this process, read once from the launchers' environment
 * variables (dist.h's tb_launch_detect). The one place that reads them: the process group
 * (dist.c), the device choice (the local rank) and the CLI's "lead process" all ask here.
 * Tests: tests/test_launch.c. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"
#include "tubelet/dist.h"

/* The integer in variable var, or def where it is unset; an error naming it where it is set to
 * anything but a whole number in [lo, INT_MAX]. */
static int env_int(const char *var, int def, int lo, int *out)
{
    const char *s = getenv(var);
    *out = def;
    if (!s)
        return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > INT_MAX)
        return tbi_err(TB_EINVAL, "the launcher's variable %s=\"%s\" is not a whole number of at "
                       "least %d", var, s, lo);
    *out = (int)v;
    return 0;
}

/* One launcher's variables: rank, size, local rank, local size (NULL: not given). */
struct vars {
    enum tb_launcher kind;
    const char *name;
    const char *rank, *world, *local_rank, *local_world;
    int mpi;
};

static const struct vars launchers[] = {
    /* Open MPI's mpirun/mpiexec (and prterun) */
    {TB_LAUNCH_MPI, "mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", 1},
    /* MPICH's and Intel MPI's Hydra */
    {TB_LAUNCH_MPI, "mpiexec (PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
     1},
    /* srun --mpi=pmix: PMIx gives the rank, Slurm the rest */
    {TB_LAUNCH_MPI, "srun (PMIx)", "PMIX_RANK", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL, 1},
    /* torchrun (and any launcher of PyTorch's env:// convention) */
    {TB_LAUNCH_TORCHRUN, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", 0},
    /* srun without MPI: a job step's tasks (a batch script itself has no SLURM_STEP_NUM_TASKS) */
    {TB_LAUNCH_SLURM, "srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL, 0},
};

int tb_launch_detect(struct tb_launch *l)
{
    memset(l, 0, sizeof(*l));
    l->world = l->local_world = 1;
    l->name = "";
    const struct vars *v = NULL;
    /* MPI's names are its own; torchrun's and srun's count only with their size: RANK alone
     * is too common a name, and a batch script has Slurm's job variables but no step. */
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]) && !v; i++)
        if (getenv(launchers[i].rank) && (launchers[i].mpi || getenv(launchers[i].world)))
            v = &launchers[i];
    if (!v)
        return 0;
    l->kind = v->kind;
    l->name = v->name;
    l->mpi = v->mpi;
    /* PMIx without Slurm's count: MPI_Init says the size (0 until then). */
    TBI_TRY(env_int(v->rank, 0, 0, &l->rank));
    TBI_TRY(env_int(v->world, 0, 1, &l->world));
    if (l->world && l->rank >= l->world)
        return tbi_err(TB_EINVAL, "%s: rank %d (%s) is not below the size %d (%s)", v->name,
                       l->rank, v->rank, l->world, v->world);
    TBI_TRY(env_int(v->local_rank, 0, 0, &l->local_rank));
    if (v->local_world)
        TBI_TRY(env_int(v->local_world, 0, 1, &l->local_world));
    else
        l->local_world = 0; /* not said */
    if (l->local_world && l->local_rank >= l->local_world)
        return tbi_err(TB_EINVAL, "%s: local rank %d (%s) is not below the local size %d (%s)",
                       v->name, l->local_rank, v->local_rank, l->local_world, v->local_world);
    /* The meeting point of processes that no MPI connects (torchrun's; set by hand for srun). */
    const char *addr = getenv("MASTER_ADDR");
    if (addr && strlen(addr) >= sizeof(l->addr))
        return tbi_err(TB_EINVAL, "MASTER_ADDR is %zu characters long", strlen(addr));
    if (addr)
        snprintf(l->addr, sizeof(l->addr), "%s", addr);
    /* Where torchrun's agent serves its own store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE,
     * newer PyTorch), the group meets at the port after it; TUBELET_PORT names one outright. */
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    const char *port_var = getenv("TUBELET_PORT") ? "TUBELET_PORT" : "MASTER_PORT";
    TBI_TRY(env_int(port_var, 0, 1, &l->port));
    if (l->port && agent && !strcasecmp(agent, "true") && port_var[0] == 'M')
        l->port++;
    if (l->port > 65535)
        return tbi_err(TB_EINVAL, "%s=%d is not a TCP port", port_var, l->port);
    return 0;
}

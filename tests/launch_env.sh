#!/bin/sh
# tests/launch_env.sh N torchrun|srun CMD [ARGS...] - starts N processes of CMD on this machine
# with the variables torchrun or srun (without MPI) give their processes, as recorded from
# each (torchrun: PyTorch's elastic agent; srun: Slurm's job-step variables), meeting at a
# port of this machine; exits 0 when all N exit 0. For tests where the launcher itself is
# missing (test_dist uses torchrun itself where a working one is found).
n=$1 kind=$2
shift 2
port=$((20000 + $$ % 30000))
pids=
r=0
while [ "$r" -lt "$n" ]; do
    case $kind in
    torchrun)
        RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
            ROLE_RANK=$r ROLE_WORLD_SIZE=$n TORCHELASTIC_RUN_ID=test$$ \
            MASTER_ADDR=localhost MASTER_PORT=$port "$@" &
        ;;
    srun)
        SLURM_PROCID=$r SLURM_STEP_NUM_TASKS=$n SLURM_NTASKS=$n SLURM_LOCALID=$r \
            SLURM_NODEID=0 SLURM_STEP_ID=0 SLURM_JOB_ID=$$ \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
        ;;
    *)
        echo "launch_env.sh: torchrun or srun, not $kind" >&2
        exit 2
        ;;
    esac
    pids="$pids $!"
    r=$((r + 1))
done
rc=0
for p in $pids; do
    wait "$p" || rc=1
done
exit $rc

#!/usr/bin/env bash
#SBATCH --job-name=spate
#SBATCH --array=0-3
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --output=spate-%A_%a.out
#
# One shard of a sharded spate run per Slurm array task: task I of N runs
#   spate smtp $TARGET --shard auto --start-at $START_AT --start-file $RESULTS/start \
#         -o $RESULTS/shard-I $SPATE_OPTS "$@"
# and all N wait for one wall-clock start, so their seconds line up. --shard auto reads
# SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT (or SLURM_PROCID/SLURM_NTASKS under srun), and
# the run id all shards share is the array's job id (SLURM_ARRAY_JOB_ID, as slurm-JOBID).
# Each shard takes its share of --users, --count, --rate and --stages: give the totals.
#
# Submit the array, then the merge as a job that waits for it (RESULTS must be on storage
# every node sees, and the same for both jobs; sbatch passes the environment on):
#
#   export TARGET=mx.example.test:25 RESULTS=$PWD/runs/smtp-1 SPATE_OPTS='--users 200 --duration 10m'
#   JOBID=$(sbatch --parsable --array=0-3 examples/slurm/spate-array.sh)
#   sbatch --dependency=afterok:$JOBID --output="$RESULTS/merge.out" \
#          --wrap "spate merge $RESULTS/shard-* -o $RESULTS/merged"
#   # later: spate report $RESULTS/merged
#
# afterok: the merge runs only if every shard exited 0. If one failed, the merge job is
# left pending with reason DependencyNeverSatisfied (scancel it; clusters with
# DependencyParameters=kill_invalid_depend cancel it themselves). The glob stays quoted at
# submission, so it is expanded when the merge runs, after the shards exist.
#
# The number of shards is the array's size: --array=0-7 makes 8 shards, nothing else to
# change. All tasks must run at the same time: an array whose tasks cannot all start
# together (a throttle like --array=0-7%4, or too few free nodes) starts the late ones
# after the shared start, and their seconds no longer line up with the others'. Where
# that is a risk, use one allocation with srun (below), which starts all tasks together.
#
# The srun variant: one job of 4 tasks (SLURM_PROCID 0..3 of SLURM_NTASKS=4), this same
# script as each task's command (run id: slurm-$SLURM_JOB_ID):
#
#   JOBID=$(sbatch --parsable --ntasks=4 --output="$RESULTS/srun.out" \
#           --wrap "srun $PWD/examples/slurm/spate-array.sh")
#   # or inside an allocation (salloc -n 4):  srun -n 4 examples/slurm/spate-array.sh
#   sbatch --dependency=afterok:$JOBID --wrap "spate merge $RESULTS/shard-* -o $RESULTS/merged"
#
# (On a node with fewer CPUs than tasks, give sbatch/srun --overcommit.)
#
# A task that is requeued finds its shard directory already written and spate refuses to
# overwrite it (exit 2): submit with --no-requeue, or start a new run in a new RESULTS.
set -euo pipefail

# ---- what to adapt (each may also come from the environment at submission) -------------
TARGET=${TARGET:-mx.example.test:25}        # the server under test (HOST:PORT)
SPATE=${SPATE:-spate}                       # the spate binary (a path, or on the PATH)
RESULTS=${RESULTS:-$PWD/spate-${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-run}}} # shared storage
START_AT=${START_AT:-+20s}                  # +DURATION after the first shard starts, or
                                            # an absolute 2026-11-23T10:00:00Z
SPATE_OPTS=${SPATE_OPTS:---users 200 --duration 10m} # the whole run's workload (split
                                            # word by word; arguments after the script's
                                            # name are added as they are)
PROTOCOL=${PROTOCOL:-smtp}                  # smtp | pop3 | imap | xmpp | rr
# ---------------------------------------------------------------------------------------

# This task's shard index: the array task, else the srun task.
SHARD=${SLURM_ARRAY_TASK_ID:-${SLURM_PROCID:-}}
if [ -z "$SHARD" ]; then
    echo "spate-array.sh: not started by Slurm (no SLURM_ARRAY_TASK_ID or SLURM_PROCID): submit it with sbatch --array, or run it with srun" >&2
    exit 2
fi

mkdir -p "$RESULTS"
echo "spate shard $SHARD on $(hostname) -> $RESULTS/shard-$SHARD"
# shellcheck disable=SC2086 # SPATE_OPTS is split into words on purpose
exec "$SPATE" "$PROTOCOL" "$TARGET" --shard auto \
    --start-at "$START_AT" --start-file "$RESULTS/start" \
    -o "$RESULTS/shard-$SHARD" $SPATE_OPTS "$@"

#!/bin/bash
# Train on several nodes under Slurm: one torchrun agent per node (srun), one process per GPU,
# meeting at a c10d rendezvous on the job's first node. run_dir and the data must be on a
# filesystem every node sees. Resubmitting the same command with --resume continues the run.
#
#   sbatch --nodes=2 --gpus-per-node=8 scripts/slurm_train.sh configs/en-fr.yaml \
#       --set train.max_tokens=1563                # 2 × 8 GPUs × 1,563 ≈ the paper's 25k tokens
#
# Environment: NPROC_PER_NODE (default: the GPUs Slurm gave the node, else 1), RDZV_PORT (29400),
# MAX_RESTARTS (3: a dead worker restarts the group, which resumes from the latest checkpoint).
#SBATCH --job-name=seq2seq
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
# SIGTERM 5 minutes before the time limit: every rank finishes its update and rank 0 saves it.
#SBATCH --signal=TERM@300
set -euo pipefail

CONFIG=${1:?usage: sbatch scripts/slurm_train.sh CONFIG [seq2seq train options]}
shift
NODES=${SLURM_JOB_NUM_NODES:?not inside a Slurm job (use sbatch)}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
NPROC=${NPROC_PER_NODE:-${SLURM_GPUS_ON_NODE:-1}}
PYTHON=${PYTHON:-python}

# --kill-on-bad-exit: a node whose agent fails takes the job step down at once.
exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 "$PYTHON" -m seq2seq.launch \
    --nnodes="$NODES" --nproc-per-node="$NPROC" \
    --rdzv-backend=c10d --rdzv-endpoint="$HEAD:${RDZV_PORT:-29400}" --rdzv-id="$SLURM_JOB_ID" \
    --max-restarts="${MAX_RESTARTS:-3}" \
    -m seq2seq train -c "$CONFIG" "$@"

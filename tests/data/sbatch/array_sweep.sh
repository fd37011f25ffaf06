#!/bin/bash
# A learning-rate x seed sweep: 32 tasks, at most 4 running at once.
#SBATCH --job-name=lr-sweep
#SBATCH --array=0-31%4
#SBATCH --output=logs/sweep_%A_%a.out
#SBATCH --error=logs/sweep_%A_%a.err
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=2:00:00

LRS=(1e-2 3e-3 1e-3 3e-4 1e-4 3e-5 1e-5 3e-6)
lr=${LRS[$((SLURM_ARRAY_TASK_ID % 8))]}
seed=$((SLURM_ARRAY_TASK_ID / 8))
python train.py --lr "$lr" --seed "$seed" --run-name "sweep-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}"

#!/bin/bash
#SBATCH --job-name=ds-zero3
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=10
#SBATCH --mem-per-cpu=8G
#SBATCH --time=3-00:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --output=ds-%j.out

# Write a DeepSpeed hostfile from the allocation, 8 slots per node.
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed 's/$/ slots=8/' > hostfile

trap 'echo "time limit near: saving"; touch SAVE_NOW' USR1

srun --ntasks-per-node=8 python train.py \
    --deepspeed ds_zero3.json \
    --local_rank "$SLURM_LOCALID" &
wait

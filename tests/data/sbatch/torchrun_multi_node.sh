#!/bin/bash
#SBATCH --job-name=pretrain-gpt
#SBATCH --partition=gpu --qos=high --account=lab
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1          # one torchrun launcher per node
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --mem=0                      # all of the node's memory
#SBATCH --exclusive
#SBATCH --time=2-00:00:00
#SBATCH -o %x-%j.out

# The first node of the allocation hosts the rendezvous.
nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
export MASTER_ADDR=${nodes[0]}
export MASTER_PORT=29500
export OMP_NUM_THREADS=8

srun torchrun \
    --nnodes "$SLURM_NNODES" \
    --nproc_per_node 8 \
    --rdzv_id "$SLURM_JOB_ID" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER_ADDR:$MASTER_PORT" \
    pretrain.py --config configs/gpt_1b.yaml

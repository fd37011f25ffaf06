#!/bin/bash
# Fine-tune a 7B model on one 8-GPU node with torchrun's standalone rendezvous.
#SBATCH --job-name=llama-ft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --cpus-per-task=32
#SBATCH --mem=256G
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err

set -euo pipefail
mkdir -p logs
source ~/venvs/ft/bin/activate

torchrun --standalone --nproc_per_node=8 finetune.py \
    --model meta-llama/Llama-2-7b-hf \
    --output_dir "checkpoints/$SLURM_JOB_ID"

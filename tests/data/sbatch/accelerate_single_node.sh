#!/usr/bin/env bash
#SBATCH -J sd-lora
#SBATCH -N 1
#SBATCH --gres=gpu:a100:4
#SBATCH -c 16
#SBATCH --mem=128G
#SBATCH -t 12:00:00
#SBATCH --output=%x_%j.log

module load cuda/12.1
conda activate diffusion

accelerate launch --multi_gpu --num_processes 4 --mixed_precision bf16 \
    train_lora.py --dataset ./data/pokemon --rank 8

#!/bin/bash
#SBATCH --job-name=hf-offline
#SBATCH --export=ALL,WANDB_MODE=offline,HF_HOME=/scratch/hf
#SBATCH --chdir=runs/exp1
#SBATCH --gpus-per-node=2
#SBATCH --open-mode=append
#SBATCH --time=04:00:00

python ../../train.py --report_to wandb

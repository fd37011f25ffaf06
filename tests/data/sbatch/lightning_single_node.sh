#!/bin/bash
#SBATCH -n 4
#SBATCH -G 4
#SBATCH -c 6
#SBATCH --mem-per-gpu=40G
#SBATCH -t 360
#SBATCH --requeue
#SBATCH --signal=USR1@120
#SBATCH -J vit-base

source .venv/bin/activate
srun python -u train.py --devices 4 --auto-requeue

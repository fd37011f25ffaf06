#!/bin/bash
#SBATCH --partition=gpu --qos=high --account=lab
#SBATCH --gres=gpu:2
#SBATCH --constraint="a100|h100"
#SBATCH --nice=10
#SBATCH --frobnicate=7
#SBATCH --hint=nomultithread
#SBATCH --comment "ablation, see notes"
# SBATCH --gres=gpu:8    (commented out: one space after the #)
##SBATCH --time=99:00:00 (commented out)
#SBATCH -t 1:00:00

echo "starting on $(hostname)"
#SBATCH --gres=gpu:4     (after the first command: sbatch reads no more)
python train.py

#!/bin/bash
# Submitted as: sbatch --dependency=afterok:$TRAIN_ID dependency_eval.sh
#SBATCH --job-name=final-eval
#SBATCH --dependency=afterok:1234
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --gres=gpu:1
#SBATCH --time=30:00
#SBATCH --output=eval-%j.out

python evaluate.py --checkpoint checkpoints/last.ckpt --split test

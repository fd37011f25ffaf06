#!/bin/sh
#SBATCH -a 1,3,5,7
#SBATCH --gpus=1
#SBATCH -t 45
#SBATCH --job-name=eval-ckpt
#SBATCH --output=eval-%a.txt

python evaluate.py --checkpoint "ckpt/epoch_${SLURM_ARRAY_TASK_ID}.pt"

#!/bin/bash
# Runs under Slurm as it is; gpuyard reads its own lines too.
#SBATCH --job-name=small-finetune
#SBATCH --gres=gpu:1
#SBATCH --time=03:00:00
#SBATCH --mail-type=END
#SBATCH --mail-user=https://hooks.example.org/gpu-jobs
#GPUYARD --gpu-mem 20G
#GPUYARD --retries 2 --retry-on failed,timeout
#GPUYARD --venv /opt/venvs/ml
#GPUYARD --signal USR1
#GPUYARD --time 2h

python finetune.py --lora

#!/bin/bash -l
# PyTorch Lightning reads SLURM_* itself: one task per GPU, launched by srun.
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=200G
#SBATCH --time=0-08:00:00
#SBATCH --signal=SIGUSR1@90
#SBATCH --job-name=pl-resnet

srun python train.py trainer.num_nodes=2 trainer.devices=4 trainer.strategy=ddp

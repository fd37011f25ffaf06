#!/bin/bash
#SBATCH --job-name=jax-mh
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --mem=0

# jax.distributed.initialize() reads the Slurm task variables itself.
srun python train_jax.py --global_batch_size 1024

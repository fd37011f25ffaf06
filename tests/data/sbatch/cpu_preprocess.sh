#!/bin/bash
#SBATCH -J tokenize
#SBATCH -c 16
#SBATCH --mem-per-cpu=4G
#SBATCH -t 1:00:00
#SBATCH --dependency=singleton

python tokenize_corpus.py --workers "$SLURM_CPUS_PER_TASK"

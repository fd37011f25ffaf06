#!/bin/bash
#SBATCH --gpus=a100:2
#SBATCH --time=UNLIMITED
#SBATCH --no-requeue
#SBATCH --export=NONE
#SBATCH --mem=64000
#SBATCH -J hf-trainer

python -m torch.distributed.run --nproc_per_node 2 run_glue.py --task_name mnli

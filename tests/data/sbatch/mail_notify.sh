#!/bin/bash
#SBATCH --job-name=bert-pretrain
#SBATCH --gres=gpu:v100:2
#SBATCH --time=1-12
#SBATCH --mail-type=BEGIN,END,FAIL
#SBATCH --mail-user=someone@university.example

python run_pretraining.py --config bert_base.json

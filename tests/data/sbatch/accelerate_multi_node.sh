#!/bin/bash
#SBATCH --job-name=accel-2n
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=48
#SBATCH --mem-per-gpu=64G
#SBATCH --time=08:00:00
#SBATCH --output=slurm/%j/out.txt

export MAIN_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)

srun bash -c 'accelerate launch \
    --num_machines $SLURM_NNODES \
    --num_processes $((SLURM_NNODES * 4)) \
    --machine_rank $SLURM_PROCID \
    --main_process_ip $MAIN_HOST \
    --main_process_port 29400 \
    run_clm.py --model_name_or_path gpt2 --output_dir out'

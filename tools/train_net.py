"""Train or evaluate a LiBai config with the trainer named by ``train.trainer``.

    python -m oneflow.distributed.launch --nproc_per_node 8 tools/train_net.py \
        --config-file configs/swin_cifar100.py [--resume] [--eval-only] [key=value ...]

``train.trainer=libai.engine.DefaultTrainer`` runs stock LiBai for comparison.
"""
from libai_ext.engine.launch import cli

if __name__ == "__main__":
    cli()

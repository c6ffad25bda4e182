"""Training: the trainer, seed packs, checkpoints (written by the trainer, read by analyses) and evaluation."""

"""Pretrained language models offline: converting a model once (HF directory, GGUF file, weight package), loading
a local causal LM, and TransformerLens views of a checkpoint."""

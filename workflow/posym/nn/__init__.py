"""Models: devices and precisions, the toolkit of packed models (attention with hook points, member axes,
per-member dropout), position schemes, the GPT-J model with HF's weight layout, and which model a study trains."""

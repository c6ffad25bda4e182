"""Data: files written atomically and verified (safetensors, JSON, checksums), the task registry and its
generators' interface, and the splits on disk."""

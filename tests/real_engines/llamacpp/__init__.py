"""The llama.cpp tier: a real llama-server built by scripts/engines/llamacpp."""

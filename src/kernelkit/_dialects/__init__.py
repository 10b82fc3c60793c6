"""Source dialects translated to kernelkit's CUDA dialect before render (DESIGN.md)."""

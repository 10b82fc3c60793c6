"""Workflows above the API, beside ``cli.py``: ``kernelkit precompile`` and the cache commands.

They use the pipeline (render, compile) and the stores in ``_cache/`` from above; nothing below
the API imports them.
"""

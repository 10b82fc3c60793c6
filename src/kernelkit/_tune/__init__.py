"""Autotuning: the tuner and the tuning database it fills (``db.py``) and the selection reads."""

"""The tuning database: measured decisions (``TuningRecord``), one file each, that selection
reads and the tuner (``kernelkit._tune``) writes; beside the shipped tables (``_select.tables``)."""

"""Built-in backends (each registered through the ``kernelkit.backends`` entry point)."""

"""kernelkit's exceptions: one root, each carrying the evidence a user needs."""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "BackendError",
    "BundleError",
    "CompileError",
    "KernelFault",
    "KernelkitError",
    "LaunchError",
]


class KernelkitError(Exception):
    """Root of every error kernelkit raises on purpose."""


class ArgumentError(KernelkitError, ValueError):
    """A call or definition got a bad value; the message names the argument. Also a
    ``ValueError``, so code catching that keeps working."""


class ArgumentTypeError(KernelkitError, TypeError):
    """A call or definition got an argument of the wrong type; the message names it. Also a
    ``TypeError``."""


class CompileError(KernelkitError):
    """The device compiler rejected a kernel.

    ``log`` is the compiler's log (line numbers refer to the user's own source and header),
    ``source`` the full generated source, ``options`` the compiler options.
    """

    def __init__(self, kernel: str, log: str, source: str, options: tuple[str, ...] = ()) -> None:
        self.kernel = kernel
        self.log = log
        self.source = source
        self.options = tuple(options)
        super().__init__(f"[{kernel}] compilation failed:\n{log.strip()}")

    def numbered_source(self) -> str:
        """The generated source with line numbers, for reading next to the log."""
        return "\n".join(f"{i:5d}  {line}" for i, line in enumerate(self.source.splitlines(), 1))


class KernelFault(KernelkitError):
    """A kernel did something illegal at run time (checked mode, or a device fault)."""


class LaunchError(KernelkitError):
    """The backend failed to launch a kernel or reported an error from it."""


class BackendError(KernelkitError):
    """A backend is unknown, unavailable or failed; the message names it."""


class BundleError(KernelkitError):
    """A precompiled bundle cannot be used as a whole (not a bundle, or built for another
    kernelkit version or key schema); the message names the file and both versions."""


class KernelTimeout(LaunchError):
    """A launch ran past the ``timeout=`` its call gave and was stopped (its outputs are
    incomplete)."""

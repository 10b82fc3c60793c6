"""Backend discovery: KERNELKIT_BACKENDS include/exclude, broken plugins skipped with a warning
naming them (others keep working), strict mode raising."""

from __future__ import annotations

import os
import sys
import types
import warnings
from types import SimpleNamespace

import pytest

from kernelkit import BackendError, _config
from kernelkit._backends import registry as _registry
from kernelkit.backend import BACKEND_API_VERSION, Backend, Target

HOST = 1


class _Fake(Backend):
    """A do-nothing backend for registry tests."""

    dlpack_devices = frozenset({HOST})

    def targets(self):
        return [Target(self.name, 0, "fake", "fake device", 1, (1, 1, 1), (1, 1, 1), 0, 0)]

    def compiler_identity(self):
        return "fake-1"

    def render(self, source, target, check=False):
        raise NotImplementedError

    def compile(self, request):
        raise NotImplementedError

    def load(self, artifact, target):
        raise NotImplementedError

    def launcher(self, program, target, shared_memory_bytes):
        raise NotImplementedError


class GoodBackend(_Fake):
    name = "good"


class OtherBackend(_Fake):
    name = "other"
    dlpack_devices = frozenset({HOST, 99})


class OldBackend(_Fake):
    name = "old"
    api_version = BACKEND_API_VERSION + 41


class CrashingBackend(_Fake):
    name = "crashing"

    def __init__(self):
        raise RuntimeError("no device driver in this sandbox")


class NotABackend:
    name = "notone"
    api_version = BACKEND_API_VERSION


PLUGINS = {
    "good": "kk_fake_plugins:GoodBackend",
    "other": "kk_fake_plugins:OtherBackend",
    "old": "kk_fake_plugins:OldBackend",
    "crashing": "kk_fake_plugins:CrashingBackend",
    "notone": "kk_fake_plugins:NotABackend",
    "missing": "kk_no_such_module_anywhere:Backend",
    "typo": "kk_fake_plugins:NoSuchClass",
}


@pytest.fixture
def plugins(clean_state, patch_entry_points):
    """Only the fake plugins above are installed (no built-ins); returns the monkeypatch."""
    mod = types.ModuleType("kk_fake_plugins")
    for cls in (GoodBackend, OtherBackend, OldBackend, CrashingBackend, NotABackend):
        setattr(mod, cls.__name__, cls)
    clean_state.setitem(sys.modules, "kk_fake_plugins", mod)
    eps = [SimpleNamespace(name=n, value=v, group="kernelkit.backends") for n, v in PLUGINS.items()]

    def entry_points(group=None, **kw):
        return [ep for ep in eps if group in (None, ep.group)]

    patch_entry_points(entry_points)
    clean_state.setattr(_registry, "_BUILTIN", {})
    _registry.reset()
    return clean_state


def _configure(mp, **env):
    for k, v in env.items():
        mp.setenv(k, v)
    _config.reload()
    _registry.reset()


def test_everything_registered_by_default(plugins):
    assert list(_registry.registered()) == list(PLUGINS)


def test_include_list_selects_and_orders(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="other,good")
    assert list(_registry.registered()) == ["other", "good"]
    with pytest.raises(BackendError, match="'old'"):
        _registry.get_backend("old")


def test_exclude_list(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="-old,-crashing,-notone,-missing,-typo")
    assert list(_registry.registered()) == ["good", "other"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing broken is left to warn about
        assert set(_registry.backends()) == {"good", "other"}


def test_include_and_exclude_together(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="good,other,-other")
    assert list(_registry.registered()) == ["good"]


def test_unknown_name_in_include_list_warns(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="good,nonesuch")
    with pytest.warns(RuntimeWarning, match="'nonesuch'.*not installed"):
        assert list(_registry.registered()) == ["good"]


def test_unknown_name_in_include_list_raises_when_strict(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="good,nonesuch", KERNELKIT_BACKENDS_STRICT="1")
    with pytest.raises(BackendError, match="nonesuch"):
        _registry.registered()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("old", f"API version {BACKEND_API_VERSION + 41}"),
        ("crashing", "RuntimeError: no device driver"),
        ("notone", "not a kernelkit.backend.Backend"),
        ("missing", "ModuleNotFoundError"),
        ("typo", "AttributeError"),
    ],
)
def test_broken_plugin_is_skipped_with_a_warning_naming_it(plugins, name, why):
    with pytest.warns(RuntimeWarning, match=f"backend '{name}' skipped.*{why}"):
        with pytest.raises(BackendError, match=f"backend {name}.*unavailable"):
            _registry.get_backend(name)
    assert why in _registry.failures()[name]
    # the others keep working, and the failure is remembered (no second warning)
    assert isinstance(_registry.get_backend("good"), GoodBackend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BackendError, match=name):
            _registry.get_backend(name)


def test_backends_lists_the_working_ones_and_warns_once_per_broken_one(plugins):
    with pytest.warns(RuntimeWarning) as caught:
        loaded = _registry.backends()
    assert list(loaded) == ["good", "other"]
    named = sorted(str(w.message).split("'")[1] for w in caught)
    assert named == sorted(["old", "crashing", "notone", "missing", "typo"])


def test_strict_mode_raises_on_a_broken_plugin(plugins):
    _configure(plugins, KERNELKIT_BACKENDS_STRICT="1")
    assert isinstance(_registry.get_backend("good"), GoodBackend)
    with pytest.raises(BackendError, match=r"backend old.*API version"):
        _registry.get_backend("old")
    with pytest.raises(BackendError, match="crashing"):
        _registry.get_backend("crashing")
    _registry.reset()
    with pytest.raises(BackendError):
        _registry.backends()


def test_unknown_backend_name(plugins):
    with pytest.raises(BackendError, match=r"backend 'nonesuch' is not available.*good"):
        _registry.get_backend("nonesuch")


def test_get_backend_returns_one_instance(plugins):
    assert _registry.get_backend("good") is _registry.get_backend("good")


def test_backend_for_device_type(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="other,good")
    assert _registry.backend_for_device_type(HOST, "x").name == "other"
    assert _registry.backend_for_device_type(99, "x").name == "other"
    with pytest.raises(BackendError, match=r"input 'x'.*device type 7"):
        _registry.backend_for_device_type(7, "input 'x'")


def test_backend_for_device_type_skips_broken_ones(plugins):
    _configure(plugins, KERNELKIT_BACKENDS="crashing,good")
    with pytest.warns(RuntimeWarning, match="crashing"):
        assert _registry.backend_for_device_type(HOST, "x").name == "good"


def test_reset_rereads_the_configuration(plugins):
    assert "old" in _registry.registered()
    plugins.setenv("KERNELKIT_BACKENDS", "-old")
    _config.reload()
    assert "old" in _registry.registered()  # read once...
    _registry.reset()
    assert "old" not in _registry.registered()  # ...until reset


def test_installed_metadata_lists_the_builtins():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("kernelkit")
    except PackageNotFoundError:
        pytest.skip("kernelkit is not installed (running from a source tree)")
    names = {ep.name for ep in dist.entry_points if ep.group == "kernelkit.backends"}
    assert {"cuda", "cpu"} <= names


def test_builtin_device_table_matches_the_backends():
    from kernelkit._backends.cpu import CPUBackend
    from kernelkit._backends.cuda import CUDABackend

    assert {
        "cuda": CUDABackend.dlpack_devices,
        "cpu": CPUBackend.dlpack_devices,
    } == _registry._BUILTIN_DEVICES


def test_a_host_array_does_not_import_the_cuda_backend():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, kernelkit\n"
        "k = kernelkit.kernel('host_only', ['x'], ['y'], 'y[threadIdx.x] = x[threadIdx.x];')\n"
        "x = np.arange(4, dtype=np.float32)\n"
        "k([x], output_shapes=[(4,)], output_dtypes=[x.dtype], grid=(4,1,1), threadgroup=(4,1,1))\n"
        "print('kernelkit._backends.cuda' in sys.modules)\n"
    )
    src = os.path.dirname(os.path.dirname(_registry.__file__))  # this checkout's kernelkit
    env = {**os.environ, "PYTHONPATH": src, "KERNELKIT_PRELOAD": "0"}  # preloaded: no cuInit
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"

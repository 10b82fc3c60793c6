"""KERNELKIT_* variables: declared once, parsed once, reloadable for tests."""

from __future__ import annotations

import dataclasses

import pytest

from kernelkit import _config


def test_every_variable_is_declared_with_help_and_a_field():
    fields = dataclasses.fields(_config.Config)
    assert len(fields) == len(_config.VARS)
    for var, field in zip(_config.VARS, fields):
        assert var.name == "KERNELKIT_" + field.name.upper()
        assert var.help.strip()
    assert len({v.name for v in _config.VARS}) == len(_config.VARS)


def test_defaults(clean_state):
    for var in _config.VARS:
        clean_state.delenv(var.name, raising=False)
    cfg = _config.reload()
    for var, field in zip(_config.VARS, dataclasses.fields(_config.Config)):
        assert getattr(cfg, field.name) == var.default
    assert cfg.backends == () and cfg.backends_strict is False and cfg.cache is True


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        (" 1 ", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_bool_variables(clean_state, text, value):
    clean_state.setenv("KERNELKIT_BACKENDS_STRICT", text)
    clean_state.setenv("KERNELKIT_VERBOSE", text)
    cfg = _config.reload()
    assert cfg.backends_strict is value and cfg.verbose is value


def test_name_lists(clean_state):
    clean_state.setenv("KERNELKIT_BACKENDS", " cpu, -cuda,,sim ")
    clean_state.setenv("KERNELKIT_BUNDLE_PATH", "a.kkb,b.kkb")
    cfg = _config.reload()
    assert cfg.backends == ("cpu", "-cuda", "sim")
    assert cfg.bundle_path == ("a.kkb", "b.kkb")


def test_ints_and_strings(clean_state):
    clean_state.setenv("KERNELKIT_CPU_THREADS", "3")
    clean_state.setenv("KERNELKIT_CACHE_MAX_BYTES", "1024")
    clean_state.setenv("KERNELKIT_CXX", "clang++")
    cfg = _config.reload()
    assert (cfg.cpu_threads, cfg.cache_max_bytes, cfg.cxx) == (3, 1024, "clang++")


def test_bad_value_names_the_variable(clean_state):
    clean_state.setenv("KERNELKIT_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="KERNELKIT_CPU_THREADS='many'"):
        _config.reload()


def test_reload_replaces_the_module_config(clean_state):
    clean_state.setenv("KERNELKIT_CACHE", "0")
    cfg = _config.reload()
    assert _config.config is cfg and cfg.cache is False


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _config.config.verbose = True  # type: ignore[misc]


def test_kernelkit_info_prints_every_variable(clean_state, capsys):
    import json

    from kernelkit.cli import main

    clean_state.setenv("KERNELKIT_TUNE", "serve")
    _config.reload()
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    for var in _config.VARS:
        assert var.name in text
    assert "* KERNELKIT_TUNE = 'serve'" in text
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["configuration"]["KERNELKIT_TUNE"] == "serve"

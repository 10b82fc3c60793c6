"""``kernelkit precompile`` (``_workflows/precompile.py``) on the CPU backend: it names the
declaration, arch and stage that failed (issue 7, item 15)."""

from __future__ import annotations

import pytest

import kernelkit


def _cpu_ready() -> str | None:
    try:
        from kernelkit._backends.registry import get_backend

        return None if get_backend("cpu").targets() else "the cpu backend sees no device"
    except Exception as e:  # noqa: BLE001 - any failure means: not ready yet
        return f"the cpu backend is not available: {e}"


pytestmark = pytest.mark.skipif(_cpu_ready() is not None, reason=str(_cpu_ready()))

BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < inp_shape[0]) out[i] = {expr};"


def _declaration(body: str = BODY.format(expr="inp[i]")):
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.declare import Declaration

    f32 = DTYPES["float32"]
    k = kernelkit.kernel("pre_k", ["inp"], ["out"], body)
    return Declaration(k, (("array", f32),), (f32,), ())  # not registered: no global state


def test_precompile_for_the_cpu_when_another_backend_cannot_list_its_archs(monkeypatch) -> None:
    from kernelkit._backends.registry import get_backend
    from kernelkit._errors import BackendError
    from kernelkit._pipeline import declare as _declare
    from kernelkit._workflows import precompile

    class Broken(type(get_backend("cpu"))):
        name = "brokencuda"

        def compile_targets(self) -> list[str]:
            raise BackendError("[backend brokencuda] the NVRTC library was not found")

    cpu = get_backend("cpu")
    present = {"brokencuda": Broken(), "cpu": cpu}
    for module in (precompile, _declare):  # _declare: where the request came from before
        monkeypatch.setattr(module, "backends", lambda: present)
    arch = cpu.targets()[0].arch
    (built,) = precompile.build_entries([_declaration()], [arch], progress=False)
    assert built.what.endswith(f"for {arch}")  # before the fix: BackendError from brokencuda
    with pytest.raises(precompile.PrecompileFailed) as info:
        precompile.build_entries([_declaration()], ["sm_80"], progress=False)
    assert "no installed backend compiles for arch 'sm_80'" in str(info.value)
    assert "brokencuda: compile_targets() failed: BackendError" in str(info.value)
    assert "NVRTC library was not found" in str(info.value) and info.value.status == 2


def test_precompile_names_the_declaration_arch_and_stage_that_failed(monkeypatch) -> None:
    from kernelkit._backends.registry import get_backend
    from kernelkit._workflows import precompile

    cpu = get_backend("cpu")
    arch = cpu.targets()[0].arch
    with pytest.raises(precompile.PrecompileFailed) as info:
        precompile.build_entries([_declaration("out[0] = nope;")], [arch], progress=False)
    assert str(info.value).startswith(f"[precompile] pre_k(float32) -> (float32) for {arch}: ")
    assert "nope" in str(info.value) and info.value.status == 1

    def boom(request):
        raise RuntimeError("the compiler crashed")

    monkeypatch.setattr(cpu, "compile", boom)
    with pytest.raises(precompile.PrecompileFailed, match="backend cpu: compile failed: Runt"):
        precompile.build_entries([_declaration()], [arch], progress=False)

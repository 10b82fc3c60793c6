"""The CPU backend picks fiber mode by a regular expression over the source (_source._FIBER_RE);
a rendezvous the expression misses would only fail at run time ("called in a kernel compiled
without fibers"). This reads the CPU headers, finds every function that can wait for other
threads (it reaches kk_yield or kk_fiber_block), and checks the expression sees each public one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelkit._backends.cpu import _source
from kernelkit._pipeline.codegen import make_source
from kernelkit._records import KernelSpec

INCLUDE = Path(_source.__file__).parent / "include"
HEADERS = sorted(INCLUDE.glob("kk_cpu*.h"))
_DEF_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(([^;{}()]|\([^()]*\))*\)\s*(?:const\s*)?\{")
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "sizeof", "return", "defined"}
_WAITS = ("kk_yield", "kk_fiber_block")  # every wait for other threads goes through these


def _functions() -> dict[str, list[str]]:
    """Name -> bodies of the functions and methods the headers define (without comments)."""
    found: dict[str, list[str]] = {}
    for path in HEADERS:
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(), flags=re.S)
        for m in _DEF_RE.finditer(text):
            name = m.group(1)
            if name in _NOT_FUNCTIONS:
                continue
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            found.setdefault(name, []).append(text[m.end() : i])
    return found


def _rendezvous() -> set[str]:
    """Functions that may wait for other threads, directly or through another one."""
    funcs = _functions()
    waits = {n for n, bodies in funcs.items() if any(w + "(" in b for b in bodies for w in _WAITS)}
    while True:
        more = {
            n
            for n, bodies in funcs.items()
            if n not in waits
            and any(re.search(rf"\b{re.escape(w)}\s*\(", b) for b in bodies for w in waits)
        }
        if not more:
            return waits
        waits |= more


RENDEZVOUS = _rendezvous()
PUBLIC = sorted(n for n in RENDEZVOUS if not n.startswith("kk_") and n != "operator")


def _fibers(body: str, header: str = "") -> bool:
    spec = KernelSpec(name="k", input_names=(), output_names=(), source=body, header=header)
    return _source.needs_fibers(make_source(spec, (), ()))


def test_the_headers_were_read():
    # a sanity floor, so that a parsing change cannot empty the list silently
    for name in ("__syncthreads", "__shfl_sync", "__ballot_sync", "__activemask", "sync", "shfl"):
        assert name in PUBLIC, (name, PUBLIC)
    assert len(PUBLIC) >= 25, PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_every_rendezvous_of_the_headers_selects_fiber_mode(name):
    # called as a free function or as a group's method, in the body or in a header helper
    assert _fibers(f"auto r = {name}(v);") and _fibers(f"auto r = g.{name}(v);"), name
    assert _fibers("", header=f"__device__ void f() {{ {name}(1); }}"), name


@pytest.mark.parametrize(
    "body",
    [
        "y[i] = __popc(x[i]) + __ldg(x + i) + __ldcs(x + i);",
        "atomicAdd(&y[0], x[i]);",
        "y[i] = cg::this_thread_block().thread_rank();",
        "__stcs(y + i, x[i]); __stwt(y + i, __ldlu(x + i));",
    ],
)
def test_loop_mode_stays_for_code_that_never_waits(body):
    assert not _fibers(body)


@pytest.mark.parametrize(
    "header",
    ["#include <cub/cub.cuh>", '#include "cub/block/block_scan.cuh"', "using R = cub::Sum;"],
)
def test_code_that_uses_cub_selects_fiber_mode(header):
    assert _fibers("y[0] = 1;", header=header)

"""The examples in the public docstrings (which the site's API reference shows) run as written.

The objects are those the reference renders: ``kernelkit.__all__``, ``kernelkit.ops`` and
``kernelkit.backend``, with their methods. An example that cannot run here says
``# doctest: +SKIP`` on its line, visibly.
"""

from __future__ import annotations

import doctest

import pytest

import kernelkit
import kernelkit.backend
import kernelkit.ops


def _examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=True, exclude_empty=True)
    seen: set[str] = set()
    found = []
    for module in (kernelkit, kernelkit.ops, kernelkit.backend):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, (str, int)):
                continue
            for test in finder.find(obj, f"{module.__name__}.{name}", globs={}):
                if test.examples and test.name not in seen:
                    seen.add(test.name)
                    found.append(test)
    return found


EXAMPLES = _examples()


def test_the_reference_has_examples():
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_docstring_example_runs(test, own_tuning_db):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)

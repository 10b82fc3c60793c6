"""A compile error raised by a call carries no internal exception in its chain (the call's
cache lookup misses with a KeyError; the error must not be raised while handling it)."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit._errors import CompileError


def test_compile_error_has_no_keyerror_in_its_chain(arrays, backend):
    k = kernelkit.kernel("chain_bad", ["x"], ["y"], "y[0] = no_such_name_here;")
    x = arrays.put(np.ones(4, np.float32))
    with pytest.raises(CompileError) as e:
        k([x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
          threadgroup=(4, 1, 1), backend=backend)  # fmt: skip
    err = e.value
    assert not isinstance(err.__context__, KeyError), repr(err.__context__)
    assert not isinstance(err.__cause__, KeyError), repr(err.__cause__)
    assert err.__context__ is None or err.__suppress_context__

"""``kernelkit explain OP --dims ...`` for the built-in ops (on the CPU backend here)."""

from __future__ import annotations

from kernelkit.cli import main


def test_explain_a_row_op_and_matmul(capsys):
    assert main(["explain", "softmax", "--dims", "8x4096"]) == 0
    out = capsys.readouterr().out
    assert "softmax/rows" in out and "N=4096" in out and "heuristic" in out
    assert main(["explain", "matmul", "--dims", "1x256x512"]) == 0
    out = capsys.readouterr().out
    assert "matmul/gemv" in out and "M:ranges" in out and "matmul/framework: does not match" in out
    assert main(["explain", "layer_norm", "--dims", "3x5x7", "--dtype", "float16"]) == 0
    assert "float16" in capsys.readouterr().out


def test_explain_refuses_bad_dims(capsys):
    assert main(["explain", "matmul", "--dims", "4x4"]) == 2
    assert "MxNxK" in capsys.readouterr().err
    assert main(["explain", "softmax", "--dims", "axb"]) == 2

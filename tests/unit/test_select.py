"""The selection stage without a device: records, keys and bucketing, precedence and provenance,
legality of every candidate a rule returns, overrides, and golden decisions."""

from __future__ import annotations

import dataclasses
import json

import pytest

import kernelkit
from kernelkit._choices import force
from kernelkit._records import ArgFacts, Problem, Target
from kernelkit._select.keys import Feature, KeySpec
from kernelkit._select.override import forced, parse_force
from kernelkit._select.records import PROVENANCE, Config, KernelChoice
from kernelkit._select.registry import Implementation, Op
from kernelkit._select.select import Override, select


def target(arch="sm_90", features=("bf16", "cp_async"), name="H100") -> Target:
    return Target(
        backend="fake",
        device=0,
        arch=arch,
        name=name,
        max_threads_per_block=1024,
        max_block_dims=(1024, 1024, 64),
        max_grid_dims=(2**31 - 1, 65535, 65535),
        max_shared_memory_bytes=48 * 1024,
        max_shared_memory_optin_bytes=227 * 1024,
        features=frozenset(features),
    )


def problem(m=1, n=4096, k=4096, dtype="bfloat16") -> Problem:
    a = ArgFacts("a", "array", dtype, (m, k), (k, 1))
    b = ArgFacts("b", "array", dtype, (n, k), (k, 1))
    return Problem("mm", (a, b), (("M", m), ("N", n), ("K", k)))


def grid_rule(p: Problem, c: Config) -> tuple[int, int, int]:
    return (p.attr("N"), -(-p.attr("M") // c.values.get("BM", 1)), 1)


def make_op() -> Op:
    op = Op("mm", key=["a.dtype", "M:ranges(1,17,129)", "N", "K"])
    op.register(
        Implementation(
            "tiled",
            run=lambda choice, call: ("tiled", choice),
            grid=grid_rule,
            configs=(Config({"BM": 64}, (128,)), Config({"BM": 128}, (256,))),
            heuristic=lambda p, t: Config({"BM": 16}, (64,)) if p.attr("M") <= 16 else None,
        )
    )
    op.register(
        Implementation(
            "gemv",
            run=lambda choice, call: ("gemv", choice),
            kind="microkernel",
            priority=10,
            match=lambda p, t: None if p.attr("M") <= 16 else f"M = {p.attr('M')} > 16",
            pads="pads K to a multiple of 8",
        )
    )
    op.register(
        Implementation(
            "wgmma",
            run=lambda choice, call: ("wgmma", choice),
            kind="microkernel",
            priority=20,
            requires={"arch_specific"},
        )
    )
    return op


# --- records --------------------------------------------------------------------------------


def test_config_is_canonical_hashable_and_round_trips():
    a = Config({"B": 2, "A": "float32"}, (128,), 1024)
    b = Config((("A", "float32"), ("B", 2)), (128, 1, 1), 1024)
    assert a == b and hash(a) == hash(b)
    assert Config.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    assert a.describe() == "A=float32 B=2 threadgroup=128x1x1 shared=1024"


@pytest.mark.parametrize(
    "bad",
    [
        {"template": {"A": 1.5}},
        {"template": [("A", 1), ("A", 2)]},
        {"threadgroup": (0,)},
        {"threadgroup": (1, 2, 3, 4)},
        {"shared_memory": -1},
        {"shared_memory": True},
    ],
)
def test_config_refuses_bad_values(bad):
    with pytest.raises(kernelkit.KernelkitError):
        Config(**bad)


def test_kernel_choice_round_trips_through_json_exactly():
    c = KernelChoice(
        "mm", "mm/tiled", Config({"BM": 64}, (128,)), (4096, 1), "table", (("M", "1"),)
    )
    again = KernelChoice.from_json(c.to_json())
    assert again == c and again.to_json() == c.to_json() and hash(again) == hash(c)
    with pytest.raises(kernelkit.ArgumentError, match="source"):
        KernelChoice("mm", "mm/tiled", Config(), (1,), "guess")


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("feature", "values", "labels"),
    [
        (
            "M:pow2",
            [1, 2, 3, 4, 5, 1000, 1024, 1025],
            ["1", "2", "4", "4", "8", "1024", "1024", "2048"],
        ),
        (
            "M:ranges(1,17,129)",
            [1, 16, 17, 128, 129, 10**6],
            ["[1,17)"] * 2 + ["[17,129)"] * 2 + ["[129,inf)"] * 2,
        ),
        ("M:ranges(4)", [1, 4], ["[-inf,4)", "[4,inf)"]),
        ("M", [7], ["7"]),
    ],
)
def test_bucketing(feature, values, labels):
    f = Feature.parse(feature)
    assert [f.label(v) for v in values] == labels


def test_key_reads_args_and_attributes():
    spec = KeySpec.parse(["a.dtype", "a.shape[-1]", "b.ndim", "a.contiguous", "M:pow2"])
    assert spec.of(problem(m=5)) == (
        ("a.dtype", "bfloat16"),
        ("a.shape[-1]", "4096"),
        ("b.ndim", "2"),
        ("a.contiguous", "True"),
        ("M:pow2", "8"),
    )
    with pytest.raises(KeyError, match="no argument 'c'"):
        KeySpec.parse(["c.dtype"]).of(problem())


@pytest.mark.parametrize(
    "bad", ["a.dtype:pow2", "a.shape", "M:ranges(9,3)", "1M", "a.size", "M:log", ["M", "M"]]
)
def test_bad_features_are_refused_with_the_spelling(bad):
    with pytest.raises(kernelkit.ArgumentError):
        KeySpec.parse(bad)


# --- precedence -----------------------------------------------------------------------------


def lookup_of(impl, config, where="test"):
    return lambda p, t, key: (impl, config, where)


def test_precedence_and_provenance():
    op, p, t = make_op(), problem(m=1), target()
    tuned = Config({"BM": 64}, (128,))
    tabled = Config({"BM": 128}, (256,))
    db, table = lookup_of("tiled", tuned), lookup_of("mm/tiled", tabled)
    # database beats table beats microkernel beats heuristic beats default
    assert select(op, p, t, database=db, table=table).choice.source == "database"
    assert select(op, p, t, database=db, table=table).choice.config == tuned
    assert select(op, p, t, table=table).choice.config == tabled
    assert select(op, p, t).choice.impl == "mm/gemv"  # microkernel, M <= 16
    c = select(op, problem(m=8, n=100), target()).choice
    assert (c.source, c.reason) == ("microkernel", "priority 10; pads K to a multiple of 8")
    c = select(op, problem(m=1000), t).choice
    assert (c.impl, c.source, c.config) == ("mm/tiled", "default", Config({"BM": 64}, (128,)))
    assert c.grid == (4096, 16, 1)
    # an override beats everything
    o = Override("tiled", Config({"BM": 8}, (32,)))
    c = select(op, p, t, override=o, database=db, table=table).choice
    assert (c.source, c.config, c.grid) == ("override", Config({"BM": 8}, (32,)), (4096, 1, 1))
    assert PROVENANCE.index("override") < PROVENANCE.index("database") < PROVENANCE.index("default")


def test_heuristic_when_no_microkernel_matches():
    op = make_op()
    op.implementations = [i for i in op.implementations if i.kind == "generic"]
    c = select(op, problem(m=3), target()).choice
    assert (c.source, c.config) == ("heuristic", Config({"BM": 16}, (64,)))


def test_every_candidate_a_rule_returns_is_legal_or_refused_with_why():
    op, p, t = make_op(), problem(m=1), target()
    big, shared = Config({"BM": 1}, (2048,)), Config({"BM": 1}, (32,), 1 << 20)
    tiled = op.get("tiled")
    op.implementations[op.implementations.index(tiled)] = dataclasses.replace(
        tiled, configs=(*tiled.configs, big, shared)
    )
    cases = [
        (lookup_of("gone", None, "db record"), "no implementation 'gone'"),
        (lookup_of("wgmma", None), "needs arch_specific"),
        (lookup_of("tiled", big), "2048 threads"),  # listed, but past the target's limits
        (lookup_of("tiled", shared), "shared_memory"),
        (lookup_of("tiled", Config({"BM": 0}, (64,))), "is not one of tiled's"),
    ]
    for db, why in cases:
        sel = select(op, p, t, database=db)
        assert sel.choice.source == "microkernel"  # the next rule decided
        (refused,) = [c for c in sel.considered if c.source == "database"]
        assert why in refused.verdict
        assert why in sel.explain()


def test_microkernels_by_priority_and_requirements():
    op = make_op()
    hopper = target(features=("bf16", "arch_specific"))
    assert select(op, problem(m=1), hopper).choice.impl == "mm/wgmma"  # priority 20
    sel = select(op, problem(m=1), target(arch="sm_80", name="A100"))
    assert sel.choice.impl == "mm/gemv"
    assert "needs arch_specific, which A100 (sm_80) lacks" in sel.explain()


def test_a_microkernel_that_defers_leaves_the_problem_to_the_heuristics_not_to_tables():
    """``defers``: the rules pass the microkernel over (saying why), the heuristics decide; a
    table, the database or an override naming it is still served."""
    op = make_op()
    gemv = op.get("gemv")
    defers = lambda p, t: "M = 1: tiled is faster" if p.attr("M") == 1 else None
    op.implementations[op.implementations.index(gemv)] = dataclasses.replace(gemv, defers=defers)
    sel = select(op, problem(m=1), target())
    assert (sel.choice.impl, sel.choice.source) == ("mm/tiled", "heuristic")
    assert "mm/gemv: passed over: M = 1: tiled is faster" in sel.explain()
    assert select(op, problem(m=2), target()).choice.impl == "mm/gemv"  # not deferred at M = 2
    # a generic implementation that defers: its heuristic is passed over, not asked
    op.implementations.remove(op.get("gemv"))
    tiled = op.get("tiled")
    op.implementations[op.implementations.index(tiled)] = dataclasses.replace(tiled, defers=defers)
    sel = select(op, problem(m=1), target())
    assert (sel.choice.impl, sel.choice.source) == ("mm/tiled", "default")
    assert "heuristic mm/tiled: passed over: M = 1: tiled is faster" in sel.explain()
    forced = select(op, problem(m=1), target(), override=Override("tiled")).choice
    assert forced.config == Config({"BM": 16}, (64,))  # its heuristic's config, when named
    # a rule that cannot read the problem defers nothing (as a match rule's error is a verdict)
    unreadable = lambda p, t: p.attr("no such attribute")
    op.implementations[op.implementations.index(op.get("tiled"))] = dataclasses.replace(
        tiled, defers=unreadable
    )
    assert select(op, problem(m=1), target()).choice.source == "heuristic"
    op.implementations.append(dataclasses.replace(gemv, defers=defers))
    for source, kwargs in (
        ("table", {"table": lookup_of("mm/gemv", Config())}),
        ("database", {"database": lookup_of("gemv", Config())}),
        ("override", {"override": Override("gemv")}),
    ):
        c = select(op, problem(m=1), target(), **kwargs).choice
        assert (c.impl, c.source) == ("mm/gemv", source)


def test_an_illegal_override_is_an_error_not_a_silent_replacement():
    op = make_op()
    with pytest.raises(kernelkit.ArgumentError, match=r"forced 'gemv'.*M = 1000 > 16"):
        select(op, problem(m=1000), target(), override=Override("gemv"))
    with pytest.raises(kernelkit.ArgumentError, match="no implementation 'nope'"):
        select(op, problem(), target(), override=Override("nope"))


def test_no_implementation_at_all_is_a_clear_error():
    op = Op("empty", key=["M"])
    op.register(
        Implementation(
            "only_small",
            run=lambda c, x: None,
            grid=grid_rule,
            configs=(Config(),),
            match=lambda p, t: "too big",
        )
    )
    with pytest.raises(kernelkit.ArgumentError, match=r"(?s)no implementation can run.*too big"):
        select(op, problem(), target())


def test_selection_is_pure_and_golden():
    op = make_op()
    first = select(op, problem(m=100), target()).choice
    again = select(op, problem(m=100), target()).choice
    assert first == again
    assert json.loads(first.to_json()) == {
        "op": "mm",
        "impl": "mm/tiled",
        "config": {"template": [["BM", 64]], "threadgroup": [128, 1, 1], "shared_memory": 0},
        "grid": [4096, 2, 1],
        "source": "default",
        "key": [
            ["a.dtype", "bfloat16"],
            ["M:ranges(1,17,129)", "[17,129)"],
            ["N", "4096"],
            ["K", "4096"],
        ],
        "reason": "",
    }


def test_registration_errors():
    op = make_op()
    with pytest.raises(kernelkit.ArgumentError, match="registered twice"):
        op.register(Implementation("tiled", run=print, grid=grid_rule, configs=(Config(),)))
    with pytest.raises(kernelkit.ArgumentError, match="grid rule"):
        Implementation("g", run=print, configs=(Config(),))
    with pytest.raises(kernelkit.ArgumentError, match="configs or a default"):
        Implementation("g", run=print, grid=grid_rule)


# --- overrides ------------------------------------------------------------------------------


def test_force_context_manager_nests_and_unwinds():
    assert forced("mm") is None
    with force("mm", "tiled", {"BM": 8, "threadgroup": (32,)}):
        assert forced("mm") == Override("tiled", Config({"BM": 8}, (32,)), "kernelkit.force")
        with force("mm", "gemv"):
            assert forced("mm").impl == "gemv"
        assert forced("mm").impl == "tiled"
        assert forced("other") is None
    assert forced("mm") is None


def test_force_from_the_environment(monkeypatch):
    from kernelkit import _config

    monkeypatch.setenv("KERNELKIT_SELECT_FORCE", "mm=tiled:BM=8,threadgroup=32x2,T=float16;x=y")
    _config.reload()
    try:
        o = forced("mm")
        assert o == Override(
            "tiled", Config({"BM": 8, "T": "float16"}, (32, 2)), "KERNELKIT_SELECT_FORCE"
        )
        assert forced("x").impl == "y" and forced("z") is None
        with force("mm", "gemv"):  # code beats the environment
            assert forced("mm").impl == "gemv"
    finally:
        monkeypatch.delenv("KERNELKIT_SELECT_FORCE")
        _config.reload()


@pytest.mark.parametrize("bad", ["mm", "mm=", "=tiled", "mm=tiled:BM", "mm=tiled:threadgroup=0"])
def test_bad_force_text_names_the_entry(bad):
    with pytest.raises(kernelkit.KernelkitError):
        parse_force(bad)


def test_a_stored_config_that_does_not_fit_the_problem_is_refused():
    op = make_op()
    small = op.get("tiled")
    op.implementations[op.implementations.index(small)] = Implementation(
        "tiled",
        run=small.run,
        grid=grid_rule,
        configs=(*small.configs, Config({"BM": 2})),
        fits=lambda p, c: None if p.attr("M") <= 4 * c.values["BM"] else "M too large for BM",
    )
    sel = select(op, problem(m=200), target(), database=lookup_of("tiled", Config({"BM": 2})))
    assert "M too large for BM" in sel.explain()
    assert sel.choice.source == "default" and sel.choice.config.values["BM"] == 64


@pytest.mark.parametrize("feature", ["M:ranges(1,2,3,5,9,17,65,257)", "M:ranges(4)", "M:pow2"])
def test_span_is_the_bucket_of_a_label(feature):
    # a table row written from a key covers exactly the sizes of the key's bucket
    f = Feature.parse(feature)
    assert f.unbucketed == "M"
    for v in range(1, 2100):
        lo, hi = f.span(f.label(v))
        assert (lo is None or lo <= v) and (hi is None or v <= hi), (v, f.label(v), lo, hi)
        for edge in (lo, hi):
            if edge is not None:
                assert f.label(edge) == f.label(v)
        if lo is not None and lo > 1:
            assert f.label(lo - 1) != f.label(v)
        if hi is not None:
            assert f.label(hi + 1) != f.label(v)
    assert Feature.parse("M").span("7") is None  # exact: no span
    assert f.span("[2,9)") is None and f.span("12") is None and f.span("x") is None


def test_a_lookup_may_give_several_candidates_the_first_legal_wins():
    op, p, t = make_op(), problem(m=200), target()
    rows = [
        ("gone", Config(), "row 0"),  # no such implementation
        ("tiled", Config({"BM": 32}, (64,)), "row 1"),  # not one of tiled's configs
        ("gemv", Config(), "row 2"),  # a microkernel that does not match M = 200
        ("tiled", Config({"BM": 128}, (256,)), "row 3"),
    ]
    sel = select(op, p, t, table=lambda p, t, key: rows)
    assert (sel.choice.source, sel.choice.config, sel.choice.reason) == (
        "table",
        Config({"BM": 128}, (256,)),
        "row 3",
    )
    verdicts = [c.verdict for c in sel.considered if c.source == "table"]
    assert "no implementation 'gone'" in verdicts[0] and "(row 0)" in verdicts[0]
    assert "config [BM=32 threadgroup=64x1x1] is not one of tiled's" in verdicts[1]
    assert "M = 200 > 16" in verdicts[2] and verdicts[3] == "chosen"
    assert sel.problem is p and sel.target is t  # what the decision was made for
    # a record naming a config outside the list is passed over too, never compiled
    sel = select(op, p, t, database=lookup_of("tiled", Config({"BM": 32}, (64,))))
    assert sel.choice.source == "default"
    assert "config [BM=32 threadgroup=64x1x1] is not one of tiled's" in sel.explain()
    # every row refused: the next rule decides; an empty list is "no entry"
    sel = select(op, p, t, table=lambda p, t, key: rows[:3])
    assert sel.choice.source == "default" and "refused" in sel.explain()
    assert "table: no entry" in select(op, p, t, table=lambda p, t, key: []).explain()


def test_a_stored_config_must_match_an_offered_one_in_type_too():
    op = Op("flags", key=["M"])
    op.register(
        Implementation("g", run=lambda c, call: None, grid=grid_rule, configs=(Config({"F": 1}),))
    )
    p, t = problem(m=8), target()
    assert Config({"F": True}) == Config({"F": 1})  # Python's view; the kernel sees true vs 1
    for source in ("database", "table"):
        sel = select(op, p, t, **{source: lookup_of("g", Config({"F": True}))})
        assert sel.choice.source == "default" and "is not one of g's" in sel.explain()
    assert select(op, p, t, database=lookup_of("g", Config({"F": 1}))).choice.source == "database"

"""Shipped tables: YAML and JSON files, exact and range matching, precedence, bad files."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from kernelkit._records import ArgFacts, Problem, Target
from kernelkit._select import tables
from kernelkit._select.records import Config
from kernelkit._select.tables import BadTable, Table, TableEntry, shipped_tables

EXAMPLE = Path(__file__).parent / "tables" / "matmul.example.yaml"


def target(arch: str = "sm_90", name: str = "NVIDIA H100 80GB HBM3") -> Target:
    return Target("cuda", 0, arch, name, 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 0, 0)


def problem(m: int, k: int = 4096, dtype: str = "float16") -> Problem:
    a = ArgFacts("a", "array", dtype, (m, k))
    return Problem("matmul", (a,), attrs=(("M", m), ("K", k)))


def entry(impl: str, **kw) -> TableEntry:
    return TableEntry("matmul", impl, Config(), **kw)


def quiet_load(paths) -> Table:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return Table.load(paths)


# files --------------------------------------------------------------------------------------------
def test_example_yaml_loads_with_file_defaults() -> None:
    t = quiet_load([EXAMPLE])
    assert len(t.entries) == 4 and all(e.op == "matmul" for e in t.entries)
    first = t.entries[0]
    assert (first.arch, first.device_name) == ("sm_90", "H100")
    assert first.exact == (("K", 4096), ("a.dtype", "float16"))
    assert first.ranges == (("M", 1, 16),)
    assert first.config == Config(template={"BM": 16, "BN": 128, "SPLIT": 4}, threadgroup=(128,))
    assert t.entries[2].ranges == (("M", 129, None),)
    assert t.entries[3].exact == (("a.dtype", "float16"), ("a.shape[1]", 4096))
    assert str(EXAMPLE) in first.where and first.where.endswith("entry 0")


def test_yaml_and_json_give_the_same_entries(tmp_path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    (tmp_path / "t.json").write_text(json.dumps(doc))
    assert quiet_load([tmp_path / "t.json"]).entries == quiet_load([EXAMPLE]).entries


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_write_round_trip(tmp_path, suffix) -> None:
    entries = quiet_load([EXAMPLE]).entries
    path = tmp_path / f"matmul.test{suffix}"
    Table.write(path, entries)
    again = quiet_load([path]).entries
    assert again == entries and [e.note for e in again] == [e.note for e in entries]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left


# matching -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("m", "k", "dtype", "tgt", "impl"),
    [
        (1, 4096, "float16", target(), "matmul/splitk"),  # range's lower bound is inclusive
        (16, 4096, "float16", target(), "matmul/splitk"),  # and its upper bound
        (17, 4096, "float16", target(), "matmul/tiled"),  # out of [1, 16]: the arch's range
        (16, 2048, "float16", target(), "matmul/tiled"),  # K is exact: 2048 is not 4096
        (8, 4096, "float16", target(name="NVIDIA H200"), "matmul/tiled"),  # name not matched
        (128, 4096, "float16", target(), "matmul/tiled"),
        (129, 4096, "float16", target(), "matmul/tiled"),  # [129, null]: no upper bound
        (10**9, 4096, "float16", target(), "matmul/tiled"),
        (8, 4096, "float16", target(arch="sm_80", name="A100"), "matmul/generic"),  # any arch
        (8, 2048, "float16", target(arch="sm_80", name="A100"), None),  # a.shape[1] exact
        (8, 4096, "float32", target(), None),  # dtype exact
    ],
)
def test_exact_and_range_matching(m, k, dtype, tgt, impl) -> None:
    got = quiet_load([EXAMPLE]).lookup("matmul", tgt, problem(m, k, dtype))
    assert (got.impl if got else None) == impl
    if got is not None and got.impl == "matmul/tiled":
        assert got.config.values["BM"] == (64 if m <= 128 else 128)


def test_other_ops_and_missing_features_do_not_match() -> None:
    t = quiet_load([EXAMPLE])
    assert t.lookup("conv", target(), problem(8)) is None
    bare = Problem("matmul", (ArgFacts("b", "array", "float16", (8, 8)),))  # no a, M or K
    assert t.lookup("matmul", target(), bare) is None


def test_bucketed_features_match_their_label() -> None:
    t = Table([entry("matmul/pow2", exact=(("M:pow2", 32),))])
    assert t.lookup("matmul", target(), problem(17)).impl == "matmul/pow2"
    assert t.lookup("matmul", target(), problem(32)).impl == "matmul/pow2"
    assert t.lookup("matmul", target(), problem(33)) is None


def test_precedence() -> None:
    arch = entry("arch", arch="sm_90")
    name = entry("name", device_name="H100")
    both = entry("both", arch="sm_90", device_name="H100")
    anywhere = entry("any")
    exact = entry("exact", exact=(("M", 8),))
    ranged = entry("range", ranges=(("M", 1, 64),))
    narrow = entry("narrow", ranges=(("M", 4, 9),))
    two = entry("two", exact=(("M", 8), ("a.dtype", "float16")))
    p, t = problem(8), target()

    def best(*entries: TableEntry) -> str:
        found = Table(entries).lookup("matmul", t, p)
        assert found is not None
        return found.impl

    # device first: name and arch > name > arch > none, whatever the problem match
    assert best(anywhere, arch, name, both) == "both"
    assert best(arch, name) == "name"
    assert best(two, arch) == "arch"
    # then exact over ranges, more exact features first, then narrower ranges
    assert best(ranged, exact) == "exact"
    assert best(exact, two) == "two"
    assert best(ranged, narrow) == "narrow"
    assert best(anywhere, ranged) == "range"
    # a tie goes to the entry loaded first (file order, then order in the file)
    first, second = entry("first", exact=(("M", 8),)), entry("second", exact=(("M", 8),))
    assert best(first, second) == "first" and best(second, first) == "second"


def test_ties_across_files_go_to_the_first_file(tmp_path) -> None:
    for name in ("a", "b"):
        Table.write(tmp_path / f"{name}.yaml", [entry(f"from-{name}", exact=(("M", 8),))])
    t = quiet_load([tmp_path / "b.yaml", tmp_path / "a.yaml"])
    assert t.lookup("matmul", target(), problem(8)).impl == "from-b"
    assert any("matches what" in m for m in t.validate())  # the shadowed one is reported


# bad tables ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("entries: [", "unusable (ParserError"),
        ("[1, 2]", "no 'entries' list"),
        ("op: matmul", "no 'entries' list"),
        ("kernelkit_table: 7\nentries: []", "format 7"),
    ],
)
def test_a_malformed_file_is_a_warning_naming_it(tmp_path, text, why) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.warns(RuntimeWarning) as caught:
        t = Table.load([bad, EXAMPLE])
    assert len(caught) == 1 and str(bad) in str(caught[0].message)
    assert why in str(caught[0].message)
    assert len(t.entries) == 4  # the good file still counts
    assert t.lookup("matmul", target(), problem(8)).impl == "matmul/splitk"


def test_bad_json_file(tmp_path) -> None:
    (tmp_path / "t.json").write_text("{not json")
    with pytest.warns(RuntimeWarning, match=r"t\.json is unusable \(JSONDecodeError"):
        assert Table.load([tmp_path / "t.json"]).entries == ()


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({"impl": "x/y", "mtach": {}}, "unknown fields"),
        ({"match": {"M": 1}}, "'op' and 'impl'"),
        ({"impl": "x/y", "match": {"M::": 1}}, "cannot read feature"),
        ({"impl": "x/y", "match": {"M": [3, 1]}}, "lo <= hi"),
        ({"impl": "x/y", "match": {"M": [1, 2, 3]}}, "lo <= hi"),
        ({"impl": "x/y", "match": {"M": [1.5, 2]}}, "lo <= hi"),
        ({"impl": "x/y", "match": {"a.dtype": [1, 2]}}, "only an unbucketed size"),
        ({"impl": "x/y", "match": {"M:pow2": [1, 2]}}, "only an unbucketed size"),
        ({"impl": "x/y", "match": {"M": 1.5}}, "a value is"),
        ({"impl": "x/y", "device": "H100"}, "'device' is a mapping"),
        ({"impl": "x/y", "config": {"threadgroup": [0]}}, "bad config"),
        ({"impl": "x/y", "config": {"template": {"T": 1.5}}}, "bad config"),
        ("just text", "an entry is a mapping"),
    ],
)
def test_a_malformed_entry_is_a_warning_naming_file_and_entry(tmp_path, item, why) -> None:
    good = {"impl": "matmul/ok", "match": {"M": 8}}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"op": "matmul", "entries": [good, item]}))
    with pytest.warns(RuntimeWarning) as caught:
        t = Table.load([path])
    message = str(caught[0].message)
    assert len(caught) == 1 and f"{path} entry 1" in message and why in message, message
    assert [e.impl for e in t.entries] == ["matmul/ok"]
    assert t.validate() == [message.removeprefix("kernelkit: ")]


def test_unknown_implementation_is_skipped_at_lookup_with_one_warning() -> None:
    t = quiet_load([EXAMPLE])

    def known(op: str, impl: str) -> bool:
        return impl != "matmul/splitk"

    with pytest.warns(RuntimeWarning, match=r"entry 0 names implementation 'matmul/splitk'"):
        got = t.lookup("matmul", target(), problem(8), known_impl=known)
    assert got.impl == "matmul/tiled"  # the next most specific entry
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per entry, not once per lookup
        assert t.lookup("matmul", target(), problem(8), known_impl=known).impl == "matmul/tiled"
    problems = t.validate(known)
    assert len(problems) == 1 and "'matmul/splitk' of 'matmul' does not exist" in problems[0]
    assert t.validate(lambda op, impl: True) == []


def test_entries_are_checked_at_construction() -> None:
    with pytest.raises(BadTable, match="lo <= hi"):
        TableEntry.from_dict({"op": "m", "impl": "m/x", "match": {"M": [2, 1]}})


# shipped tables ----------------------------------------------------------------------------------
def test_shipped_tables_load_once_and_hold_no_made_up_data(monkeypatch) -> None:
    monkeypatch.setattr(tables, "_shipped", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = shipped_tables()
    assert shipped_tables() is t and t.validate() == []
    folder = Path(tables.__file__).parents[1] / "tables"
    assert (folder / "README.md").exists()
    assert len(t.entries) == sum(
        len(yaml.safe_load(p.read_text())["entries"])
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml", ".json")
    )


# rows written from a tuned key -----------------------------------------------------------------
def test_a_row_from_a_key_covers_the_bucket_and_round_trips(tmp_path) -> None:
    key = (
        ("a.dtype", "float16"),
        ("K", "4096"),
        ("M:ranges(1,2,3,5,9,17)", "[3,5)"),
        ("rows:pow2", "64"),
        ("transpose_b", "True"),
        ("bias", "None"),
    )
    e = TableEntry.from_key("matmul", "matmul/tiled", Config({"BM": 64}), key, "sm_90", "H100")
    assert e.exact == (("K", 4096), ("a.dtype", "float16"), ("bias", "None"), ("transpose_b", True))
    assert e.ranges == (("M", 3, 4), ("rows", 33, 64))
    path = tmp_path / "matmul.h100.yaml"
    Table.write(path, [e], op="matmul", device={"arch": "sm_90", "name": "H100"})
    doc = yaml.safe_load(path.read_text())
    assert doc["op"] == "matmul" and doc["device"] == {"arch": "sm_90", "name": "H100"}
    assert set(doc["entries"][0]) == {"match", "impl", "config"}  # the file's defaults apply
    (again,) = quiet_load([path]).entries
    assert again == e
    t = Table([again])

    def p(m: int, rows: int = 50) -> Problem:
        a = ArgFacts("a", "array", "float16", (m, 4096))
        attrs = (("M", m), ("K", 4096), ("rows", rows), ("transpose_b", True), ("bias", None))
        return Problem("matmul", (a,), attrs=attrs)

    assert [m for m in range(1, 9) if t.lookup("matmul", target(), p(m))] == [3, 4]
    assert t.lookup("matmul", target(), p(3, rows=65)) is None
    with pytest.raises(BadTable, match="has no device"):
        Table.write(path, [entry("matmul/x")], device={"arch": "sm_90"})


def test_h100_and_h200_rows_are_told_apart_by_name() -> None:
    # both are sm_90: a row names the device (a substring of its name) to apply to one only
    rows = [entry(f"matmul/{d}", arch="sm_90", device_name=d.upper()) for d in ("h100", "h200")]
    t = Table(rows)
    for name, impl in [
        ("NVIDIA H100 80GB HBM3", "matmul/h100"),
        ("NVIDIA H100 PCIe", "matmul/h100"),
        ("NVIDIA H200", "matmul/h200"),
    ]:
        assert [e.impl for e in t.matches("matmul", target(name=name), problem(8))] == [impl]
    assert t.matches("matmul", target("sm_80", "NVIDIA A100-SXM4-80GB"), problem(8)) == []


def test_matches_lists_every_matching_row_most_specific_first() -> None:
    t = quiet_load([EXAMPLE])
    got = [e.impl for e in t.matches("matmul", target(), problem(8))]
    assert got == ["matmul/splitk", "matmul/tiled", "matmul/generic"]
    assert t.lookup("matmul", target(), problem(8)).impl == got[0]


def test_shipped_rows_name_implementations_and_configs_the_ops_have() -> None:
    # a kernel change that removes or renames a config must retune (or drop) the rows naming it
    from kernelkit._workflows.op_cases import op_object

    for e in shipped_tables().entries:
        impl = op_object(e.op).get(e.impl)
        assert impl is not None, f"{e.describe()}: no such implementation"
        if impl.kind == "generic":
            listed = e.config in impl.configs or e.config == impl.default
            assert listed, f"{e.describe()}: [{e.config.describe()}] is not one of its configs"

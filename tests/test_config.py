"""Tests of pytest_jaxport.model.config, model.pyproject, model.validators and model.marker.

Unit tests of config parsing, validation messages and precedence (no pytest plumbing)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_jaxport.model.classification import all_libraries
from pytest_jaxport.model.config import (
    MIGRATE_DESTINATIONS,
    ConfigError,
    Overrides,
    ProjectConfig,
    Setting,
)
from pytest_jaxport.model.hints import platform_hint, platforms_meant
from pytest_jaxport.model.marker import merge_marks, parse_marker
from pytest_jaxport.model.platforms import PLATFORM_ALIASES, PLATFORM_VENDORS, PLATFORMS
from pytest_jaxport.model.pyproject import PROJECT_KEYS, TOP_KEYS, load_project, parse_project


def test_defaults_without_file(tmp_path: Path) -> None:
    project = load_project(tmp_path / "pyproject.toml")
    assert project.platforms == ("cpu", "cuda", "rocm", "tpu")
    assert project.reference == "cpu"
    budget = project.resolve().budget("cuda")
    assert budget.max_custom_calls is None
    assert budget.max_library_calls == {}


def test_every_key_is_read_by_one_row_of_the_key_table() -> None:
    assert sorted(TOP_KEYS) == sorted(key.name for key in PROJECT_KEYS)
    # where a key is not written its row's default is read: the budget's origin is the file's
    project = parse_project({}, "pyproject.toml")
    assert project.budget.origin == "pyproject.toml [tool.jaxport.budget]"
    assert project == replace(ProjectConfig(source="pyproject.toml"), budget=project.budget)


def test_keys_are_read_after_the_keys_they_are_checked_against() -> None:
    """Of two wrong keys the one read first is said: ``reference`` (read against
    ``platforms``) before ``compile``, ``migrate_to`` after ``home``."""
    with pytest.raises(ConfigError, match=r"\] reference: expected one of the configured"):
        parse_project({"compile": ["amd"], "reference": "tpu", "platforms": ["cpu"]}, "p")
    table = {"migrate_to": ["cuda"], "home": "tpu", "platforms": ["cpu", "cuda", "tpu"]}
    assert parse_project(table, "p").migrate_to == ("cuda",)
    with pytest.raises(ConfigError, match="reference"):
        parse_project({"platforms": ["cuda"]}, "p")  # the default reference, cpu, is checked


def test_unparsable_toml_names_file(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.jaxport\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml: not valid TOML: "):
        load_project(path, display="pyproject.toml")


def test_section_that_is_not_a_table(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool]\njaxport = 3\n")
    with pytest.raises(ConfigError, match=r"\[tool\] jaxport: expected a table"):
        load_project(path, display="pyproject.toml")


def test_precedence_defaults_project_platform_marker() -> None:
    project = parse_project(
        {
            "budget": {
                "max_vendor_calls": 10,
                "max_custom_calls": 1,
                "max_library_calls": {"cudnn": 0, "nccl": 4},
                "cuda": {"max_vendor_calls": 5, "max_library_calls": {"cudnn": 2}},
            }
        },
        "pyproject.toml",
    )
    marker = merge_marks([("test_x", parse_marker((), {"max_vendor_calls": 3}, "test_x"))])
    cuda = project.resolve(marker).budget("cuda")
    assert cuda.max_vendor_calls == Setting(value=3, origin="test_x")
    assert cuda.max_custom_calls == Setting(value=1, origin="pyproject.toml [tool.jaxport.budget]")
    assert cuda.max_library_calls["cudnn"] == Setting(
        value=2, origin="pyproject.toml [tool.jaxport.budget.cuda]"
    )
    assert cuda.max_library_calls["nccl"].value == 4
    rocm = project.resolve().budget("rocm")
    assert rocm.max_vendor_calls == Setting(value=10, origin="pyproject.toml [tool.jaxport.budget]")
    assert rocm.max_library_calls["cudnn"].value == 0


def test_closest_mark_wins_per_key() -> None:
    overrides = merge_marks(
        [
            ("function", {"max_vendor_calls": 1}),
            ("class", {"max_vendor_calls": 2, "max_custom_calls": 0}),
            ("module", {"max_custom_calls": 5, "rtol": 0.1}),
        ]
    )
    assert overrides.get("max_vendor_calls") == Setting(value=1, origin="function")
    assert overrides.get("max_custom_calls") == Setting(value=0, origin="class")
    assert overrides.get("rtol") == Setting(value=0.1, origin="module")


def test_tolerance_precedence() -> None:
    project = parse_project(
        {
            "tolerance": {
                "float32": {"rtol": 1e-4, "atol": 1e-5},
                "cuda": {"float32": {"rtol": 1e-2}},
            }
        },
        "pyproject.toml",
    )
    resolved = project.resolve()
    assert resolved.tolerance("cuda", "float32").rtol == 1e-2
    assert resolved.tolerance("cuda", "float32").atol == 1e-5
    assert resolved.tolerance("tpu", "float32").rtol == 1e-4
    assert resolved.tolerance("tpu", "bfloat16").rtol is None
    marked = project.resolve(Overrides(values={"atol": Setting(value=0.5, origin="m")}))
    assert marked.tolerance("cuda", "float32").atol == 0.5
    assert marked.tolerance("cuda", "float32").rtol == 1e-2


def test_must_lower_extends_lowering_platforms() -> None:
    project = parse_project(
        {"platforms": ["cpu", "cuda"], "budget": {"must_lower": ["tpu"]}}, "pyproject.toml"
    )
    assert project.resolve().lowering_platforms() == ("cpu", "cuda", "tpu")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_custom_calls": True}, "expected a non-negative integer, found boolean true"),
        ({"must_lower": "cuda"}, "must_lower: expected a list of platforms"),
        ({"platforms": []}, "platforms: expected a non-empty list of platforms"),
        ({"platforms": ["cpu", "cpu"]}, "platforms: expected each platform at most once"),
        ({"allow_targets": [""]}, "allow_targets: expected non-empty strings only"),
        ({"rtol": "small"}, "rtol: expected a non-negative number, found string 'small'"),
        ({"atol": float("nan")}, "atol: expected a finite non-negative number"),
        ({"max_library_calls": {"cudnn": -2}}, "max_library_calls.cudnn: expected a non-negative"),
        ({"max_library_calls": 3}, "max_library_calls: expected a table of library = limit"),
        ({"reference": "gpu"}, "reference: unknown platform 'gpu'"),
    ],
)
def test_marker_values_are_validated(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^@pytest\.mark\.portable on t\.py::t: ") as info:
        parse_marker((), kwargs, "t.py::t")
    assert message in str(info.value)


def test_integral_float_limit_is_accepted() -> None:
    project = parse_project({"budget": {"max_vendor_calls": 3.0}}, "p")
    assert project.resolve().budget("cpu").max_vendor_calls == Setting(
        value=3, origin="p [tool.jaxport.budget]"
    )


def test_budget_sources_for_header() -> None:
    project = parse_project(
        {"budget": {"max_custom_calls": 0, "tpu": {"max_vendor_calls": 0}}}, "pyproject.toml"
    )
    assert project.budget_sources() == [
        "pyproject.toml [tool.jaxport.budget]",
        "pyproject.toml [tool.jaxport.budget.tpu]",
    ]


def test_must_trace_is_a_flag_in_tables_and_markers() -> None:
    project = parse_project(
        {"budget": {"must_trace": False, "cuda": {"must_trace": True}}}, "pyproject.toml"
    )
    resolved = project.resolve()
    assert resolved.budget("cuda").must_trace == Setting(
        value=True, origin="pyproject.toml [tool.jaxport.budget.cuda]"
    )
    assert resolved.budget("tpu").must_trace == Setting(
        value=False, origin="pyproject.toml [tool.jaxport.budget]"
    )
    assert parse_marker((), {"must_trace": True}, "t.py::t") == {"must_trace": True}
    with pytest.raises(ConfigError) as info:
        parse_project({"budget": {"must_trace": "yes"}}, "pyproject.toml")
    assert str(info.value) == (
        "pyproject.toml: [tool.jaxport.budget] must_trace: expected true or false, "
        "found string 'yes'"
    )
    with pytest.raises(ConfigError, match="must_trace: expected true or false, found int 1"):
        parse_marker((), {"must_trace": 1}, "t.py::t")


def test_emulate_is_validated_and_resolved_closest_first() -> None:
    project = parse_project(
        {"platforms": ["cpu", "cuda", "tpu"], "emulate": ["tpu", "cuda"]}, "pyproject.toml"
    )
    assert project.emulate == Setting(value=("tpu", "cuda"), origin="pyproject.toml [tool.jaxport]")
    assert project.resolve().emulate() == project.emulate
    # a marker's emulate wins; emulate=[] turns it off for that test
    marker = parse_marker((), {"emulate": ["cuda"]}, "t.py::t")
    resolved = project.resolve(merge_marks([("t.py::t", marker)]))
    assert resolved.emulate() == Setting(value=("cuda",), origin="t.py::t")
    off = project.resolve(merge_marks([("t.py::t", parse_marker((), {"emulate": []}, "t.py::t"))]))
    assert off.emulate() is None
    # a marker narrowing the platforms emulates only those it lowers for
    narrowed = project.resolve(
        merge_marks([("t.py::t", parse_marker((), {"platforms": ["cpu", "tpu"]}, "t.py::t"))])
    )
    assert narrowed.emulate() == Setting(value=("tpu",), origin="pyproject.toml [tool.jaxport]")
    assert parse_project({}, "p").resolve().emulate() is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"emulate": "tpu"},
         "pyproject.toml: [tool.jaxport] emulate: expected a list of platforms (from cuda, rocm, "
         "tpu, oneapi), found string 'tpu'"),
        ({"emulate": ["tpu", "tpu"]},
         "[tool.jaxport] emulate: expected each platform at most once, found array ['tpu', 'tpu']"),
        ({"emulate": ["gpu"]},
         "[tool.jaxport] emulate: expected platforms from cuda, rocm, tpu, oneapi, found string "
         "'gpu'"),
        ({"emulate": ["cpu"]}, "found string 'cpu' (cpu is executed, never emulated)"),
        ({"emulate": ["tpx"]}, "found string 'tpx' (did you mean 'tpu'?)"),
        ({"platforms": ["cpu", "cuda"], "emulate": ["tpu", "rocm"]},
         "[tool.jaxport] emulate: expected platforms among the platforms checks lower for (cpu, "
         "cuda), found 'tpu', 'rocm'; add them to platforms, or leave them out of emulate"),
    ],
)  # fmt: skip
def test_emulate_errors_name_the_file_key_and_what_was_found(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_project(table, "pyproject.toml")
    assert message in str(info.value)
    with pytest.raises(ConfigError, match="did you mean 'tpu'"):
        parse_marker((), {"emulate": ["tpx"]}, "t.py::t")


# -- hints: a library named in a budget key, a vendor named for a platform (issue 39) --------


@pytest.mark.parametrize("library", sorted(all_libraries()))
def test_a_budget_key_naming_a_library_points_at_max_library_calls(library: str) -> None:
    key = f"max_{library}_calls"
    hint = f"unknown key {key!r} (did you mean max_library_calls = {{ {library} = 2 }}?)"
    for table, where in (
        ({"budget": {key: 2}}, "[tool.jaxport.budget]"),
        ({"budget": {"cuda": {key: 2}}}, "[tool.jaxport.budget.cuda]"),
        ({"audit": {"fail_on": {key: 2}}}, "[tool.jaxport.audit.fail_on]"),
        ({"audit": {"fail_on": {"tpu": {key: 2}}}}, "[tool.jaxport.audit.fail_on.tpu]"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_project(table, "pyproject.toml")
        assert str(info.value).startswith(f"pyproject.toml: {where}: {hint}; known: ")
    with pytest.raises(ConfigError) as info:
        parse_marker((), {key: 2}, "t.py::t")
    assert str(info.value).startswith(
        f"@pytest.mark.portable on t.py::t: unknown keyword {key!r} (did you mean "
        f'max_library_calls={{"{library}": 2}}?); known: '
    )


@pytest.mark.parametrize(
    ("key", "value", "hint"),
    [
        ("max_cuDNN_calls", 0, "(did you mean max_library_calls = { cudnn = 0 }?)"),
        ("max_cublaslt_calls", 3.0, "(did you mean max_library_calls = { cublas = 3 }?)"),
        ("nccl", "four", "(did you mean max_library_calls = { nccl = N }?)"),
        ("max_cudnn_share", 0.1, "(did you mean 'max_custom_share'?)"),  # shares are per layer
        ("max_custum_calls", 0, "(did you mean 'max_custom_calls'?)"),
    ],
)
def test_library_hint_spellings(key: str, value: object, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_project({"budget": {key: value}}, "pyproject.toml")
    assert f"unknown key {key!r} {hint}; known: " in str(info.value)


@pytest.mark.parametrize(
    ("word", "platform", "vendor"),
    [
        ("nvidia", "cuda", "NVIDIA"),
        ("NVIDIA", "cuda", "NVIDIA"),
        ("cuda12", "cuda", "NVIDIA"),
        ("nvidia-gpu", "cuda", "NVIDIA"),
        ("amd", "rocm", "AMD"),
        ("hip", "rocm", "AMD"),
        ("amd_gpu", "rocm", "AMD"),
        ("google", "tpu", "Google"),
        ("tpus", "tpu", "Google"),
        ("host", "cpu", "the host"),
        ("x86_64", "cpu", "the host"),
    ],
)
def test_a_vendor_or_hardware_name_for_a_platform_names_the_platform(
    word: str, platform: str, vendor: str
) -> None:
    hint = f"{word!r} (did you mean {platform!r}, {vendor}'s platform?)"
    named = [
        ({"platforms": ["cpu", word]}, f"[tool.jaxport] platforms: unknown platform {hint}"),
        ({"budget": {"must_lower": [word]}},
         f"[tool.jaxport.budget] must_lower: unknown platform {hint}"),
        ({"budget": {word: {"max_vendor_calls": 1}}},
         f"[tool.jaxport.budget]: unknown key or platform {hint}"),
        ({"audit": {"fail_on": {word: {"max_vendor_calls": 1}}}},
         f"[tool.jaxport.audit.fail_on]: unknown key or platform {hint}"),
        ({"tolerance": {word: {"float32": {"rtol": 1e-3}}}},
         f"[tool.jaxport.tolerance]: unknown dtype or platform {hint}"),
    ]  # fmt: skip
    if platform != "cuda":  # migrate_to prices moving off cuda; cuda's device is `target`
        named += [
            ({"migrate_to": [word]}, f"[tool.jaxport] migrate_to: unknown platform {hint}"),
        ]
    if platform in ("rocm", "tpu"):
        named.append(
            ({"devices": {word: "v5e"}}, f"[tool.jaxport] devices: unknown platform {hint}")
        )
    if platform != "cpu":
        named.append(({"emulate": [word]}, f"[tool.jaxport] emulate: expected platforms from "
                      f"cuda, rocm, tpu, oneapi, found string {hint}"))  # fmt: skip
    for table, message in named:
        with pytest.raises(ConfigError) as info:
            parse_project(table, "pyproject.toml")
        assert str(info.value).startswith(f"pyproject.toml: {message}"), str(info.value)
    for keyword in ("platforms", "must_lower", "reference"):
        value = word if keyword == "reference" else [word]
        with pytest.raises(ConfigError) as info:
            parse_marker((), {keyword: value}, "t.py::t")
        assert str(info.value).startswith(
            f"@pytest.mark.portable on t.py::t: {keyword}: unknown platform {hint}; "
            "expected one of cpu, cuda, rocm, tpu, oneapi"
        )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"migrate_to": ["rocm", "nvidia"]},
         "[tool.jaxport] migrate_to: expected non-NVIDIA targets "
         f"({', '.join(MIGRATE_DESTINATIONS)}): the cost model prices moving off cuda, the "
         "home platform ([tool.jaxport] home), found 'nvidia'"),
        ({"devices": {"nvidia": "h100"}},
         "[tool.jaxport] devices.nvidia: 'nvidia' is cuda here, and cuda's device is `target`"),
        ({"compile": ["amd"]},
         "[tool.jaxport] compile: expected platforms from cpu, cuda, tpu, found string 'amd' "
         "(AMD's platform is rocm: rocm and oneapi are counted at the lowered level only)"),
        ({"compile": ["gpu"]},
         "[tool.jaxport] compile: expected platforms from cpu, cuda, tpu, found string 'gpu' (did "
         "you mean 'cuda', NVIDIA's platform?)"),
        ({"emulate": ["host"]},
         "[tool.jaxport] emulate: expected platforms from cuda, rocm, tpu, oneapi, found string "
         "'host' (the host's platform is cpu: cpu is executed, never emulated)"),
        ({"budget": {"gpus": {"max_vendor_calls": 1}}},
         "[tool.jaxport.budget]: unknown key or platform 'gpus' ('gpus' is JAX's name for any "
         "GPU backend: write 'cuda' for NVIDIA, 'rocm' for AMD, 'oneapi' for Intel, or several)"),
    ],
)  # fmt: skip
def test_a_vendor_name_where_its_platform_is_not_a_choice(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_project(table, "pyproject.toml")
    assert str(info.value).startswith(f"pyproject.toml: {message}")


def test_platform_hints_are_derived_from_the_platform_declarations() -> None:
    assert set(PLATFORM_ALIASES) == set(PLATFORMS) == set(PLATFORM_VENDORS)
    for platform, words in PLATFORM_ALIASES.items():
        for word in words:
            assert platform in platforms_meant(word)
            assert platform_hint(word, (platform,)).startswith(f" (did you mean {platform!r}, ")
    assert platforms_meant("float32") == platforms_meant("max_vendor_calls") == ()
    assert platform_hint("nvidia", ("cpu", "tpu")) == ""  # no platform it means is a choice


# -- memory_growth: how much planned device memory may grow from the base (issue 56) ---------


def test_memory_growth_is_a_share_with_its_origin_and_a_default() -> None:
    set_here = parse_project({"memory_growth": 0.25}, "pyproject.toml")
    assert set_here.memory_threshold == Setting(value=0.25, origin="pyproject.toml [tool.jaxport]")
    assert parse_project({"memory_growth": 0}, "p").memory_threshold.value == 0.0
    default = parse_project({}, "pyproject.toml")
    assert default.memory_growth is None
    assert default.memory_threshold == Setting(value=0.1, origin="the default")


@pytest.mark.parametrize(
    ("value", "found"),
    [("10%", "found string '10%' (write 0.1)"), (-0.5, "found float -0.5"),
     (True, "found boolean true"), ([0.1], "found array [0.1]")],
)  # fmt: skip
def test_memory_growth_errors_name_the_file_key_and_what_was_found(
    value: object, found: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_project({"memory_growth": value}, "pyproject.toml")
    assert str(info.value) == (
        "pyproject.toml: [tool.jaxport] memory_growth: expected a share of the base's planned "
        f"memory, 0 or more (0.1: growth past 10% is flagged), {found}"
    )
    with pytest.raises(ConfigError, match="did you mean 'memory_growth'"):
        parse_project({"memory_grow": 0.1}, "pyproject.toml")


# -- the compiled level's keys (issue 55, items 5 and 7) -------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"platforms": ["cpu", "cuda"], "compile": ["tpu"]},
         "pyproject.toml: [tool.jaxport] compile: expected platforms among the platforms checks "
         "lower for (cpu, cuda), found 'tpu'; add it to platforms, or leave it out of compile"),
        ({"platforms": ["cpu"], "compile": ["cuda", "tpu"]},
         "found 'cuda', 'tpu'; add them to platforms, or leave them out of compile"),
    ],
)  # fmt: skip
def test_compile_names_only_platforms_the_checks_lower_for(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_project(table, "pyproject.toml")
    assert message in str(info.value)
    # a must_lower lowers for its platforms too: then they compile
    lowered = {**table, "budget": {"must_lower": table["compile"]}}
    assert parse_project(lowered, "pyproject.toml").compile == tuple(table["compile"])  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1e7, 1e300, float("inf"), float("nan"), 0, -1, "60", True])
def test_compile_time_limit_is_refused_outside_its_range_naming_it(limit: object) -> None:
    """Above a day the operating system's wait refuses it (``OverflowError: timeout is too
    large`` from every check): refused where it is written instead."""
    with pytest.raises(ConfigError) as raised:
        parse_project({"compile_time_limit": limit}, "pyproject.toml")
    assert str(raised.value).startswith(
        "pyproject.toml: [tool.jaxport] compile_time_limit: expected a number of seconds "
        "greater than 0 and at most 86,400 (a day; e.g. 60), found "
    )
    assert str(raised.value).endswith(repr(limit) if isinstance(limit, float) else "")


def test_compile_time_limit_takes_seconds_up_to_a_day() -> None:
    assert parse_project({"compile_time_limit": 86400}, "p").compile_time_limit == 86400.0
    assert parse_project({"compile_time_limit": 0.5}, "p").compile_time_limit == 0.5

"""pytest entry point: options, the ``portable`` marker, the ``jaxport`` fixture.

Loading this module imports neither JAX nor NumPy-heavy code; JAX is imported only when a
test calls ``jaxport.check``.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import inspect
from argparse import ArgumentTypeError
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_jaxport import hookspecs
from pytest_jaxport.cache import (
    CACHE_NAME,
    LOWERED_CACHE_NAME,
    LOWERED_FORMAT,
    CompiledCache,
    CompileSettings,
)
from pytest_jaxport.model.config import (
    COMPILE_PLATFORMS,
    ConfigError,
    ProjectConfig,
    Setting,
    default_migrate_to,
)
from pytest_jaxport.model.cost import CostModel
from pytest_jaxport.model.devices import (
    COMPILERS,
    Device,
    default_devices,
    device_from_gpu_description,
)
from pytest_jaxport.model.emulation import EMULATED_PLATFORMS
from pytest_jaxport.model.gpu import described_kind, load_gpu_description
from pytest_jaxport.model.hints import platform_hint
from pytest_jaxport.model.libtpu import compile_target
from pytest_jaxport.model.marker import portable
from pytest_jaxport.model.platforms import PLATFORMS, installed_release
from pytest_jaxport.model.pyproject import load_project, misspelt_tables
from pytest_jaxport.model.validators import (
    compile_platforms,
    compiled_among,
    emulate_platforms,
    emulated_among,
    platform_list,
)
from pytest_jaxport.report.ci import ci_settings
from pytest_jaxport.session import JaxportSession
from pytest_jaxport.session.judge import JAXPORT
from pytest_jaxport.session.settings import ReportRequest, SessionSettings
from pytest_jaxport.view.annotations import MODES as ANNOTATION_MODES
from pytest_jaxport.view.display import DisplayOptions, add_display_options, display_options
from pytest_jaxport.view.reporters import REPORTERS

if TYPE_CHECKING:
    from pytest_jaxport._jax.libtpu import TpuCompiler
    from pytest_jaxport.fixture import Jaxport

SESSION = pytest.StashKey[JaxportSession]()
REPORT_SUFFIXES = tuple(REPORTERS)
"""The suffixes ``--jaxport-report=PATH`` accepts: those a reporter is declared for."""


# -- command-line values, validated where the options declare them (``type=``): a bad one
# is pytest's usage error naming the option (exit code 4) ------------------------------------


def _names(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _platform_names(
    flag: str, rule: Callable[[str, object], tuple[str, ...]], value: str
) -> tuple[str, ...]:
    """``value``'s comma-separated platforms by ``rule``, the one ``[tool.jaxport]``'s list is
    held to; its message starts with where the list was given, which argparse says itself
    (``argument --jaxport-compile: ...``), so it is left out here."""
    try:
        return rule(flag, _names(value))
    except ConfigError as e:
        raise ArgumentTypeError(str(e).removeprefix(f"{flag}: ")) from None


def platforms_option(value: str) -> tuple[str, ...] | None:
    """``--jaxport-platforms=LIST``: platforms from :data:`PLATFORMS`, each once (an empty
    value: not given). Whether the reference is among them is checked with the project.

    >>> platforms_option("cpu, tpu")
    ('cpu', 'tpu')
    """
    return _platform_names("--jaxport-platforms", platform_list, value) if value else None


def compile_option(value: str) -> tuple[str, ...]:
    """``--jaxport-compile=LIST``: platforms from :data:`COMPILE_PLATFORMS`, each once;
    ``none`` (or nothing) for none."""
    if _names(value) in (["none"], []):
        return ()
    return _platform_names("--jaxport-compile", compile_platforms, value)


def emulate_option(value: str) -> tuple[str, ...]:
    """``--jaxport-emulate=LIST``: platforms from :data:`EMULATED_PLATFORMS`, each once;
    ``none`` (or nothing) for none. Whether the checks lower for them is checked with the
    project."""
    if _names(value) in (["none"], []):
        return ()
    return _platform_names("--jaxport-emulate", emulate_platforms, value)


def report_path(target: str) -> str:
    """``--jaxport-report=PATH``: a path ending in a report suffix (:data:`REPORT_SUFFIXES`);
    a test path the option took as its PATH (``--jaxport-report tests/test_x.py``) is refused
    saying how to write it."""
    path = Path(target)
    if target == "-" or path.suffix in REPORT_SUFFIXES:
        return target
    if "::" in target or path.suffix == ".py" or Path(target.partition("::")[0]).exists():
        raise ArgumentTypeError(
            f"took the test path {target!r} as its report PATH: put --jaxport-report after "
            f"the test paths, or give the PATH with '=' (--jaxport-report=report.json {target})"
        )
    raise ArgumentTypeError(
        f"{target}: expected a path ending in {', '.join(REPORT_SUFFIXES[:-1])} or "
        f"{REPORT_SUFFIXES[-1]}, found suffix "
        f"{path.suffix or '(none)'!r}"
    )


def verbosity_value(value: str) -> None:
    """``verbosity_jaxport``: an integer or ``auto`` (pytest reads it with
    ``config.get_verbosity``); a :class:`ConfigError` naming the ini value otherwise.

    >>> verbosity_value("-1")
    >>> try:
    ...     verbosity_value("loud")
    ... except ConfigError as e:
    ...     print(e)
    verbosity_jaxport (ini): expected an integer or 'auto', found 'loud'
    """
    if value != "auto" and not value.lstrip("-").isdigit():
        raise ConfigError(f"{VERBOSITY_INI} (ini): expected an integer or 'auto', found {value!r}")


# -- the options, each declared once: its flag, its validator, its help (and the ini value) --


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """A ``--jaxport-*`` option: what pytest's ``addoption`` declares, from one row."""

    flag: str
    help: str
    type: Callable[[str], object] | None = None
    """The value's validator (argparse's ``type=``): what it raises is pytest's usage error,
    said after the flag."""
    metavar: str | None = None
    choices: Sequence[str] | None = None
    switch: bool = False
    """A flag without a value (``store_true``)."""
    repeated: bool = False
    """Given any number of times, each value kept in order, the value optional (``-``)."""

    def declare(self, parser: pytest.Parser, group: pytest.OptionGroup) -> None:
        """Add the option to ``group`` (its default: ``False`` for a switch, else ``None``)."""
        if self.switch:
            group.addoption(self.flag, action="store_true", default=False, help=self.help)
            return
        given: dict[str, object] = {"default": None, "help": self.help}
        if self.repeated:
            given.update(action="append", nargs="?", const="-")
        for key in ("type", "metavar", "choices"):
            if getattr(self, key) is not None:
                given[key] = getattr(self, key)
        group.addoption(self.flag, **given)


@dataclass(frozen=True, slots=True, kw_only=True)
class DisplayFlags:
    """The display options ``jaxport show`` shares (:data:`~pytest_jaxport.view.display.
    DISPLAY_OPTIONS`), declared here as ``<prefix><name>``."""

    prefix: str
    dest_prefix: str

    def declare(self, parser: pytest.Parser, group: pytest.OptionGroup) -> None:
        """Add each display option to ``group``."""
        add_display_options(group.addoption, prefix=self.prefix, dest_prefix=self.dest_prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class IniValue:
    """An ini value (``[tool.pytest.ini_options]``, ``-o NAME=VALUE``)."""

    name: str
    help: str
    default: str
    check: Callable[[str], None]
    """Its validator, run as the plugin configures: a :class:`ConfigError` naming it."""

    def declare(self, parser: pytest.Parser, group: pytest.OptionGroup) -> None:
        """Add the ini value to ``parser``."""
        parser.addini(self.name, self.help, default=self.default)


VERBOSITY = "jaxport"
"""``config.get_verbosity(VERBOSITY)``: the ``verbosity_jaxport`` ini value, else ``-v``/``-q``."""
VERBOSITY_INI = f"verbosity_{VERBOSITY}"
REPORT_DISPLAY = DisplayFlags(prefix="--jaxport-report-", dest_prefix="jaxport_report_")

OPTIONS: tuple[Option | DisplayFlags | IniValue, ...] = (
    Option(
        flag="--jaxport-report", type=report_path, metavar="PATH", repeated=True,
        help="print the portability report at the end; with PATH also write it "
        f"({', '.join(REPORT_SUFFIXES[:-1])} or {REPORT_SUFFIXES[-1]}, by suffix; give the "
        "option once per file). Put it after the test paths, or write --jaxport-report=PATH.",
    ),
    REPORT_DISPLAY,
    Option(
        flag="--jaxport-annotations", choices=ANNOTATION_MODES,
        help="GitHub Actions annotations at the end of the run: 'errors' prints each budget "
        "violation, numerics failure and must_lower failure as ::error at its source line, "
        "'all' also the findings that fail nothing as ::warning (10 of each per step), 'off' "
        "none. Default: all where GITHUB_ACTIONS=true, else off.",
    ),
    IniValue(
        name=VERBOSITY_INI, default="auto", check=verbosity_value,
        help="how much the portability report shows: -2 one line, -1 the problem groups and "
        "the headline, 0 (the default) capped problems, the top sites and the three numbers, 1 "
        "every problem and tests with findings, 2 every test; 'auto' follows -v/-q",
    ),
    Option(
        flag="--jaxport-platforms", type=platforms_option, metavar="LIST",
        help="comma-separated platforms to lower for, overriding [tool.jaxport] platforms "
        f"(from {', '.join(PLATFORMS)}).",
    ),
    Option(
        flag="--jaxport-compile", type=compile_option, metavar="LIST",
        help="comma-separated platforms to also compile and count at the compiled level "
        f"(from {', '.join(COMPILE_PLATFORMS)}; 'none' for none), overriding "
        "[tool.jaxport] compile. cuda compiles deviceless where no GPU is present.",
    ),
    Option(
        flag="--jaxport-emulate", type=emulate_option, metavar="LIST",
        help="comma-separated absent platforms to also run on the CPU as they would compute "
        f"(from {', '.join(EMULATED_PLATFORMS)}; 'none' for none), overriding [tool.jaxport] "
        "emulate: their platform_dependent branch, Pallas kernels in interpret mode, "
        "default-precision float32 dots rounded (tpu: bfloat16, cuda: TF32 on the configured "
        "target's generation).",
    ),
    Option(
        flag="--jaxport-cache-clear", switch=True,
        help="drop cached lowered- and compiled-level results before the run (pytest's "
        "--cache-clear drops them too).",
    ),
    Option(
        flag="--jaxport-audit", switch=True,
        help="audit the suite as it is: record every jitted computation the tests run and "
        "count each distinct one for every platform, no test changed ([tool.jaxport] audit).",
    ),
    Option(
        flag="--jaxport-save-outputs", metavar="DIR",
        help="save each check's outputs on each platform that ran as .npz in DIR (no pickle), "
        "for `jaxport merge` to compare across CI legs.",
    ),
    Option(
        flag="--jaxport-baseline", metavar="FILE",
        help="fail a test whose vendor/custom/library counts grew since the baseline FILE "
        "(a committed `jaxport baseline` file); new tests are reported, not failed.",
    ),
    Option(
        flag="--jaxport-baseline-update", switch=True,
        help="write this run's counts to the --jaxport-baseline FILE (atomically, sorted) "
        "instead of comparing with it.",
    ),
    Option(
        flag="--jaxport-baseline-strict", switch=True,
        help="with --jaxport-baseline: fail the run (after every test is reported) when the "
        "baseline matches no test, has entries no test matched any more in the test files "
        "that ran, or lacks a test or check that ran.",
    ),
)  # fmt: skip
"""pytest-jaxport's options and ini value, in the order ``pytest --help`` lists them."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jaxport", "backend-portability budgets for JAX (pytest-jaxport)")
    for option in OPTIONS:
        option.declare(parser, group)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _marker_help() -> str:
    signature = inspect.signature(portable)
    params = ", ".join(str(p).replace("'", "") for p in signature.parameters.values())
    return (
        f"portable({params}): check this test's jaxport.check() calls against portability "
        "budgets; keywords override [tool.jaxport] in pyproject.toml."
    )


def _pyproject(config: pytest.Config) -> Path | None:
    inipath = config.inipath
    if inipath is not None and inipath.name == "pyproject.toml":
        return inipath
    candidate = config.rootpath / "pyproject.toml"
    return candidate if candidate.is_file() else None


def _warn_at(config: pytest.Config, warning: Warning, path: Path | None, line: int) -> None:
    """Issue a configuration warning located at ``path:line`` (the user's pyproject.toml),
    through pytest's public ``issue_config_time_warning`` (so ``-W error`` and
    ``filterwarnings`` apply): its ``stacklevel`` frame is a one-line call compiled under
    that file name and line, where the plugin's own line would say nothing to the user."""
    code = compile("\n" * (line - 1) + "issue(warning, stacklevel=2)", str(path), "exec")
    exec(code, {"issue": config.issue_config_time_warning, "warning": warning})


def _display(path: Path, config: pytest.Config) -> str:
    try:
        return path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return str(path)


def _apply_cli(project: ProjectConfig, platforms: tuple[str, ...] | None) -> ProjectConfig:
    """``--jaxport-platforms`` (validated: :func:`platforms_option`) over ``platforms``."""
    if platforms is None:
        return project
    from dataclasses import replace

    # A leg that narrows the platforms emulates only those of its platforms pyproject names.
    emulate = project.emulate
    if emulate is not None:
        kept = tuple(p for p in emulate.value if p in platforms)
        emulate = replace(emulate, value=kept) if kept else None
    # Targets pyproject leaves to the default follow the platforms this leg lowers for: a
    # platform named only here (oneapi) is priced too, one left out has no count to price.
    leg = replace(project, platforms=platforms, emulate=emulate)
    if project.migrate_to_set:
        return leg
    return replace(leg, migrate_to=default_migrate_to(leg.lowered(), project.home))


def _apply_compile_cli(project: ProjectConfig, platforms: tuple[str, ...] | None) -> ProjectConfig:
    """``--jaxport-compile`` (validated: :func:`compile_option`) over ``compile``; each must
    be among the platforms checks lower for. Without it, ``[tool.jaxport] compile`` keeps
    only the platforms this run lowers for (a leg that narrows them with
    ``--jaxport-platforms`` compiles only those of its platforms pyproject names)."""
    from dataclasses import replace

    lowered = project.lowered()
    if platforms is None:
        return replace(project, compile=tuple(p for p in project.compile if p in lowered))
    compiled_among("--jaxport-compile", platforms, lowered)
    return replace(project, compile=platforms)


def _apply_emulate_cli(project: ProjectConfig, emulated: tuple[str, ...] | None) -> ProjectConfig:
    """``--jaxport-emulate=LIST`` (``none``: nothing; validated: :func:`emulate_option`) over
    ``[tool.jaxport] emulate``; each must be among the platforms checks lower for."""
    if emulated is None:
        return project
    from dataclasses import replace

    if not emulated:
        return replace(project, emulate=None)
    emulated_among("--jaxport-emulate", emulated, project.platforms)
    return replace(project, emulate=Setting(value=emulated, origin="--jaxport-emulate"))


def _compile_settings(config: pytest.Config, project: ProjectConfig) -> CompileSettings:
    """The compiled level's settings; a usage error when cuda cannot be compiled here."""
    cache_plugin = getattr(config, "cache", None)
    clear = config.getoption("jaxport_cache_clear") and not hasattr(config, "workerinput")
    cache = None
    lowered_cache = None
    if cache_plugin is not None:
        lowered_cache = CompiledCache(
            directory=Path(cache_plugin.mkdir(LOWERED_CACHE_NAME)), format=LOWERED_FORMAT
        )
        if clear:
            lowered_cache.clear()
    if cache_plugin is not None and (project.compile or clear):
        cache = CompiledCache(directory=Path(cache_plugin.mkdir(CACHE_NAME)))
        if clear:
            cache.clear()
    try:
        target_config = load_gpu_description(project.gpu)
        devices = judged_devices(project, target_config)
    except (ValueError, OSError) as e:
        raise ConfigError(f"{project.source}: [tool.jaxport] target: {e}") from None
    gpu_kind = described_kind(target_config)
    if not project.compile:
        return CompileSettings(
            cache=cache, lowered_cache=lowered_cache, gpu_kind=gpu_kind, devices=devices
        )
    origin = (
        "--jaxport-compile"
        if config.getoption("jaxport_compile") is not None
        else f"{project.source}: [tool.jaxport] compile"
    )
    if "cuda" in project.compile:
        # compiling for cuda without a GPU: only then is JAX (and its CUDA plugin) loaded here
        from pytest_jaxport._jax import deviceless

        deviceless.prefer_deviceless()
        problem = deviceless.cuda_plugin_problem()
        if problem is not None:
            raise ConfigError(f"{origin} lists cuda, but {problem}")
    tpu_compiler = None
    if "tpu" in project.compile:
        tpu_compiler = _tpu_compiler(config, project, devices, origin)
    return CompileSettings(
        platforms=project.compile,
        target=project.gpu,
        target_config=target_config if "cuda" in project.compile else "",
        gpu_kind=gpu_kind,
        what_if_no_vendor=project.what_if_no_vendor,
        cache=cache,
        lowered_cache=lowered_cache,
        devices=devices,
        compile_time_limit=project.compile_time_limit,
        tpu_compiler=tpu_compiler,
        libtpu=_installed("libtpu") or "" if tpu_compiler is not None else "",
    )


def _installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _tpu_compiler(
    config: pytest.Config, project: ProjectConfig, devices: dict[str, Device], origin: str
) -> TpuCompiler:
    """libtpu's worker for compiling tpu without a TPU, once the pair and the device are
    known to compile (a usage error saying how to fix it where not). Nothing loads libtpu
    here: the pair is judged from package metadata, or probed in a process of its own."""
    # only with compile = ["tpu"] is JAX loaded here (to keep this process off libtpu)
    from pytest_jaxport._jax import libtpu

    device = devices["tpu"]
    try:
        compile_target("tpu", device.generation)
    except ValueError as e:
        raise ConfigError(
            f"{origin} lists tpu, but [tool.jaxport] devices.tpu is {device}: {e} (choose "
            "one of those, or leave tpu at the lowered level)"
        ) from None
    verdict = libtpu.installed_verdict()
    if verdict.problem is not None:
        raise ConfigError(f"{origin} lists tpu, but {verdict.problem}")
    if verdict.probe and not hasattr(config, "workerinput"):  # the controller probed it
        problem = libtpu.probe(time_limit=project.compile_time_limit)
        if problem is not None:
            raise ConfigError(f"{origin} lists tpu, but {problem}")
    libtpu.prefer_cpu_backend()
    return libtpu.TpuCompiler(time_limit=project.compile_time_limit)


def judged_devices(project: ProjectConfig, target_config: str) -> dict[str, Device]:
    """The device each platform's formats-and-layout findings are judged for: cuda's is the
    GPU ``target`` describes, rocm's and tpu's ``devices`` (else the defaults), each with the
    release of its compiler installed here where a rule depends on it (tpu: libtpu). Raises
    ``ValueError`` for a description that names no CUDA GPU."""
    from dataclasses import replace

    cuda = device_from_gpu_description(target_config)
    if cuda.platform != "cuda":
        raise ValueError(
            f"the description names a {cuda.platform} GPU ({cuda}), not a CUDA one: cuda's "
            "target must be an NVIDIA GPU"
        )
    lowered = (*project.platforms, *project.resolve().added_by_must_lower())
    devices = {**default_devices(lowered), **project.devices, "cuda": cuda}
    return {
        platform: replace(device, compiler=installed_release(COMPILERS[platform]))
        if platform in COMPILERS
        else device
        for platform, device in devices.items()
    }


def _check_display(config: pytest.Config, project: ProjectConfig) -> None:
    for declared in OPTIONS:
        if isinstance(declared, IniValue):
            declared.check(str(config.getini(declared.name)).strip())
    platform = config.getoption("jaxport_report_platform")
    if platform is not None and platform not in project.platforms:
        raise ConfigError(
            f"--jaxport-report-platform {platform}: expected one of the platforms "
            f"{', '.join(project.platforms)}, found {platform!r}{platform_hint(platform)}"
        )


def _display_options(config: pytest.Config) -> DisplayOptions:
    """The display options (``--jaxport-report-*``, pytest's and jaxport's verbosity)."""
    get_verbosity = getattr(config, "get_verbosity", None)
    verbosity = get_verbosity(VERBOSITY) if get_verbosity is not None else config.option.verbose
    return display_options(
        config.getoption, dest_prefix=REPORT_DISPLAY.dest_prefix, verbosity=int(verbosity)
    )


def session_settings(config: pytest.Config, path: Path | None) -> SessionSettings:
    """The session's settings, read once: ``[tool.jaxport]`` (from ``path``) with the options
    over it, the ini value, the compiled level's set-up; a :class:`ConfigError` for what
    cannot be used."""
    project = load_project(path, display=_display(path, config) if path else None)
    project = _apply_cli(project, config.getoption("jaxport_platforms"))
    if project.reference not in project.platforms:
        raise ConfigError(
            f"--jaxport-platforms: the reference platform {project.reference!r} must be "
            f"among the platforms, found {', '.join(project.platforms)}"
        )
    project = _apply_compile_cli(project, config.getoption("jaxport_compile"))
    project = _apply_emulate_cli(project, config.getoption("jaxport_emulate"))
    _check_display(config, project)
    compile_settings = _compile_settings(config, project)
    ci = ci_settings(config.getoption, Path(config.invocation_params.dir))
    annotations = config.getoption("jaxport_annotations")
    return SessionSettings(
        project=project,
        compile_settings=compile_settings,
        ci=ci,
        report=ReportRequest.of(config.getoption("jaxport_report")),
        display=_display_options(config),
        annotations=next((m for m in ANNOTATION_MODES if m == annotations), None),
        audited=bool(config.getoption("jaxport_audit") or project.audit.enabled),
        cost_model=CostModel(**project.cost),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _marker_help())
    path = _pyproject(config)
    for said, line in misspelt_tables(path, display=_display(path, config) if path else None):
        try:
            _warn_at(config, pytest.PytestConfigWarning(said), path, line)
        except pytest.PytestConfigWarning:  # -W error: the user's mistake, not an INTERNALERROR
            raise pytest.UsageError(f"jaxport: {said}") from None
    try:
        settings = session_settings(config, path)
    except ConfigError as e:
        raise pytest.UsageError(f"jaxport: {e}") from None
    session = JaxportSession(config, settings)
    config.stash[SESSION] = session
    config.pluginmanager.register(session, "jaxport-session")
    session.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    if session is not None:
        session.stop()
        config.pluginmanager.unregister(session)
        del config.stash[SESSION]


@pytest.fixture
def jaxport(request: pytest.FixtureRequest) -> Jaxport:
    """Probe functions for portability: ``jaxport.check(fn, *args)``.

    Lowers ``fn`` for every configured platform, counts its vendor-library and custom-kernel
    dispatches, runs it on the platforms present, compares outputs with the reference
    platform, and returns the reference outputs. Budgets are enforced when the test ends.
    """
    from pytest_jaxport.fixture import Jaxport  # JAX: only when a test asks for the fixture

    judge = request.config.stash[SESSION].judge
    item = request.node
    try:
        resolved = judge.resolve(item)
    except ConfigError:
        resolved = judge.project.resolve()  # the test fails with the message before it runs
    emulate = resolved.emulate()
    instance = Jaxport(
        config=resolved,
        cuda_capability=judge.cuda_capability if emulate and "cuda" in emulate.value else None,
        classifier=judge.classifier("lowered"),
        compiled_classifier=judge.classifier("compiled"),
        compile_settings=judge.compile_settings,
        rootdir=request.config.rootpath,
        profile=judge.wants_measured_share(resolved),
    )
    item.stash[JAXPORT] = instance
    return instance

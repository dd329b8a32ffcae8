"""The ``jaxport`` fixture: ``check()`` probes one function on every platform.

Example::

    @pytest.mark.portable(max_custom_calls=0)
    def test_mlp(jaxport):
        out = jaxport.check(mlp, params, x)   # reference (cpu) outputs
        assert out.shape == (8, 10)

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jaxport._jax import lowering, tracing
from pytest_jaxport._jax.arguments import ArgumentError, abstract_leaves, prepare
from pytest_jaxport._jax.devices import present_platforms
from pytest_jaxport._jax.execution import Execution, execute
from pytest_jaxport._jax.interception import paused
from pytest_jaxport._jax.transforms import (
    PlatformTraces,
    TransformUsage,
    trace_variant,
    transformed,
)
from pytest_jaxport.cache import CompileSettings
from pytest_jaxport.examine import Examiner, KeyParts, LoweredPrograms, Run, stages
from pytest_jaxport.examine.stages import Stages
from pytest_jaxport.model.census import (
    Classifier,
    SourceLocation,
)
from pytest_jaxport.model.compare import Outputs, compare
from pytest_jaxport.model.config import ConfigError, Resolved
from pytest_jaxport.model.emulation import may_differ_lines, not_emulated_message, with_locations
from pytest_jaxport.model.numerics import Comparison, Tolerance
from pytest_jaxport.model.platforms import compiler_decides
from pytest_jaxport.model.probe import (
    MAY_DIFFER,
    NotCompared,
    PlatformProbe,
    Probe,
    Untraced,
    emulated_status,
)
from pytest_jaxport.model.validators import transforms_value
from pytest_jaxport.warning import JaxportWarning

if TYPE_CHECKING:
    from pytest_jaxport._jax.emulate import Emulated

_PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frame() -> tuple[FrameType, int]:
    """The first frame outside the plugin (the user's ``check`` call, however many plugin
    frames lie between) and its stack level as seen from the caller of this function."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PLUGIN_DIR):
        frame = frame.f_back
        level += 1
    return frame, level


def warn(warning: Warning) -> None:
    """Issue ``warning`` at the user's ``check`` call (as ``skip_file_prefixes`` does on
    3.12+)."""
    _, level = _user_frame()
    warnings.warn(warning, stacklevel=level)


class Jaxport:
    """Probes functions for portability; one instance per test.

    ``stages``: the examiner's instrumentation hook (:mod:`pytest_jaxport.examine.stages`),
    entered around each stage of every check, tracing and comparing included."""

    def __init__(
        self,
        *,
        config: Resolved,
        classifier: Classifier,
        rootdir: Path,
        compiled_classifier: Classifier | None = None,
        compile_settings: CompileSettings | None = None,
        profile: bool = False,
        cuda_capability: tuple[int, int] | None = None,
        stages: Stages | None = None,
    ) -> None:
        self._config = config
        self._compile = compile_settings or CompileSettings()
        self._cuda_capability = cuda_capability
        """The configured GPU's generation, for a cuda emulation's dot precision."""
        self.probes: list[Probe] = []
        self.outputs: dict[str, dict[str, Outputs]] = {}
        """Per check name, per executed platform, its ``numerics.Outputs`` (host arrays), for
        ``--jaxport-save-outputs``; never put into the report."""
        self.emulated_outputs: dict[str, dict[str, Outputs]] = {}
        """The same for each emulated platform whose emulation ran (``emulate = [...]``)."""
        self._examiner = Examiner(
            classifier=classifier,
            compiled_classifier=compiled_classifier,
            rootdir=rootdir,
            compile_settings=self._compile,
            profile=profile,
            own_packages=config.project.own_packages,
            stages=stages,
        )
        self.lowered_stats = self._examiner.stats
        self.compile_stats = self._examiner.compile_stats

    def __repr__(self) -> str:  # what a failing test's traceback shows for the fixture
        return (
            f"<jaxport fixture: platforms {', '.join(self.platforms)}; {len(self.probes)} checks>"
        )

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms this test's checks lower for."""
        return self._config.lowering_platforms()

    @property
    def reference(self) -> str:
        """The platform whose outputs the others are compared with."""
        return self._config.reference

    def check(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        transforms: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Lower ``fn(*args, **kwargs)`` for every platform, run it where present, compare.

        Returns the reference platform's outputs (or, when the reference did not run, the
        first platform's that did; ``None`` with a warning when none ran). Budgets are
        enforced when the test finishes.

        Arguments may be abstract (``jax.ShapeDtypeStruct``, pytrees of them, with shardings
        for a sliced check), mixed with concrete ones, as ``jax.jit(fn).lower`` takes them:
        such a check is traced, lowered and compiled for every platform (its memory planned
        where a compiler runs) and never run, emulated or allocated anywhere; its numerics
        are not compared (its record says why) and ``check`` returns its outputs as
        ``jax.ShapeDtypeStruct`` leaves, as ``jax.eval_shape`` gives them.

        ``transforms`` (``("grad", "vmap", "jvp")``; default: the marker's or
        ``[tool.jaxport] transforms``) also checks those transformations of ``fn``, each as
        its own check ``name[grad]``. ``name`` and ``transforms`` are keywords of ``check``
        itself: a function taking such a keyword must be wrapped (``functools.partial``).
        """
        __tracebackhide__ = True

        with paused():  # the plugin's own JAX work: never part of a --jaxport-audit
            return self._check(fn, args, kwargs, name=name, transforms=transforms)

    def _check(
        self,
        fn: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        *,
        name: str | None,
        transforms: Sequence[str] | None,
    ) -> object:
        __tracebackhide__ = True

        if not callable(fn):
            pytest.fail(
                f"jaxport.check: expected a callable as the first argument, "
                f"found {type(fn).__name__} {fn!r:.60}",
                pytrace=False,
            )
        check_name = self._unique_name(name if name is not None else _name_of(fn))
        problem: str | None = None
        try:
            call = prepare(fn, args, kwargs, name=check_name)
        except ArgumentError as e:
            problem = str(e)
        if problem is not None:  # outside the except: no chained traceback for a usage error
            pytest.fail(problem, pytrace=False)
        fn, args, kwargs = call.fn, call.args, call.kwargs
        abstract = abstract_leaves(args, kwargs)
        not_compared = NotCompared(arguments=abstract) if abstract else None
        wanted = self._transforms(check_name, transforms)
        described = self._compile.described_kinds()
        try:
            with self._examiner.stage(stages.TRACE):
                traced = tracing.trace(fn, args, kwargs, described=described)
        except tracing.Untraceable as e:
            self._untraced(check_name, e.untraced, wanted)
            return None

        variants = []
        for transform in wanted:
            usage = None
            try:
                variants.append(transformed(fn, transform, args, kwargs))
            except TransformUsage as e:
                usage = f"jaxport.check({check_name!r}): {e}"
            if usage is not None:  # outside the except: no chained traceback for a usage error
                pytest.fail(usage, pytrace=False)
        value = self._probe(check_name, fn, args, kwargs, traced, not_compared=not_compared)
        unrunnable = None if abstract else self._unrunnable(self.probes[-1].platforms)
        for variant in variants:
            with self._examiner.stage(stages.TRACE):
                variant_traced = trace_variant(variant, described=described)
            self._probe(
                self._unique_name(f"{check_name}[{variant.transform}]"),
                variant, variant.args, {}, variant_traced,
                variant_of=check_name, transform=variant.transform, not_compared=not_compared,
            )  # fmt: skip
        if unrunnable is not None:  # the probes are recorded: the report still has the counts
            pytest.fail(f"jaxport.check({check_name!r}): {unrunnable}")
        if not_compared is not None:  # nothing ran: what jax.eval_shape gives
            return tracing.output_shapes(traced)
        return value

    def _unrunnable(self, results: Mapping[str, PlatformProbe]) -> str | None:
        """Why a check that ran on no platform fails its test at the ``check`` call: a
        platform present here and in ``must_lower`` failed to lower or run. The budget fails
        the test anyway; failing here puts the cause at the user's line, where returning
        ``None`` would break the next one. ``None`` when something ran, or when no such
        platform failed (``check`` returns ``None`` with a warning)."""
        if any(r.executed for r in results.values()):
            return None
        for platform, result in results.items():
            failure = result.error or result.execution_error
            must = self._config.budget(platform).must_lower
            if (
                not result.present
                or failure is None
                or result.needs_hardware
                or must is None
                or platform not in must.value
            ):
                continue
            stage = "fails to lower" if result.error else "fails to compile or run"
            return (
                f"{platform}: {stage}: {failure}\n"
                f"It ran on no platform present here, so check() has no outputs to return, and "
                f"{platform} is in must_lower (set in {must.origin}). Give the code a portable "
                "path (jax.lax.platform_dependent(..., default=<plain jnp code>)), run a Pallas "
                "kernel with interpret=True where its hardware is absent, or take "
                f"{platform} out of must_lower."
            )
        return None

    def _transforms(self, check_name: str, given: Sequence[str] | None) -> tuple[str, ...]:
        """``check(transforms=...)``, else the marker's, else ``[tool.jaxport]``'s."""

        if given is None:
            return self._config.transforms()
        try:
            return transforms_value(f"jaxport.check({check_name!r}) transforms", given)
        except ConfigError as e:
            problem = str(e)
        pytest.fail(problem, pytrace=False)

    def _untraced(self, check_name: str, untraced: Untraced, transforms: Sequence[str]) -> None:
        """Record a check JAX could not trace here: reported, warned about, failed only
        under ``must_trace``."""
        note = (
            f"could not be traced here: needs {untraced.needs} ({untraced.error}); nothing "
            f"was lowered, counted or run on any platform"
        )
        if transforms:
            note += f", nor its {', '.join(transforms)}"
        if untraced.needs == "cuDNN":
            note += (
                "; to count it without a GPU install the jax CUDA plugin at jaxlib's version "
                "and cuDNN (jax-cuda12-plugin, nvidia-cudnn-cu12)"
            )
        warn(JaxportWarning(f"check {check_name!r} {note}"))
        self.outputs[check_name] = {}
        self.probes.append(
            Probe(name=check_name, reference=self._config.reference, note=note, untraced=untraced)
        )

    def _probe(
        self,
        check_name: str,
        fn: Callable[..., object],
        args: Sequence[object],
        kwargs: Mapping[str, object],
        traced: tracing.Trace | PlatformTraces,
        *,
        variant_of: str | None = None,
        transform: str | None = None,
        not_compared: NotCompared | None = None,
    ) -> object:
        """One check: lower ``traced`` per platform, run, census, compare; record the probe.
        With ``not_compared`` (abstract arguments) nothing runs or is emulated: lowered and
        compiled only."""
        __tracebackhide__ = True
        present = present_platforms()
        frame, _ = _user_frame()  # the line that called check()
        caller = self._examiner.shown_location(
            SourceLocation(file=frame.f_code.co_filename, line=frame.f_lineno)
        )

        def run(found: LoweredPrograms, record_partition: bool) -> Run:
            if not_compared is not None:  # no data: nothing to run, on any platform
                return Run()
            executions: dict[str, Execution] = {}
            errors: dict[str, str] = {}
            built: dict[str, object] = {}
            for platform in self._config.platforms:
                if platform not in present or platform not in found.lowered:
                    continue
                try:
                    with self._examiner.stage(stages.execute_stage(platform)):
                        executions[platform] = execute(
                            fn, traced, found.lowered[platform], platform, args, kwargs,
                            partitioned=record_partition,
                        )  # fmt: skip
                except lowering.LoweringFailure as e:
                    errors[platform] = str(e)
                    built[platform] = e.compiled if e.stage == "run" else e
                    continue
                built[platform] = executions[platform].compiled
            return Run(executions=executions, errors=errors, built=built)

        examined = self._examiner.check(
            traced, KeyParts(traced, args, kwargs, own=self._examiner.own_packages),
            self.platforms, present=present, run=run, fn=fn, args=args, kwargs=kwargs,
            caller=caller,
        )  # fmt: skip
        if not_compared is not None:
            emulated: dict[str, Emulated] = {}
            probe, value = Probe(
                name=check_name, reference=self._config.reference, platforms=examined.results,
                note=not_compared.sentence(), not_compared=not_compared,
            ), None  # fmt: skip
        else:
            emulated = self._emulate(traced, args, kwargs, examined.results, present)
            with self._examiner.stage(stages.COMPARE):
                probe, value = self._compare(
                    check_name, dict(examined.results), examined.executions,
                    transform=transform, emulated=emulated,
                )  # fmt: skip
        if transform is not None:
            probe = replace(probe, variant_of=variant_of, transform=transform)
            self._warn_findings(probe)
        _warn_unverified(probe)
        self._warn_unfit(probe)
        self.outputs[check_name] = {p: e.outputs for p, e in examined.executions.items()}
        self.emulated_outputs[check_name] = {
            p: e.outputs for p, e in emulated.items() if e.outputs is not None
        }
        self.probes.append(probe)
        return value

    def _emulate(
        self,
        traced: tracing.Trace | PlatformTraces,
        args: Sequence[object],
        kwargs: Mapping[str, object],
        results: Mapping[str, PlatformProbe],
        present: Sequence[str],
    ) -> dict[str, Emulated]:
        """Run each platform ``emulate`` names that is absent here and lowered on the CPU, as
        it would compute (:mod:`pytest_jaxport._jax.emulate`); ``{}`` when none is asked."""
        emulate = self._config.emulate()
        if emulate is None:
            return {}
        # The engine is imported only where a check emulates: emulation off costs nothing.
        from pytest_jaxport._jax.emulate import emulate as run_as

        found: dict[str, Emulated] = {}
        for platform in emulate.value:
            result = results.get(platform)
            if platform in present or result is None or result.error is not None:
                continue  # present: it ran for real; not lowered: nothing to emulate
            program: tracing.Trace | Callable[..., object] = (
                traced.variant.for_platform(platform)  # a variant traced per platform
                if isinstance(traced, PlatformTraces)
                else traced
            )
            with self._examiner.stage(stages.emulate_stage(platform)):
                emulated = run_as(
                    program, args, kwargs, platform=platform,
                    cuda_capability=self._cuda_capability, own=self._examiner.own_packages,
                )  # fmt: skip
            shown = with_locations(emulated.emulation, self._shown_location)
            found[platform] = replace(emulated, emulation=shown)
        return found

    def _shown_location(self, location: str) -> str:
        """``file:line`` with the file as reports show it (relative to the project)."""
        file, _, line = location.rpartition(":")
        if not file or not line.isdigit():
            return location
        return str(self._examiner.shown_location(SourceLocation(file=file, line=int(line))))

    def _compare(
        self,
        check_name: str,
        results: dict[str, PlatformProbe],
        executions: Mapping[str, Execution],
        *,
        transform: str | None = None,
        emulated: Mapping[str, Emulated] | None = None,
    ) -> tuple[Probe, object]:
        """The probe of a check whose platforms ran (``executions``) and were emulated: each
        one's outputs compared with the reference's; and the value ``check`` returns."""

        # Derivatives are compared with JAX's gradient tolerances unless configured.
        gradient = transform in ("grad", "jvp")

        reference = self._config.reference
        note = None
        emulated = emulated or {}
        for platform, found in emulated.items():
            results[platform] = replace(results[platform], emulated=found.emulation)
            if not found.emulation.ran and found.emulation.error is None:
                # This JAX cannot run it (a kernel it cannot interpret): a note, never a failure.
                message = not_emulated_message(found.emulation)
                warn(JaxportWarning(f"check {check_name!r}: {message}"))
        if not executions:
            return self._not_executed(check_name, results), None
        baseline = reference if reference in executions else next(iter(executions))
        compared = [p for p, found in emulated.items() if found.outputs is not None]
        if baseline != reference:
            note = f"reference platform {reference} did not run; compared with {baseline}"
            warn(JaxportWarning(f"check {check_name!r}: {note}"))
        elif len(executions) == 1 and not compared:
            note = f"only {baseline} executed here: nothing to compare in-process"

        def compared_with_baseline(outputs: Outputs, platform: str, label: str) -> Comparison:
            def tolerance(dtype: str) -> Tolerance:
                return self._config.tolerance_for(platform, dtype, gradient=gradient)

            return compare(
                executions[baseline].outputs,
                outputs,
                reference_platform=baseline,
                platform=label,
                tolerance=tolerance,
            )

        for platform, execution in executions.items():
            if platform != baseline:
                comparison = compared_with_baseline(execution.outputs, platform, platform)
                results[platform] = replace(results[platform], numerics=comparison)
        for platform in compared:
            results[platform] = self._compared_emulation(
                check_name, results[platform], emulated[platform], compared_with_baseline
            )
        probe = Probe(name=check_name, reference=baseline, platforms=results, note=note)
        return probe, executions[baseline].value

    def _not_executed(self, check_name: str, results: Mapping[str, PlatformProbe]) -> Probe:
        """The probe of a check that ran on no platform, and why (warned, unless the test
        fails at the check call with the cause: see :meth:`_check`)."""
        reference = self._config.reference
        if self._unrunnable(results) is not None:
            note = "not executed: it failed on every platform present here"
            return Probe(name=check_name, reference=reference, platforms=results, note=note)
        present = [p for p in results if results[p].present]
        failures = [
            f"{p}: {results[p].error or results[p].execution_error}"
            for p in present
            if results[p].error or results[p].execution_error
        ]
        note = "not executed: " + (
            f"it failed on every platform present here ({'; '.join(failures)})"
            if failures
            else f"none of its platforms is present here (present: "
            f"{', '.join(present_platforms()) or 'none'})"
        )
        warn(JaxportWarning(f"check {check_name!r} {note}"))
        return Probe(name=check_name, reference=reference, platforms=results, note=note)

    def _compared_emulation(
        self,
        check_name: str,
        result: PlatformProbe,
        found: Emulated,
        compared_with_baseline: Callable[[Outputs, str, str], Comparison],
    ) -> PlatformProbe:
        """``result`` with its emulation's outputs compared exactly as a present platform's
        are, under its label (every message reads "tpu (emulated on cpu) vs cpu"), and, where
        they matched, those of the run with the chip's bounds: what the chip's errors may do.
        """
        platform = result.platform
        assert found.outputs is not None
        comparison = compared_with_baseline(found.outputs, platform, found.emulation.label)
        emulation, bounds = found.emulation, None
        if not comparison.ok and found.code_only is not None:
            # Which of the two made them differ: the platform's code, or its arithmetic.
            with self._examiner.stage(stages.emulate_stage(platform)):
                code = found.code_only()
            if code is not None:
                alone = compared_with_baseline(code, platform, emulation.label)
                emulation = replace(emulation,
                                    mismatch_from="arithmetic" if alone.ok else "code")  # fmt: skip
        if comparison.ok and found.bounded is not None:
            with self._examiner.stage(stages.emulate_stage(platform)):
                bounded = found.bounded()
            emulation = replace(emulation, bounded=tuple(
                replace(site, location=self._shown_location(site.location))
                if site.location else site for site in bounded.sites
            ))  # fmt: skip
            if bounded.outputs is not None:
                bounds = compared_with_baseline(bounded.outputs, platform, emulation.label)
            else:  # the engine's limit: said, and the state stays what it was
                said = f"the run with the chip's bounds failed: {bounded.error}"
                warn(JaxportWarning(f"check {check_name!r}: {emulation.label}: {said}"))
        result = replace(
            result, emulated=emulation, emulated_numerics=comparison, emulated_bounds=bounds,
        )  # fmt: skip
        setting = self._config.may_differ()
        if emulated_status(result) == MAY_DIFFER and setting.value == "warn":
            # Told, never silently green (-W error makes it a failure).
            head = may_differ_lines(emulation, bounds)[0]
            warn(JaxportWarning(f"check {check_name!r}: {head} (may_differ = "
                                f'"warn", set in {setting.origin})'))  # fmt: skip
        return result

    def _warn_findings(self, probe: Probe) -> None:
        """Warn about a transformation that cannot be taken on a platform no ``must_lower``
        covers (where one does, the budget fails the test instead)."""
        quiet = []
        for platform, result in probe.platforms.items():
            must = self._config.budget(platform).must_lower
            if result.error is not None and not (must and platform in must.value):
                quiet.append(f"{platform}: {result.error}")
        if quiet:
            warn(JaxportWarning(f"check {probe.name!r}: " + "; ".join(quiet)))

    def _warn_unfit(self, probe: Probe) -> None:
        """Warn about a plan that does not fit its device where no budget says so (neither a
        ``must_lower`` failing the compiler's refusal nor a ``max_device_memory``): never a
        silent green."""
        for platform, result in probe.platforms.items():
            memory = result.memory
            if memory is None or memory.fits is not False:
                continue
            budget = self._config.budget(platform)
            must = budget.must_lower
            refused = memory.out_of_memory is not None and compiler_decides(platform)
            if budget.max_device_memory is not None or (
                refused and must is not None and platform in must.value
            ):
                continue
            warn(JaxportWarning(
                f"check {probe.name!r}: {memory.headline()}; no must_lower or "
                f"max_device_memory covers {platform}, so its test passes"))  # fmt: skip

    def _unique_name(self, name: str) -> str:
        taken = {p.name for p in self.probes}
        if name not in taken:
            return name
        n = 2
        while f"{name}#{n}" in taken:
            n += 1
        return f"{name}#{n}"


def _warn_unverified(probe: Probe) -> None:
    """Say which platforms' budgets (``must_lower`` included) could not be checked here:
    neither a pass nor a failure, so never silent (warnings as errors make it a failure)."""
    unknown = [f"{p}: {r.error}" for p, r in probe.platforms.items() if r.needs_hardware]
    if unknown:
        warn(
            JaxportWarning(
                f"check {probe.name!r}: {'; '.join(unknown)}; its budgets for "
                f"{', '.join(p for p, r in probe.platforms.items() if r.needs_hardware)} are "
                "unverified on this machine (run it where that hardware is present)"
            )
        )


def _name_of(fn: Callable[..., object]) -> str:
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and name != "<lambda>":
        return name
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None:
        return _name_of(inner)
    return type(fn).__name__ if name is None else "lambda"

"""The ``jaxport`` fixture: ``check()`` probes one function on every platform.

Example::

    @pytest.mark.portable(max_custom_calls=0)
    def test_mlp(jaxport):
        out = jaxport.check(mlp, params, x)   # reference (cpu) outputs
        assert out.shape == (8, 10)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_jaxport.census import Census, Classifier, SourceLocation, take_census
from pytest_jaxport.config import Resolved
from pytest_jaxport.report import PlatformProbe, Probe


class JaxportWarning(pytest.PytestWarning):
    """A check could not do all it was asked (nothing executed, nothing to compare)."""


class Jaxport:
    """Probes functions for portability; one instance per test."""

    def __init__(
        self,
        *,
        config: Resolved,
        classifier: Classifier,
        rootdir: Path,
    ) -> None:
        self._config = config
        self._classifier = classifier
        self._rootdir = rootdir
        self.probes: list[Probe] = []

    @property
    def platforms(self) -> tuple[str, ...]:
        """The platforms this test's checks lower for."""
        return self._config.lowering_platforms()

    @property
    def reference(self) -> str:
        """The platform whose outputs the others are compared with."""
        return self._config.reference

    def check(
        self, fn: Callable[..., Any], *args: Any, name: str | None = None, **kwargs: Any
    ) -> Any:
        """Lower ``fn(*args, **kwargs)`` for every platform, run it where present, compare.

        Returns the reference platform's outputs (or, when the reference did not run, the
        first platform's that did; ``None`` with a warning when none ran). Budgets are
        enforced when the test finishes.
        """
        __tracebackhide__ = True
        from pytest_jaxport import lowering

        if not callable(fn):
            pytest.fail(
                f"jaxport.check: expected a callable as the first argument, "
                f"found {type(fn).__name__} {fn!r:.60}",
                pytrace=False,
            )
        check_name = self._unique_name(name if name is not None else _name_of(fn))
        for path, leaf in lowering.argument_leaves(args, kwargs):
            if not lowering.is_array_like(leaf):
                pytest.fail(
                    f"jaxport.check({check_name!r}): {path} is {type(leaf).__name__} "
                    f"{leaf!r:.60}, not an array; pass arrays or Python scalars, and bind "
                    f"static arguments with functools.partial",
                    pytrace=False,
                )

        traced = lowering.trace(fn, args, kwargs)
        present = lowering.present_platforms()
        results: dict[str, PlatformProbe] = {}
        lowered_for: dict[str, Any] = {}
        for platform in self.platforms:
            try:
                lowered = lowering.lower(traced, platform)
                census = self._relative(
                    take_census(
                        lowering.read_program(lowered), platform, classifier=self._classifier
                    )
                )
            except lowering.LoweringFailure as e:
                results[platform] = PlatformProbe(
                    platform=platform, present=platform in present, error=str(e)
                )
                continue
            lowered_for[platform] = lowered
            results[platform] = PlatformProbe(
                platform=platform, present=platform in present, census=census
            )

        executions: dict[str, lowering.Execution] = {}
        for platform in self._config.platforms:
            if platform not in present or platform not in lowered_for:
                continue
            try:
                executions[platform] = lowering.execute(
                    fn, traced, lowered_for[platform], platform, args, kwargs
                )
            except lowering.LoweringFailure as e:
                results[platform] = replace(results[platform], execution_error=str(e))
                continue
            results[platform] = replace(results[platform], executed=True)

        probe, value = self._compare(check_name, results, executions)
        self.probes.append(probe)
        return value

    def _compare(
        self,
        check_name: str,
        results: dict[str, PlatformProbe],
        executions: Mapping[str, Any],
    ) -> tuple[Probe, Any]:
        from pytest_jaxport.numerics import Tolerance, compare, default_tolerance

        reference = self._config.reference
        note = None
        if not executions:
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
                f"{', '.join(lowering_present()) or 'none'})"
            )
            warnings.warn(JaxportWarning(f"check {check_name!r} {note}"), stacklevel=3)
            return Probe(name=check_name, reference=reference, platforms=results, note=note), None
        baseline = reference if reference in executions else next(iter(executions))
        if baseline != reference:
            note = f"reference platform {reference} did not run; compared with {baseline}"
            warnings.warn(JaxportWarning(f"check {check_name!r}: {note}"), stacklevel=3)
        elif len(executions) == 1:
            note = f"only {baseline} executed here: nothing to compare in-process"

        for platform, execution in executions.items():
            if platform == baseline:
                continue

            def tolerance(dtype: str, platform: str = platform) -> Tolerance:
                configured = self._config.tolerance(platform, dtype)
                default = default_tolerance(dtype)
                return Tolerance(
                    rtol=default.rtol if configured.rtol is None else configured.rtol,
                    atol=default.atol if configured.atol is None else configured.atol,
                )

            comparison = compare(
                executions[baseline].outputs,
                execution.outputs,
                reference_platform=baseline,
                platform=platform,
                tolerance=tolerance,
            )
            results[platform] = replace(results[platform], numerics=comparison)
        probe = Probe(name=check_name, reference=baseline, platforms=results, note=note)
        return probe, executions[baseline].value

    def _unique_name(self, name: str) -> str:
        taken = {p.name for p in self.probes}
        if name not in taken:
            return name
        n = 2
        while f"{name}#{n}" in taken:
            n += 1
        return f"{name}#{n}"

    def _relative(self, census: Census) -> Census:
        kernels = tuple(
            k if k.location is None else replace(k, location=self._relative_location(k.location))
            for k in census.kernels
        )
        return replace(census, kernels=kernels)

    def _relative_location(self, location: SourceLocation) -> SourceLocation:
        try:
            relative = Path(location.file).resolve().relative_to(self._rootdir)
        except (ValueError, OSError):
            return location
        return SourceLocation(file=relative.as_posix(), line=location.line)


def lowering_present() -> tuple[str, ...]:
    from pytest_jaxport.lowering import present_platforms

    return present_platforms()


def _name_of(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None)
    if isinstance(name, str) and name != "<lambda>":
        return name
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None:
        return _name_of(inner)
    return type(fn).__name__ if name is None else "lambda"

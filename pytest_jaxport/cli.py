"""The ``jaxport`` console script.

Exit codes: 0 success; 1 a failed check (``merge``: outputs drifted across legs; ``diff``:
a count grew); 2 an unusable input file or bad usage (one line naming the file and what is
wrong, never a traceback), or, for ``capture-target``, no CUDA GPU here.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_jaxport.model.budget import Setting
from pytest_jaxport.model.config import ConfigError
from pytest_jaxport.model.gpu import SHIPPED_GPUS
from pytest_jaxport.model.hints import platform_hint
from pytest_jaxport.model.validators import growth_value
from pytest_jaxport.report.baseline import (
    Counts,
    baseline_json,
    baseline_of,
    counted,
    diff,
    load_compared,
)
from pytest_jaxport.report.document import Report
from pytest_jaxport.report.errors import MergeError, ReportError
from pytest_jaxport.report.files import load, write_text
from pytest_jaxport.version import __version__
from pytest_jaxport.view.display import DisplayOptions, add_display_options, display_options
from pytest_jaxport.view.html import html, render_html
from pytest_jaxport.view.markdown import diff_markdown, markdown, merge_markdown, render_markdown
from pytest_jaxport.view.reporters import sarif_text
from pytest_jaxport.view.text import diff_text, merge_text, render_text
from pytest_jaxport.view.viewmodel.build import build_view
from pytest_jaxport.view.viewmodel.notes import ONE_LEG, versions_note
from pytest_jaxport.view.viewmodel.reportview import ReportView

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2


def _show(args: argparse.Namespace) -> int:

    options = display_options(lambda name: getattr(args, name), verbosity=args.verbose - args.quiet)
    try:
        report = load(Path(args.report))
    except ReportError as e:
        print(f"jaxport show: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.format == "sarif":  # the findings at their lines, for code scanning
        print(sarif_text(build_view(report)), end="")
        return EXIT_OK
    view = build_view(report)
    if options.platform is not None and options.platform not in view.platforms:
        return _fail(
            "show",
            f"--platform {options.platform}: {args.report} has no such platform "
            f"(it has {', '.join(view.platforms) or 'none'}){platform_hint(options.platform)}",
        )
    renderers: dict[str, Callable[[ReportView, DisplayOptions], str]] = {
        "text": render_text,
        "md": render_markdown,
        "html": render_html,
    }
    try:
        rendered = renderers[args.format](view, options)
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        return _fail("show", f"{args.report}: malformed report ({type(e).__name__}: {e})")
    print(rendered)
    return EXIT_OK


def _capture_target(args: argparse.Namespace) -> int:
    import ctypes

    from pytest_jaxport._jax import deviceless  # JAX: only for this command

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        print(
            "jaxport capture-target: no CUDA GPU here (the NVIDIA driver, libcuda.so.1, "
            "cannot be loaded); run it on the machine with the GPU, or use a shipped "
            f"description ({', '.join(SHIPPED_GPUS)})",
            file=sys.stderr,
        )
        return EXIT_UNUSABLE
    try:
        text = deviceless.capture_target()
    except RuntimeError as e:
        print(f"jaxport capture-target: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.output is None or args.output == "-":
        print(text, end="" if text.endswith("\n") else "\n")
        return EXIT_OK

    path = Path(args.output)
    try:
        write_text(path, text)
    except OSError as e:
        print(f"jaxport capture-target: cannot write {path}: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(f"jaxport capture-target: wrote {path}; use it with [tool.jaxport] target = "
          f"\"{path}\"")  # fmt: skip
    return EXIT_OK


def _overwrites(inputs: Sequence[str], outputs: Sequence[str | None]) -> str | None:
    """Why writing ``outputs`` would destroy an input (one is an input file), or ``None``:
    a merged report written over a leg loses the leg, and a rerun would merge the merge."""
    given = {Path(p).resolve(): p for p in inputs}
    for output in outputs:
        if output is not None and Path(output).resolve() in given:
            return (
                f"{output} is an input here ({given[Path(output).resolve()]}): writing it would "
                "overwrite what is read; write to another file"
            )
    return None


def _fail(command: str, message: object) -> int:
    print(f"jaxport {command}: {message}", file=sys.stderr)
    return EXIT_UNUSABLE


def _write(command: str, path: Path, text: str) -> str | None:
    """Write ``text`` atomically; the error line when it cannot be written."""

    try:
        write_text(path, text)
    except OSError as e:
        return f"jaxport {command}: cannot write {path}: {e}"
    return None


def _merge(args: argparse.Namespace) -> int:
    import json

    # numpy: only for this command
    from pytest_jaxport.report.merge import load_legs, merge, tolerance_from_config

    paths = [Path(p) for p in args.legs]
    output = Path(args.output)
    clash = _overwrites(args.legs, [args.output, args.md, args.html, args.sarif])
    if clash is not None:
        return _fail("merge", clash)
    try:
        legs = load_legs(paths)
        first_path, first = legs[0]
        tolerance_for = tolerance_from_config(first.config, source=str(first_path))
        result = merge(legs, tolerance_for=tolerance_for, outputs_root=output.resolve().parent)
    except MergeError as e:
        return _fail("merge", e)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return _fail(
            "merge",
            f"malformed pytest-jaxport report among {', '.join(map(str, paths))} "
            f"({type(e).__name__}: {e})",
        )
    try:
        merged = result.document
        texts = [(output, json.dumps(merged.to_dict(), indent=2) + "\n")]
        if args.md:
            texts.append((Path(args.md), markdown(merged) + "\n" + merge_markdown(result)))
        if args.html:
            texts.append((Path(args.html), html(merged)))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return _fail("merge", f"cannot render the merged report ({type(e).__name__}: {e})")
    for path, text in texts:
        problem = _write("merge", path, text)
        if problem is not None:
            print(problem, file=sys.stderr)
            return EXIT_UNUSABLE
    if args.sarif:
        problem = _write("merge", Path(args.sarif), sarif_text(build_view(result.document)))
        if problem is not None:
            print(problem, file=sys.stderr)
            return EXIT_UNUSABLE
    said = merge_text(result)
    if said:
        print(said)
    mixed = result.document.merged.mixed_versions if result.document.merged else None
    if mixed:
        print(f"note: {versions_note(mixed)}")
    tests = len(result.document.tests)
    failed = result.failures()  # the drifts among them
    verdict = [f"FAILED: {', '.join(failed)}"] if failed else []
    merged_legs = result.document.merged.legs if result.document.merged else ()
    if not result.comparisons and len(merged_legs) < 2:
        verdict.append(f"nothing compared ({ONE_LEG})")
    elif not result.comparisons:
        verdict.append(
            "nothing compared (no leg saved outputs: run them with --jaxport-save-outputs)"
        )
    elif result.ok:
        verdict.append("outputs consistent" if failed else "consistent")
    print(
        f"jaxport merge: {counted(len(paths), 'leg')}, {counted(tests, 'test')}, "
        f"{counted(result.comparisons, 'output comparison')}: {'; '.join(verdict)}; "
        f"wrote {output}"
    )
    return EXIT_FAILED if failed else EXIT_OK


def _diff(args: argparse.Namespace) -> int:

    clash = _overwrites([args.base, args.head], [args.md])
    if clash is not None:
        return _fail("diff", clash)
    try:
        base = load_compared(Path(args.base))
        head = load_compared(Path(args.head))
        found = diff(base, head, memory_growth=_memory_growth(args.memory_growth, args.head, head))
    except MergeError as e:
        return _fail("diff", e)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return _fail(
            "diff", f"malformed input {args.base} or {args.head} ({type(e).__name__}: {e})"
        )
    if (
        not found.compared_tests
        and not found.audit_compared
        and found.removed_tests
        and (found.new_tests)
    ):  # two suites, or a renamed one: "0 tests compared" would read as nothing grew
        return _fail(
            "diff",
            f"{args.base} and {args.head} have no test in common "
            f"({counted(len(found.removed_tests), 'test')} in {args.base}, "
            f"{counted(len(found.new_tests), 'test')} in {args.head}; first "
            f"{found.removed_tests[0]} and {found.new_tests[0]}): nothing to compare; diff two "
            "runs of one suite (or record a new baseline: jaxport baseline)",
        )
    if args.md:
        problem = _write("diff", Path(args.md), diff_markdown(found))
        if problem is not None:
            print(problem, file=sys.stderr)
            return EXIT_UNUSABLE
    print(diff_text(found))
    return EXIT_FAILED if found.grew else EXIT_OK


def _memory_growth(given: float | None, path: str, head: Report | Counts) -> Setting[float] | None:
    """What ``jaxport diff`` holds device memory to: ``--memory-growth``, else the head
    report's ``[tool.jaxport] memory_growth`` (where its project set one), else ``None``
    (the default)."""
    if given is not None:
        return Setting(value=given, origin="--memory-growth")
    recorded = head.config.memory_growth if isinstance(head, Report) else None
    if recorded is not None:
        return Setting(value=recorded, origin=f"{path}'s [tool.jaxport]")
    return None


def _growth_option(value: str) -> float:
    """``--memory-growth``'s value, checked where it is declared (as ``[tool.jaxport]
    memory_growth`` is)."""
    try:
        number: object = float(value)
    except ValueError:
        number = value
    try:
        return growth_value("--memory-growth", number)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--memory-growth: ")) from None


def _baseline(args: argparse.Namespace) -> int:

    clash = _overwrites([args.report], [args.output])
    if clash is not None:
        return _fail("baseline", clash)
    try:
        text = baseline_json(baseline_of(load_compared(Path(args.report))))
    except MergeError as e:
        return _fail("baseline", e)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return _fail("baseline", f"{args.report}: malformed report ({type(e).__name__}: {e})")
    problem = _write("baseline", Path(args.output), text)
    if problem is not None:
        print(problem, file=sys.stderr)
        return EXIT_UNUSABLE
    print(f"jaxport baseline: wrote {args.output}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxport", description="Work with pytest-jaxport portability reports."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser("show", help="render a saved JSON report")
    show.add_argument("report", metavar="REPORT.json")
    show.add_argument("--format", choices=("text", "md", "html", "sarif"), default="text")
    show.add_argument("-v", "--verbose", action="count", default=0,
                      help="show more: every problem, more sites; -vv every test")  # fmt: skip
    show.add_argument("-q", "--quiet", action="count", default=0,
                      help="show less: the headline and the problem groups")  # fmt: skip
    add_display_options(show.add_argument, prefix="--")
    show.set_defaults(run=_show)
    capture = commands.add_parser(
        "capture-target",
        help="describe this machine's CUDA GPU for deviceless compilation "
        "([tool.jaxport] target = PATH)",
    )
    capture.add_argument(
        "-o", "--output", metavar="PATH", default=None,
        help="write the text GpuTargetConfigProto to PATH (default: print it)",
    )  # fmt: skip
    capture.set_defaults(run=_capture_target)
    merge = commands.add_parser(
        "merge",
        help="join CI legs' reports into one and compare their saved outputs across legs "
        "(exit 1 on drift, 2 on unusable input)",
    )
    merge.add_argument("legs", nargs="+", metavar="LEG.json")
    merge.add_argument("-o", "--output", required=True, metavar="MERGED.json")
    merge.add_argument("--md", metavar="PATH", default=None, help="also write Markdown")
    merge.add_argument("--html", metavar="PATH", default=None, help="also write HTML")
    merge.add_argument(
        "--sarif", metavar="PATH", default=None, help="also write SARIF 2.1.0 (code scanning)"
    )
    merge.set_defaults(run=_merge)
    diff = commands.add_parser(
        "diff",
        help="what grew and shrank from BASE to HEAD (reports or baselines; exit 1 on growth)",
    )
    diff.add_argument("base", metavar="BASE.json")
    diff.add_argument("head", metavar="HEAD.json")
    diff.add_argument("--md", metavar="PATH", default=None, help="also write Markdown")
    diff.add_argument(
        "--memory-growth", metavar="SHARE", type=_growth_option, default=None,
        help="flag a check's planned device memory that grew by more than SHARE of BASE's "
        "(0.1: 10%%; default: HEAD's [tool.jaxport] memory_growth, else 0.1)",
    )  # fmt: skip
    diff.set_defaults(run=_diff)
    baseline = commands.add_parser(
        "baseline", help="write the baseline (counts only, sorted) of a report or merged report"
    )
    baseline.add_argument("report", metavar="REPORT.json")
    baseline.add_argument("-o", "--output", required=True, metavar="FILE")
    baseline.set_defaults(run=_baseline)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `jaxport show r.json | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

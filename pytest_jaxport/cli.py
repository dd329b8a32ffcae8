"""The ``jaxport`` console script.

Exit codes: 0 success, 1 a failed check, 2 an unusable input file or bad usage (the
message names the file and what is wrong), or, for ``capture-target``, no CUDA GPU here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_jaxport import __version__

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2


def _show(args: argparse.Namespace) -> int:
    from pytest_jaxport.render import markdown, text
    from pytest_jaxport.report import ReportError, load

    try:
        report = load(Path(args.report))
    except ReportError as e:
        print(f"jaxport show: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    try:
        rendered = markdown(report) if args.format == "md" else text(report)
    except (KeyError, TypeError, ValueError) as e:
        print(f"jaxport show: {args.report}: malformed report ({type(e).__name__}: {e})",
              file=sys.stderr)  # fmt: skip
        return EXIT_UNUSABLE
    print(rendered)
    return EXIT_OK


def _capture_target(args: argparse.Namespace) -> int:
    import ctypes

    from pytest_jaxport import deviceless

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        print(
            "jaxport capture-target: no CUDA GPU here (the NVIDIA driver, libcuda.so.1, "
            "cannot be loaded); run it on the machine with the GPU, or use a shipped "
            f"description ({', '.join(deviceless.SHIPPED_TARGETS)})",
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
    from pytest_jaxport.report import write_text

    path = Path(args.output)
    try:
        write_text(path, text)
    except OSError as e:
        print(f"jaxport capture-target: cannot write {path}: {e}", file=sys.stderr)
        return EXIT_UNUSABLE
    print(f"jaxport capture-target: wrote {path}; use it with [tool.jaxport] target = "
          f"\"{path}\"")  # fmt: skip
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jaxport", description="Work with pytest-jaxport portability reports."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser("show", help="render a saved JSON report")
    show.add_argument("report", metavar="REPORT.json")
    show.add_argument("--format", choices=("text", "md"), default="text")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

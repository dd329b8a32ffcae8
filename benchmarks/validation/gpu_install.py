"""The install step of the GPU validation run (``gpu.py``): standard library only.

It runs before anything else on a GPU machine that may have nothing but ``python3``: it looks
at what the interpreter has and adds only what is missing, into ``.gpu-site/`` in this
checkout (put on ``PYTHONPATH`` for the run's parts; the interpreter itself is left alone):

- jax and jaxlib (the wheelhouse's version) and pytest-jaxport's dependencies, where the
  interpreter has no jax;
- the jax CUDA plugin and pjrt **pinned to the installed jaxlib**: with the nvidia-* CUDA wheels
  (``[with-cuda]``) where the machine has no CUDA libraries of its own, without them
  (``jax[cudaN-local]``) where it has;
- this checkout, registered as ``pytest-jaxport`` (a link to the package and a ``.dist-info``
  with its entry points: what an editable install makes, without a build backend).

Offline from a wheelhouse made beforehand with :func:`prepare_wheelhouse` (``pip download``
for the GPU machine's Python and platform); pip itself comes from the wheelhouse where the
interpreter has none. ``docs/gpu-validation.md`` has the commands.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import REPO
from benchmarks.validation.harness import Unusable

OVERLAY = REPO / ".gpu-site"
"""Where the install step puts what it installs (ignored by git)."""
SETUP_LIMIT_S = 240
CUDA_MAJORS = ("13", "12")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] gpu-validation: {message}", flush=True)


# -- the machine (standard library only) -----------------------------------------------------


def nvidia_smi() -> dict[str, str] | None:
    """The first GPU as ``nvidia-smi`` reports it (name, driver, memory, CUDA version the
    driver supports), or ``None`` where there is no NVIDIA driver."""
    try:
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    first = (query.stdout.strip().splitlines() or [""])[0]
    fields = [f.strip() for f in first.split(",")]
    if len(fields) < 3 or not fields[0]:
        return None
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", banner.stdout)
    return {
        "name": fields[0],
        "driver": fields[1],
        "memory": fields[2],
        "cuda": cuda.group(1) if cuda else "",
    }


def short_name(kind: str) -> str:
    """A file-name word for a device kind: ``NVIDIA H200`` -> ``h200``, else ``gpu``."""
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", kind)
    return model.group(1).lower() if model else "gpu"


_PROBE = r"""
import importlib.metadata as m, importlib.util, json, sys
names = ["jax", "jaxlib", "pytest", "pluggy", "numpy", "absl-py", "pytest-jaxport",
         "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt"]
versions = {}
for name in names:
    try:
        versions[name] = m.version(name)
    except m.PackageNotFoundError:
        versions[name] = None
spec = importlib.util.find_spec("pytest_jaxport")
nvidia = sorted({d.metadata["Name"] for d in m.distributions()
                 if (d.metadata["Name"] or "").lower().startswith("nvidia-cublas")})
print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
                  "versions": versions, "nvidia_wheels": nvidia,
                  "pytest_jaxport": spec.origin if spec else None}))
"""


def probe(python: str, env: Mapping[str, str]) -> dict[str, Any]:
    """What ``python`` has installed, under ``env`` (run from ``/`` so that this checkout
    is not on its path by accident)."""
    done = subprocess.run(
        [python, "-c", _PROBE], env=dict(env), cwd="/", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise Unusable(f"{python} cannot run: {done.stderr.strip()[-500:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def matching_cuda_major(versions: Mapping[str, str | None]) -> str | None:
    """The CUDA major whose jax plugin and pjrt are both installed at jaxlib's version."""
    jaxlib = versions.get("jaxlib")
    for major in CUDA_MAJORS:
        pair = (versions.get(f"jax-cuda{major}-plugin"), versions.get(f"jax-cuda{major}-pjrt"))
        if jaxlib and pair == (jaxlib, jaxlib):
            return major
    return None


def system_cuda_libraries() -> bool:
    """Whether the machine has CUDA's libraries outside pip (a CUDA toolkit or image): then
    the plugin needs no nvidia-* wheels (``jax[cuda12-local]``)."""
    return all(ctypes.util.find_library(name) for name in ("cudart", "cublas", "cudnn"))


def wheel_versions(wheelhouse: Path, distribution: str) -> list[str]:
    """The versions of ``distribution`` whose wheels are in ``wheelhouse``."""
    prefix = distribution.replace("-", "_").lower() + "-"
    return sorted(
        {
            path.name[len(prefix) :].split("-")[0]
            for path in wheelhouse.glob("*.whl")
            if path.name.lower().startswith(prefix)
        }
    )


def project_dependencies() -> list[str]:
    """``[project] dependencies`` of this checkout's pyproject.toml, but jax and jaxlib."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    if block is None:
        raise Unusable(f"{REPO / 'pyproject.toml'}: no [project] dependencies list")
    found = re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)
    return [d for d in found if not re.match(r"jax(lib)?\b", d)]


def project_version() -> str:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^version = "([^"]+)"', text, re.M)
    return found.group(1) if found else "0"


# -- the install step ----------------------------------------------------------------------


def pip_command(python: str, env: Mapping[str, str], wheelhouse: Path | None) -> list[str]:
    """How to run pip: the interpreter's own, else the pip wheel in the wheelhouse (a wheel
    runs as a zip on the path)."""
    has_pip = subprocess.run(
        [python, "-m", "pip", "--version"], env=dict(env), capture_output=True, timeout=120
    )
    if has_pip.returncode == 0:
        return [python, "-m", "pip"]
    wheels = sorted(wheelhouse.glob("pip-*.whl")) if wheelhouse else []
    if wheels:
        return [python, str(wheels[-1] / "pip")]
    raise Unusable(
        f"{python} has no pip and no pip wheel is in the wheelhouse: prepare the wheelhouse "
        "with --prepare-wheelhouse (it downloads pip's wheel too)"
    )


def pip_install(
    python: str,
    env: Mapping[str, str],
    wheelhouse: Path | None,
    requirements: Sequence[str],
    record: list[str],
    *,
    prepare: str = "--jax VERSION --python-version X.Y",
) -> None:
    """Install ``requirements`` into the overlay, offline from ``wheelhouse`` when given
    (``prepare``: the ``--prepare-wheelhouse`` arguments a failure message suggests)."""
    command = [
        *pip_command(python, env, wheelhouse), "install", "--quiet", "--disable-pip-version-check",
        "--no-cache-dir", "--no-compile", "--upgrade", "--target", str(OVERLAY),
    ]  # fmt: skip
    if wheelhouse is not None:
        command += ["--no-index", "--find-links", str(wheelhouse)]
    command += list(requirements)
    record.append(" ".join(command))
    log(f"installing {' '.join(requirements)}")
    done = subprocess.run(
        command, env=dict(env), capture_output=True, text=True, timeout=SETUP_LIMIT_S
    )
    if done.returncode != 0:
        held = ""
        if wheelhouse is not None:
            names = sorted({re.sub(r"\[.*|[=<>].*", "", r) for r in requirements})
            held = "; the wheelhouse holds " + (
                ", ".join(f"{n} {'/'.join(wheel_versions(wheelhouse, n)) or 'none'}" for n in names)
            )
        raise Unusable(
            f"pip could not install {' '.join(requirements)}{held}: "
            f"{done.stderr.strip()[-800:]}\nPrepare the wheelhouse for this machine on one "
            f"with internet: python3 -m benchmarks.validation.gpu --prepare-wheelhouse DIR "
            f"{prepare} (docs/gpu-validation.md)"
        )


def register_checkout(record: list[str]) -> None:
    """Make this checkout importable as the installed ``pytest-jaxport``, its pytest plugin
    and console entry points included, without a build backend: a link to the package and a
    ``.dist-info`` beside it in the overlay (what an editable install does with a ``.pth``)."""
    OVERLAY.mkdir(parents=True, exist_ok=True)
    link = OVERLAY / "pytest_jaxport"
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    try:
        link.symlink_to(REPO / "pytest_jaxport", target_is_directory=True)
    except OSError:  # a file system without links: a copy, made anew every run
        shutil.copytree(REPO / "pytest_jaxport", link)
    for old in OVERLAY.glob("pytest_jaxport-*.dist-info"):
        shutil.rmtree(old)
    version = project_version()
    info = OVERLAY / f"pytest_jaxport-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: pytest-jaxport\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[pytest11]\njaxport = pytest_jaxport.plugin\n\n"
        "[console_scripts]\njaxport = pytest_jaxport.cli:main\n",
        encoding="utf-8",
    )
    (info / "INSTALLER").write_text("benchmarks/validation/gpu.py\n", encoding="utf-8")
    record.append(f"registered {REPO} as pytest-jaxport {version} in {OVERLAY}")


def setup(
    python: str, env: dict[str, str], wheelhouse: Path | None, *, gpu: bool
) -> dict[str, Any]:
    """Install what is missing (see the module's docstring); ``env`` gets the overlay on its
    ``PYTHONPATH``. Raises :class:`Unusable` with the fix where it cannot."""
    started = time.monotonic()
    actions: list[str] = []
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise Unusable(f"--wheelhouse {wheelhouse}: no such folder")
    env["PYTHONPATH"] = os.pathsep.join([str(OVERLAY), *filter(None, [env.get("PYTHONPATH", "")])])
    found = probe(python, env)
    versions = found["versions"]
    if not versions["jaxlib"]:
        if wheelhouse is None:
            raise Unusable(
                f"{python} has no jax; give --wheelhouse DIR (prepared with "
                "--prepare-wheelhouse) or run with an interpreter that has jax"
            )
        jax_versions = wheel_versions(wheelhouse, "jaxlib")
        if not jax_versions:
            raise Unusable(f"the wheelhouse {wheelhouse} has no jaxlib wheel")
        version = jax_versions[-1]
        pip_install(
            python, env, wheelhouse, [f"jax=={version}", f"jaxlib=={version}",
                                      *project_dependencies()], actions,
        )  # fmt: skip
        found = probe(python, env)
        versions = found["versions"]
    if matching_cuda_major(versions) is None:
        jaxlib = versions["jaxlib"]
        major = cuda_major_to_install(versions, wheelhouse)
        libraries = bool(found["nvidia_wheels"]) or system_cuda_libraries()
        extra = "" if libraries or not gpu else "[with-cuda]"
        python_version = ".".join(found["python"].split(".")[:2])
        pip_install(
            python, env, wheelhouse,
            [f"jax-cuda{major}-plugin{extra}=={jaxlib}", f"jax-cuda{major}-pjrt=={jaxlib}"],
            actions,
            prepare=f"--jax {jaxlib} --python-version {python_version} --cuda {major}"
            + (" --with-cuda-libraries" if extra else ""),
        )  # fmt: skip
        found = probe(python, env)
        versions = found["versions"]
    missing = [name for name in ("pytest", "pluggy", "numpy", "absl-py") if not versions[name]]
    if missing:
        pip_install(
            python, env, wheelhouse,
            [d for d in project_dependencies() if re.match("|".join(missing), d)], actions,
        )  # fmt: skip
    if found["pytest_jaxport"] != str(REPO / "pytest_jaxport" / "__init__.py"):
        register_checkout(actions)
    found = probe(python, env)
    if found["pytest_jaxport"] is None or matching_cuda_major(found["versions"]) is None:
        raise Unusable(f"after the install step the environment still lacks pieces: {found}")
    return {
        "actions": actions or ["nothing to install"],
        "seconds": round(time.monotonic() - started, 1),
        "wheelhouse": str(wheelhouse) if wheelhouse else None,
        "interpreter": found,
    }


def cuda_major_to_install(versions: Mapping[str, str | None], wheelhouse: Path | None) -> str:
    """Which jax CUDA plugin to install: the major already half-installed, else the one the
    wheelhouse holds at jaxlib's version, else 13 where jax ships it and the driver runs
    CUDA 13, else 12."""
    jaxlib = versions.get("jaxlib") or ""
    for major in CUDA_MAJORS:
        if versions.get(f"jax-cuda{major}-plugin") or versions.get(f"jax-cuda{major}-pjrt"):
            return major
    if wheelhouse is not None:
        for major in CUDA_MAJORS:
            if jaxlib in wheel_versions(wheelhouse, f"jax-cuda{major}-plugin"):
                return major
    gpu = nvidia_smi()
    driver_cuda = tuple(int(p) for p in (gpu or {}).get("cuda", "0").split(".") if p.isdigit())
    jax_has_13 = tuple(int(p) for p in jaxlib.split(".")[:3] if p.isdigit()) >= (0, 7, 2)
    return "13" if jax_has_13 and driver_cuda >= (13,) else "12"


def prepare_wheelhouse(
    folder: Path,
    *,
    jax_version: str,
    python_version: str,
    cuda: str,
    with_cuda_libraries: bool,
    platforms: Sequence[str],
) -> int:
    """``pip download`` everything the install step may need, for another machine."""
    extra = "[with-cuda]" if with_cuda_libraries else ""
    requirements = [
        f"jax=={jax_version}",
        f"jaxlib=={jax_version}",
        f"jax-cuda{cuda}-plugin{extra}=={jax_version}",
        f"jax-cuda{cuda}-pjrt=={jax_version}",
        *project_dependencies(),
        "pip",
    ]
    command = [
        sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(folder),
        "--python-version", python_version, "--implementation", "cp",
        *(arg for p in platforms for arg in ("--platform", p)), *requirements,
    ]  # fmt: skip
    log(" ".join(command))
    done = subprocess.run(command)
    if done.returncode != 0:
        return done.returncode
    size = sum(p.stat().st_size for p in folder.glob("*.whl")) / 1e6
    log(f"wheelhouse {folder}: {len(list(folder.glob('*.whl')))} wheels, {size:.0f} MB")
    return 0

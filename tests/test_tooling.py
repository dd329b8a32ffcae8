"""Tests of pytest_jaxport.model.tooling, model.tooling_rules and model.project_files.

The fifth layer's scan: NVIDIA-bound tooling and CI assumptions, found once each.

A planted repository holds one assumption of each kind in the files real projects keep them
in, next to decoys that must not be reported: the same strings in ignored, excluded,
vendored and installed folders, in comments and docstrings, and portable look-alikes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_jaxport.model.project_files import list_project_files
from pytest_jaxport.model.tooling import (
    MAX_FILE_BYTES,
    TEXT_WIDTH,
    Assumption,
    _python_prose,
    assumptions_per_rule,
    scan,
    scan_text,
    scan_tree,
)
from pytest_jaxport.model.tooling_rules import TOOLING_RULES, ToolingRule, rule_ids

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

# --- the planted repository ------------------------------------------------------------------

PROJECT: dict[str, str] = {
    "Dockerfile": """\
# syntax=docker/dockerfile:1
FROM nvidia/cuda:12.3.1-cudnn9-runtime-ubuntu22.04 AS gpu
ENV XLA_FLAGS="--xla_gpu_enable_triton_gemm=false"
RUN pip install --no-cache-dir "jax[cuda12]==0.4.30"
COPY . /app
# FROM nvidia/cuda:11.8.0-base was the old base image
FROM python:3.11-slim AS cpu
RUN pip install "jax[cpu]==0.4.30"
CMD ["python", "-m", "model"]
""",
    ".github/workflows/ci.yml": """\
name: ci
on: [push, pull_request]
jobs:
  gpu-tests:
    runs-on: [self-hosted, linux]
    container:
      image: nvcr.io/nvidia/jax:24.04-py3
    env:
      CUDA_VISIBLE_DEVICES: "0"
      JAX_PLATFORMS: cuda
    steps:
      - uses: actions/checkout@v4
      - run: nvidia-smi
      - run: pytest -q
  cpu-tests:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/setup-python@v5
      # nvidia-smi and --xla_gpu_foo do not exist on this runner
      - run: JAX_PLATFORMS=cpu pytest -q
""",
    "docker-compose.yml": """\
services:
  train:
    image: nvidia/cuda:12.2.0-base-ubuntu22.04
    command: python -m model
  docs:
    image: python:3.11
""",
    "requirements.txt": """\
numpy>=1.26
jax[cuda12]==0.4.30
nvidia-cudnn-cu12>=9.1
--extra-index-url https://download.pytorch.org/whl/cu121
torch==2.3.0+cu121
cupy-cuda12x>=13
# jax[cuda12] is pinned above
""",
    "requirements-cpu.txt": """\
jax[cpu]==0.4.30
--extra-index-url https://download.pytorch.org/whl/cpu
""",
    "pyproject.toml": """\
[project]
name = "planted"
version = "0.1.0"
dependencies = ["numpy>=1.26", "jax>=0.4.30"]

[project.optional-dependencies]
cpu = ["jax[cpu]>=0.4.30"]
gpu = ["jax[cuda13]>=0.7", "jax-cuda12-plugin>=0.4.30"]
tf = ["tensorflow[and-cuda]>=2.15"]

[tool.jaxport]
platforms = ["cpu", "cuda", "rocm", "tpu"]
""",
    "environment.yml": """\
name: planted
channels:
  - conda-forge
  - nvidia
dependencies:
  - python=3.11
  - cuda-version=12.4
""",
    "scripts/profile.sh": """\
#!/usr/bin/env bash
set -euo pipefail
# nsys is NVIDIA's profiler; see the wiki for ncu too
nsys profile -o step python -m model
ncu --set full -o kernels python -m model
cuda-gdb --args python -m model
export XLA_FLAGS="--xla_gpu_autotune_level=0"
echo "report written to step.nsys-rep"
""",
    "Makefile": """\
.PHONY: test profile
test:
\tpytest -q
profile:
\tnvidia-smi --query-gpu=name --format=csv
""",
    "src/model.py": '''\
"""A model that runs anywhere.

On a gpu it once called jax.devices("gpu") and set CUDA_VISIBLE_DEVICES.
"""

import os

import jax

os.environ["CUDA_VISIBLE_DEVICES"] = "0"
jax.config.update("jax_cuda_visible_devices", "0")
jax.config.update("jax_threefry_gpu_kernel_lowering", True)


def forward(x):
    # Move to the gpu if there is one: jax.devices("gpu")
    gpu = jax.devices("gpu")[0]
    return jax.device_put(x, gpu)


def step(x):
    return jax.jit(forward, backend="gpu")(x)


def cpu_only(x):
    """Runs on the cpu; no gpu needed, unlike jax.devices("cuda")."""
    return jax.device_put(x, jax.devices("cpu")[0])
''',
    ".env": """\
XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
CUDA_VISIBLE_DEVICES=0,1
JAX_PLATFORMS=cpu
""",
    ".gitignore": """\
ignored/
*.log
/local-only.sh
""",
    # Decoys: every one of these holds assumptions that must not be reported.
    "ignored/Dockerfile": "FROM nvidia/cuda:12.3.1-base-ubuntu22.04\n",
    "ignored/run.sh": "nvidia-smi\n",
    "local-only.sh": "nsys profile python -m model\n",
    "scripts/local-only.sh": "nsys profile python -m model\n",  # only the root one is ignored
    "third_party_copy/requirements.txt": "jax[cuda12]==0.4.30\n",
    "legacy/gpu_setup.sh": "export CUDA_VISIBLE_DEVICES=0\n",
    ".venv/lib/python3.11/site-packages/jax/_src/x.py": 'jax.devices("gpu")\n',
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
    "myenv/pyvenv.cfg": "home = /usr/bin\n",
    "myenv/lib/helper.py": 'CUDA_VISIBLE_DEVICES = "0"\n',
    "node_modules/gpu-probe/run.sh": "nvidia-smi -L\n",
    "vendor/toolkit/Dockerfile": "FROM nvcr.io/nvidia/pytorch:24.01-py3\n",
    "build/lib/model.py": 'jax.devices("gpu")\n',
    "dist/setup.sh": "nvidia-smi\n",
    "planted.egg-info/requires.txt": "jax[cuda12]\n",
    "src/__pycache__/model.sh": "nvidia-smi\n",
    "README.md": "Install with `pip install jax[cuda12]` and run `nvidia-smi`.\n",
}

BINARY_FILES: dict[str, bytes] = {
    "scripts/blob.sh": b"\x7fELF\x00\x00nvidia-smi\n",
    # Not UTF-8 and not binary: read with replacement characters, reported.
    "scripts/latin1.sh": b"# r\xe9sum\xe9 \xff\xfe\nnsys profile python -m model\n",
    "scripts/huge.sh": b"nvidia-smi\n" + b"#" * MAX_FILE_BYTES,
}

EXCLUDE = ("third_party_copy/**", "legacy")

# (file, a substring of the planted line, rule id)
PLANTED: tuple[tuple[str, str, str], ...] = (
    ("Dockerfile", "FROM nvidia/cuda:12.3.1", "cuda-image"),
    ("Dockerfile", "--xla_gpu_enable_triton_gemm", "xla-gpu-flag"),
    ("Dockerfile", '"jax[cuda12]==0.4.30"', "cuda-pin"),
    (".github/workflows/ci.yml", "image: nvcr.io", "cuda-image"),
    (".github/workflows/ci.yml", 'CUDA_VISIBLE_DEVICES: "0"', "cuda-visible-devices"),
    (".github/workflows/ci.yml", "JAX_PLATFORMS: cuda", "cuda-device-string"),
    (".github/workflows/ci.yml", "- run: nvidia-smi", "nvidia-tool"),
    ("docker-compose.yml", "image: nvidia/cuda", "cuda-image"),
    ("requirements.txt", "jax[cuda12]==0.4.30", "cuda-pin"),
    ("requirements.txt", "nvidia-cudnn-cu12", "cuda-pin"),
    ("requirements.txt", "whl/cu121", "cuda-pin"),
    ("requirements.txt", "torch==2.3.0+cu121", "cuda-pin"),
    ("requirements.txt", "cupy-cuda12x", "cuda-pin"),
    ("pyproject.toml", "jax[cuda13]", "cuda-pin"),
    ("pyproject.toml", "tensorflow[and-cuda]", "cuda-pin"),
    ("environment.yml", "- nvidia", "cuda-pin"),
    ("environment.yml", "cuda-version=12.4", "cuda-pin"),
    ("scripts/profile.sh", "nsys profile -o step", "nvidia-tool"),
    ("scripts/profile.sh", "ncu --set full", "nvidia-tool"),
    ("scripts/profile.sh", "cuda-gdb --args", "nvidia-tool"),
    ("scripts/profile.sh", "--xla_gpu_autotune_level", "xla-gpu-flag"),
    ("scripts/local-only.sh", "nsys profile", "nvidia-tool"),
    ("scripts/latin1.sh", "nsys profile", "nvidia-tool"),
    ("Makefile", "nvidia-smi --query-gpu", "nvidia-tool"),
    ("src/model.py", 'os.environ["CUDA_VISIBLE_DEVICES"]', "cuda-visible-devices"),
    ("src/model.py", "jax_cuda_visible_devices", "gpu-jax-config"),
    ("src/model.py", "jax_threefry_gpu_kernel_lowering", "gpu-jax-config"),
    ("src/model.py", 'gpu = jax.devices("gpu")[0]', "cuda-device-string"),
    ("src/model.py", 'backend="gpu"', "cuda-device-string"),
    (".env", "XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler", "xla-gpu-flag"),
    (".env", "CUDA_VISIBLE_DEVICES=0,1", "cuda-visible-devices"),
)


def _line_of(root: Path, file: str, needle: str) -> int:
    lines = (root / file).read_bytes().decode("utf-8", "replace").split("\n")
    hits = [number for number, line in enumerate(lines, 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} must be on exactly one line of {file}, found {hits}"
    return hits[0]


def _expected(root: Path) -> list[tuple[str, int, str]]:
    return sorted((file, _line_of(root, file, needle), rule) for file, needle, rule in PLANTED)


def _plant(root: Path) -> Path:
    for rel, text in PROJECT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for rel, data in BINARY_FILES.items():
        (root / rel).write_bytes(data)
    return root


def _git_init(root: Path, *, stage: bool) -> None:
    assert GIT is not None
    subprocess.run([GIT, "init", "-q"], cwd=root, check=True, capture_output=True)
    if stage:
        subprocess.run([GIT, "add", "-A"], cwd=root, check=True, capture_output=True)


def _found(assumptions: tuple[Assumption, ...]) -> list[tuple[str, int, str]]:
    return [(a.file, a.line, a.rule) for a in assumptions]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _plant(tmp_path / "project")


def _assert_exactly_planted(root: Path, assumptions: tuple[Assumption, ...]) -> None:
    found = _found(assumptions)
    expected = _expected(root)
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    assert not missing, f"planted assumptions not found: {missing}"
    assert not extra, f"decoys reported: {extra}"
    assert found == expected  # each exactly once, in (file, line, rule) order


# --- the planted repository, scanned three ways ---------------------------------------------


@needs_git
@pytest.mark.parametrize("stage", [False, True], ids=["untracked", "staged"])
def test_git_repository_finds_each_planted_assumption_once(project: Path, stage: bool) -> None:
    _git_init(project, stage=stage)
    result = scan_tree(project, exclude=EXCLUDE)
    assert result.source == "git"
    _assert_exactly_planted(project, result.assumptions)


def test_plain_folder_finds_each_planted_assumption_once(project: Path) -> None:
    result = scan_tree(project, exclude=EXCLUDE, use_git=False)
    assert result.source == "walk"
    _assert_exactly_planted(project, result.assumptions)


@needs_git
def test_git_missing_falls_back_to_own_gitignore_matcher(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _git_init(project, stage=False)
    (project / ".git" / "info").mkdir(exist_ok=True)
    (project / ".git" / "info" / "exclude").write_text("scripts/local-only.sh\n")
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    result = scan_tree(project, exclude=EXCLUDE)
    assert result.source == "walk"
    expected = [e for e in _expected(project) if e[0] != "scripts/local-only.sh"]
    assert _found(result.assumptions) == expected


@needs_git
def test_git_and_walk_list_the_same_files(project: Path) -> None:
    _git_init(project, stage=False)
    by_git = list_project_files(project, exclude=EXCLUDE)
    by_walk = list_project_files(project, exclude=EXCLUDE, use_git=False)
    assert by_git.source == "git"
    assert by_walk.source == "walk"
    assert by_git.files == by_walk.files
    assert "Dockerfile" in by_git.files
    assert not [f for f in by_git.files if f.startswith(("ignored/", ".venv/", "myenv/"))]


def test_scan_counts_files_listed_and_read(project: Path) -> None:
    result = scan_tree(project, exclude=EXCLUDE, use_git=False)
    listed = list_project_files(project, exclude=EXCLUDE, use_git=False).files
    assert result.files_listed == len(listed)
    # README.md and .gitignore match no rule; blob.sh is binary and huge.sh too large.
    assert result.files_read == len(listed) - 4
    assert scan(project, exclude=EXCLUDE, use_git=False) == result.assumptions


@needs_git
def test_subfolder_of_a_repository_honours_the_parent_gitignore(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _plant(repo)
    (repo / ".gitignore").write_text("ignored/\nscripts/generated.sh\n")
    (repo / "scripts" / "generated.sh").write_text("nvidia-smi\n")
    _git_init(repo, stage=False)
    for use_git in (True, False):
        found = _found(scan(repo / "scripts", use_git=use_git))
        assert ("generated.sh", 1, "nvidia-tool") not in found, use_git
        assert ("profile.sh", 4, "nvidia-tool") in found, use_git


@needs_git
def test_root_inside_an_ignored_folder_is_scanned_as_its_own_project(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "ignored" / "checkout"
    inner.mkdir(parents=True)
    (outer / ".gitignore").write_text("ignored/\n")
    (inner / "Dockerfile").write_text("FROM nvidia/cuda:12.3.1-base\n")
    _git_init(outer, stage=False)
    for use_git in (True, False):
        assert _found(scan(inner, use_git=use_git)) == [("Dockerfile", 1, "cuda-image")]


# --- ignore and exclude semantics ----------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


GITIGNORE_CASES: dict[str, dict[str, str]] = {
    "anchored-and-dir-only": {
        ".gitignore": "/top.sh\nlogs/\n*.tmp\n",
        "top.sh": "",
        "sub/top.sh": "",
        "logs/a.sh": "",
        "sub/logs/b.sh": "",
        "logs.sh": "",
        "x.tmp": "",
        "sub/y.tmp": "",
    },
    "negation-and-nesting": {
        ".gitignore": "*.sh\n!keep.sh\n",
        "a.sh": "",
        "keep.sh": "",
        "sub/.gitignore": "!b.sh\nkeep.sh\n",
        "sub/b.sh": "",
        "sub/keep.sh": "",
        "sub/c.sh": "",
    },
    "double-star": {
        ".gitignore": "**/gen/**\ndocs/**/*.yml\nfoo/**/bar\n",
        "gen/a.yml": "",
        "x/gen/b.yml": "",
        "docs/a.yml": "",
        "docs/x/y/b.yml": "",
        "docs/c.txt": "",
        "foo/bar": "",
        "foo/a/b/bar": "",
        "foo/bar.txt": "",
    },
    "middle-slash-anchors": {
        ".gitignore": "sub/*.sh\n",
        "sub/a.sh": "",
        "deep/sub/a.sh": "",
        "sub/deeper/a.sh": "",
    },
    "escapes-classes-and-comments": {
        ".gitignore": "# a comment\n\\#hash.sh\nfile[0-9].sh\n!\\!bang.sh\nspace.sh   \n?.cfg\n",
        "#hash.sh": "",
        "file1.sh": "",
        "fileA.sh": "",
        "!bang.sh": "",
        "space.sh": "",
        "a.cfg": "",
        "ab.cfg": "",
    },
    "parent-dir-excluded-cannot-be-reincluded": {
        ".gitignore": "out/\n!out/keep.sh\n",
        "out/keep.sh": "",
        "other/keep.sh": "",
    },
}


@needs_git
@pytest.mark.parametrize("case", sorted(GITIGNORE_CASES))
def test_own_gitignore_matcher_agrees_with_git(tmp_path: Path, case: str) -> None:
    root = _tree(tmp_path / case, GITIGNORE_CASES[case])
    _git_init(root, stage=False)
    by_git = list_project_files(root)
    by_walk = list_project_files(root, use_git=False)
    assert by_git.source == "git"
    assert by_walk.files == by_git.files
    assert len(by_git.files) < len(GITIGNORE_CASES[case])  # something was ignored


_NAMES = st.sampled_from(["a", "b", "x.sh", "y.yml", "sub", "deep"])
_GLOB_PARTS = st.sampled_from(["a", "b", "*", "?", "x.sh", "*.sh", "*.yml", "sub", "**", "deep"])


@st.composite
def _gitignore_lines(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_GLOB_PARTS, min_size=1, max_size=3))
    line = "/".join(parts)
    if draw(st.booleans()):
        line = "/" + line
    if draw(st.booleans()):
        line += "/"
    if draw(st.integers(0, 4)) == 0:
        line = "!" + line
    return line


@needs_git
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(lines=st.lists(_gitignore_lines(), min_size=1, max_size=4))
def test_random_gitignore_patterns_agree_with_git(tmp_path: Path, lines: list[str]) -> None:
    root = tmp_path / f"case{abs(hash(tuple(lines)))}"
    files = {
        "a": "",
        "x.sh": "",
        "sub/x.sh": "",
        "sub/y.yml": "",
        "sub/deep/x.sh": "",
        "deep/sub/a/x.sh": "",
        "b/y.yml": "",
    }
    if not root.exists():
        _tree(root, files)
        _git_init(root, stage=False)
    (root / ".gitignore").write_text("\n".join(lines) + "\n")
    by_git = list_project_files(root)
    assert by_git.source == "git"
    assert list_project_files(root, use_git=False).files == by_git.files, lines


@pytest.mark.parametrize(
    ("exclude", "kept"),
    [
        (["vendorish"], ["a.sh", "src/a.sh"]),
        (["vendorish/**"], ["a.sh", "src/a.sh", "src/vendorish/a.sh"]),
        (["./src/"], ["a.sh", "vendorish/a.sh"]),
        (["*.sh"], []),
        (["src/*.sh"], ["a.sh", "src/vendorish/a.sh", "vendorish/a.sh"]),
        (["**/vendorish"], ["a.sh", "src/a.sh"]),
    ],
)
def test_exclude_globs(tmp_path: Path, exclude: list[str], kept: list[str]) -> None:
    root = _tree(
        tmp_path,
        {"a.sh": "", "src/a.sh": "", "src/vendorish/a.sh": "", "vendorish/a.sh": ""},
    )
    assert list(list_project_files(root, exclude=exclude, use_git=False).files) == kept


@pytest.mark.parametrize("bad", ["", "  ", "/", "[z-a]"])
def test_bad_exclude_pattern_is_an_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="exclude pattern"):
        scan(tmp_path, exclude=[bad])


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        scan(tmp_path / "file")
    with pytest.raises(ValueError, match="not a directory"):
        scan(tmp_path / "missing")


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = _tree(tmp_path / "outside", {"Dockerfile": "FROM nvidia/cuda:12\n"})
    root = tmp_path / "root"
    root.mkdir()
    try:
        (root / "linked").symlink_to(outside, target_is_directory=True)
        (root / "Dockerfile").symlink_to(outside / "Dockerfile")
    except OSError:
        pytest.skip("symlinks are not available here")
    assert scan(root, use_git=False) == ()
    assert scan(outside, use_git=False) != ()


# --- the rules, line by line ---------------------------------------------------------------

POSITIVE: list[tuple[str, str, str]] = [
    ("Dockerfile", "FROM nvidia/cuda:12.3.1-devel-ubuntu22.04", "cuda-image"),
    ("Dockerfile", "FROM --platform=linux/amd64 nvcr.io/nvidia/jax:24.04-py3", "cuda-image"),
    ("Dockerfile", "FROM pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime AS base", "cuda-image"),
    ("Dockerfile", "FROM tensorflow/tensorflow:2.15.0-gpu", "cuda-image"),
    ("Dockerfile", "FROM ghcr.io/nvidia/jax:jax", "cuda-image"),
    ("Dockerfile", "ENV NVIDIA_VISIBLE_DEVICES=all", "cuda-visible-devices"),
    ("Dockerfile", "RUN nvidia-smi", "nvidia-tool"),
    ("Dockerfile", "RUN apt-get install -y cuda-toolkit-12-3", "cuda-pin"),
    ("Containerfile", "FROM nvidia/cuda:12.2.0-base", "cuda-image"),
    ("k8s/train.yaml", "      image: nvcr.io/nvidia/pytorch:24.01-py3", "cuda-image"),
    (".gitlab-ci.yml", 'image: "nvidia/cuda:12.2.0-devel-ubuntu22.04"', "cuda-image"),
    (".gitlab-ci.yml", "  - pip install -U 'jax[cuda12]'", "cuda-pin"),
    (".github/workflows/ci.yml", "      JAX_PLATFORM_NAME: gpu", "cuda-device-string"),
    (".github/workflows/ci.yml", "      CUDA_DEVICE_ORDER: PCI_BUS_ID", "cuda-visible-devices"),
    (
        ".github/workflows/ci.yml",
        "    - run: ncu --target-processes all python x.py",
        "nvidia-tool",
    ),
    (".github/workflows/ci.yml", "      JAX_THREEFRY_GPU_KERNEL_LOWERING: 1", "gpu-jax-config"),
    ("requirements.txt", "jax[cuda12-local]==0.4.30", "cuda-pin"),
    ("requirements.txt", "jax[cpu,cuda12]", "cuda-pin"),
    ("requirements.txt", "jax-cuda12-pjrt==0.4.30", "cuda-pin"),
    ("requirements.txt", "jaxlib==0.4.20+cuda12.cudnn89", "cuda-pin"),
    ("requirements.txt", "nvidia-nccl-cu12", "cuda-pin"),
    ("requirements.txt", "cudf-cu12==24.4", "cuda-pin"),
    ("requirements.txt", "onnxruntime-gpu>=1.17", "cuda-pin"),
    (
        "requirements.txt",
        "-f https://storage.googleapis.com/jax-releases/jax_cuda_releases.html",
        "cuda-pin",
    ),
    ("requirements/base.txt", "--extra-index-url https://pypi.nvidia.com", "cuda-pin"),
    ("dev-requirements.txt", "cupy-cuda11x", "cuda-pin"),
    ("uv.lock", 'name = "nvidia-cublas-cu12"', "cuda-pin"),
    ("poetry.lock", 'name = "jax-cuda12-plugin"', "cuda-pin"),
    ("setup.cfg", "    jax[cuda12]", "cuda-pin"),
    ("setup.py", '    install_requires=["jax[cuda12]"],', "cuda-pin"),
    ("environment.yml", "  - nvidia::cuda-nvcc", "cuda-pin"),
    ("environment.yml", "  - pytorch-cuda=12.1", "cuda-pin"),
    ("environment.yml", "  - cudatoolkit=11.8", "cuda-pin"),
    ("environment.yml", "  - jaxlib=*=cuda*", "cuda-pin"),
    ("pyproject.toml", 'jax = { version = "^0.4.30", extras = ["cuda12"] }', "cuda-pin"),
    ("Pipfile", 'jax = {extras = ["cuda12"], version = "*"}', "cuda-pin"),
    (".github/workflows/ci.yml", "      - uses: Jimver/cuda-toolkit@v0.2.16", "cuda-pin"),
    ("scripts/run.sh", "/usr/local/cuda/bin/nsys profile python x.py", "nvidia-tool"),
    ("scripts/run.sh", "compute-sanitizer python x.py", "nvidia-tool"),
    ("scripts/run.sh", "docker run --rm nvidia/cuda:12.2.0-base nvidia-smi", "cuda-image"),
    ("scripts/run.sh", "docker run --rm nvidia/cuda:12.2.0-base nvidia-smi", "nvidia-tool"),
    ("scripts/run.sh", "export CUDA_VISIBLE_DEVICES=$SLURM_LOCALID", "cuda-visible-devices"),
    ("scripts/run.sh", "JAX_PLATFORMS=cuda python x.py", "cuda-device-string"),
    ("job.sbatch", "srun nsys profile python x.py", "nvidia-tool"),
    ("Makefile", "\tnvcc -o kernel kernel.cu", "nvidia-tool"),
    ("justfile", "    nsys profile python x.py", "nvidia-tool"),
    ("tox.ini", "commands = nvidia-smi", "nvidia-tool"),
    ("tox.ini", "setenv = XLA_FLAGS=--xla_gpu_cuda_data_dir=/usr/local/cuda", "xla-gpu-flag"),
    ("pyproject.toml", 'env = ["CUDA_VISIBLE_DEVICES=0"]', "cuda-visible-devices"),
    (".env.example", "XLA_FLAGS=--xla_gpu_enable_command_buffer=", "xla-gpu-flag"),
    ("gpu.env", "JAX_PLATFORMS=cuda,cpu", "cuda-device-string"),
    (".devcontainer/devcontainer.json", '  "image": "nvcr.io/nvidia/jax:24.04-py3",', "cuda-image"),
    ("src/m.py", "gpus = jax.devices('cuda')", "cuda-device-string"),
    ("src/m.py", 'gpus = jax.local_devices(backend="gpu")', "cuda-device-string"),
    ("src/m.py", 'n = jax.device_count("gpu")', "cuda-device-string"),
    ("src/m.py", 'with jax.default_device(jax.devices("gpu")[0]):', "cuda-device-string"),
    ("src/m.py", 'x = torch.ones(3, device="cuda:0")', "cuda-device-string"),
    ("src/m.py", 'y = x.to("cuda")', "cuda-device-string"),
    ("src/m.py", 'if jax.default_backend() == "gpu":', "cuda-device-string"),
    ("src/m.py", 'if "gpu" == jax.default_backend():', "cuda-device-string"),
    ("src/m.py", 'os.environ.setdefault("JAX_PLATFORMS", "cuda")', "cuda-device-string"),
    ("src/m.py", 'os.environ["JAX_PLATFORMS"] = "cpu,cuda"', "cuda-device-string"),
    ("src/m.py", 'jax.config.update("jax_platforms", "cuda")', "cuda-device-string"),
    ("src/m.py", 'jax.config.update("jax_pallas_use_mosaic_gpu", True)', "gpu-jax-config"),
    ("src/m.py", 'jax.config.update("xla_gpu_enable_fast_min_max", True)', "gpu-jax-config"),
    ("src/m.py", 'flags = "--xla_gpu_enable_triton_gemm=false"', "xla-gpu-flag"),
    ("src/m.py", 'subprocess.run(["nvidia-smi", "-L"], check=True)', "nvidia-tool"),
    ("src/m.py", 'os.system("nsys profile python train.py")', "nvidia-tool"),
    ("src/m.pyi", 'DEFAULT: str = jax.devices("gpu")', "cuda-device-string"),
]

NEGATIVE: list[tuple[str, str]] = [
    ("Dockerfile", "FROM python:3.11"),
    ("Dockerfile", "FROM ubuntu:22.04 AS base"),
    ("Dockerfile", "# FROM nvidia/cuda:12.2.0-base"),
    ("Dockerfile", "RUN pip install 'jax[cpu]'"),
    ("Dockerfile", "RUN pip install 'jax[tpu]' -f https://storage.googleapis.com/jax-releases"),
    ("requirements.txt", "jax[cpu]==0.4.30"),
    ("requirements.txt", "jax==0.4.30"),
    ("requirements.txt", "--extra-index-url https://download.pytorch.org/whl/cpu"),
    ("requirements.txt", "torch==2.3.0+cpu"),
    ("requirements.txt", "numpy>=1.26  # fast on nvidia-gpus"),
    ("requirements.txt", "jax[rocm]"),
    ("pyproject.toml", 'jax = { version = "^0.4.30", extras = ["tpu"] }'),
    ("environment.yml", "  - jaxlib=0.4.30=cpu*"),
    (".github/workflows/ci.yml", "      - uses: actions/setup-python@v5"),
    ("pyproject.toml", 'platforms = ["cpu", "cuda", "rocm", "tpu"]'),
    ("pyproject.toml", 'migrate_to = ["rocm", "tpu"]'),
    (".github/workflows/ci.yml", "    runs-on: ubuntu-latest"),
    (".github/workflows/ci.yml", "      JAX_PLATFORMS: cpu"),
    (".github/workflows/ci.yml", "    - uses: NVIDIA/some-action@v1"),
    (".github/workflows/ci.yml", "      # run nsys here once we have GPUs"),
    ("scripts/run.sh", 'echo "report at step.nsys-rep"'),
    ("scripts/run.sh", "cat https://github.com/nvidia/cuda-samples"),
    ("scripts/run.sh", "rocm-smi --showuse"),
    ("src/m.py", 'x = jax.devices("cpu")'),
    ("src/m.py", "x = jax.devices()"),
    ("src/m.py", '# run on gpu: jax.devices("gpu")'),
    ("src/m.py", '"""Runs on the gpu: jax.devices("gpu") and CUDA_VISIBLE_DEVICES."""'),
    ("src/m.py", 'print("no gpu found")'),
    ("src/m.py", "ncu = 3"),
    ("src/m.py", "import jax_cuda12_plugin"),
    ("src/m.py", 'jax.config.update("jax_enable_x64", True)'),
    ("src/m.py", 'lowered = f.trace(x).lower(lowering_platforms=("cuda",))'),
    ("src/m.py", 'platforms = ["cpu", "cuda"]'),
    ("README.md", "pip install jax[cuda12] && nvidia-smi"),
    ("docs/setup.rst", "export CUDA_VISIBLE_DEVICES=0"),
    ("model.ipynb", '"jax.devices(\\"gpu\\")"'),
]


@pytest.mark.parametrize(("file", "line", "rule"), POSITIVE)
def test_rule_finds(file: str, line: str, rule: str) -> None:
    found = scan_text(file, f"first = 1\n{line}\n")
    assert [a.rule for a in found if a.line == 2].count(rule) == 1, found
    assert all(a.line >= 2 for a in found)


@pytest.mark.parametrize(("file", "line"), NEGATIVE)
def test_rule_ignores(file: str, line: str) -> None:
    assert scan_text(file, line + "\n") == ()


@pytest.mark.parametrize(("file", "line", "rule"), POSITIVE)
def test_every_match_holds_a_needle(file: str, line: str, rule: str) -> None:
    # Needles only speed the scan up; a needle a match can lack would hide it.
    for candidate in TOOLING_RULES:
        for match in candidate.regex.finditer(line):
            if candidate.needles:
                found = match.group().lower()
                assert any(n in found for n in candidate.needles), (candidate.id, found)


def test_default_rule_ids() -> None:
    assert set(rule_ids()) == {
        "xla-gpu-flag",
        "cuda-pin",
        "cuda-image",
        "nvidia-tool",
        "cuda-device-string",
        "cuda-visible-devices",
        "gpu-jax-config",
        "oneapi-device-selection",  # oneapi's, from its description (model/platforms.py)
        "intel-tool",
    }
    for rule in TOOLING_RULES:
        assert rule.reason.strip()
        assert "\n" not in rule.reason
        assert len(rule.reason) <= 100, rule.reason


def test_line_matching_several_rules_reports_each_once() -> None:
    line = (
        'ENV XLA_FLAGS="--xla_gpu_a=1 --xla_gpu_b=2" '
        "CUDA_VISIBLE_DEVICES=0 NVIDIA_VISIBLE_DEVICES=1"
    )
    found = scan_text("Dockerfile", line + "\n")
    assert [(a.line, a.rule) for a in found] == [
        (1, "cuda-visible-devices"),
        (1, "xla-gpu-flag"),
    ]


def test_rules_sharing_an_id_report_a_line_once() -> None:
    twice = (
        ToolingRule(id="rocm-smi", pattern=r"rocm-smi", files=("*.sh",), reason="ROCm tool"),
        ToolingRule(id="rocm-smi", pattern=r"smi\b", files=("run.*",), reason="ROCm tool"),
    )
    found = scan_text("run.sh", "echo\nrocm-smi\nrocm-smi; rocm-smi\n", rules=twice)
    assert [(a.line, a.rule) for a in found] == [(2, "rocm-smi"), (3, "rocm-smi")]


def test_custom_rules_apply_only_to_their_files() -> None:
    rule = ToolingRule(
        id="rocm-tool", pattern=r"\brocprof\b", files=("scripts/*.sh",), reason="ROCm profiler"
    )
    assert [a.file for a in scan_text("scripts/p.sh", "rocprof x\n", rules=[rule])] == [
        "scripts/p.sh"
    ]
    assert [a.file for a in scan_text("a/scripts/p.sh", "rocprof x\n", rules=[rule])] == [
        "a/scripts/p.sh"
    ]
    assert scan_text("p.sh", "rocprof x\n", rules=[rule]) == ()
    assert scan_text("scripts/Dockerfile", "rocprof x\n", rules=[rule]) == ()


def test_rule_without_needles_is_searched_everywhere_it_applies(tmp_path: Path) -> None:
    rule = ToolingRule(id="hip", pattern=r"HIP_VISIBLE_DEVICES", files=("*",), reason="ROCm")
    _tree(tmp_path, {"a/b.txt": "x\nHIP_VISIBLE_DEVICES=0\n", "c.cfg": "nothing\n"})
    found = scan(tmp_path, rules=[rule], use_git=False)
    assert _found(found) == [("a/b.txt", 2, "hip")]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": "Bad Id"}, "lower-case"),
        ({"pattern": "("}, "not a valid regex"),
        ({"files": ()}, "at least one glob"),
        ({"files": "*.sh"}, "sequence of non-empty globs"),
        ({"files": ("[z-a].sh",)}, "not a valid glob"),
        ({"reason": "two\nlines"}, "one non-empty line"),
        ({"needles": "gpu"}, "needles"),
    ],
)
def test_invalid_rule_is_refused(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {
        "id": "ok",
        "pattern": "x",
        "files": ("*.sh",),
        "reason": "because",
    }
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ToolingRule(**fields)  # type: ignore[arg-type]


def test_rules_must_be_tooling_rules(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="ToolingRule"):
        scan(tmp_path, rules=[{"id": "x"}], use_git=False)  # type: ignore[list-item]


# --- file contents --------------------------------------------------------------------------


def test_crlf_and_bom_keep_line_numbers() -> None:
    text = "\ufeffFROM python:3.11\r\nRUN true\r\nRUN nvidia-smi\r\n"
    assert [(a.line, a.text) for a in scan_text("Dockerfile", text)] == [(3, "RUN nvidia-smi")]


def test_text_is_stripped_and_clipped() -> None:
    line = "    nvidia-smi " + "--flag " * 40
    (found,) = scan_text("run.sh", line + "\n")
    assert len(found.text) == TEXT_WIDTH
    assert found.text.startswith("nvidia-smi --flag")
    assert found.text.endswith("…")


def test_binary_large_and_undecodable_files(tmp_path: Path) -> None:
    for rel, data in BINARY_FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    result = scan_tree(tmp_path, use_git=False)
    assert _found(result.assumptions) == [("scripts/latin1.sh", 2, "nvidia-tool")]
    assert result.files_listed == 3
    assert result.files_read == 1
    assert "\ufffd" not in result.assumptions[0].text


def test_python_multiline_docstrings_and_strings_in_code() -> None:
    source = '''\
"""Module docstring.

jax.devices("gpu") here is prose.
"""
DEVICES = (
    "gpu"
)
x = jax.devices(
    "gpu")
y = jax.devices("gpu")  # and a comment with jax.devices("gpu")


class A:
    """Docstring with CUDA_VISIBLE_DEVICES."""

    env = {"CUDA_VISIBLE_DEVICES": "0"}
    r"""Raw bare string with backend="gpu" \\""" ; z = 1
'''
    found = [(a.line, a.rule) for a in scan_text("m.py", source)]
    assert found == [(10, "cuda-device-string"), (16, "cuda-visible-devices")]


PROSE_SOURCES = [
    '"""doc"""  # trailing comment\nx = 1\n',
    'x = "not a docstring"\n"bare"\n',
    '"a" "b"\n("c")\n',
    '"a" \\\n    "b"\nx = 1\n',
    'f(\n    "in brackets",\n)\n',
    "def f():\n    '''doc with \\''' escaped'''\n    return 1\n",
    'r"raw \\" still raw"\nb"bytes"\nRb"x" + y\n',
    "x = 1  # comment with 'quote\ny = '#not a comment'\n",
    "class A:\n    'doc'\n    x = '''\n    multi\n    '''\n",
    "if x:\n    pass\n# comment \\\n'after'\n",
    "x = [\n  1, # one\n  2]\n'doc after list'\n",
    "lambda: 'x'\n",
    "a = 1; 'not a docstring for tokenize either'\n",
]


def _tokenize_prose(text: str) -> list[tuple[int, int]]:
    """The oracle: comments and statement strings, as ``tokenize`` sees them."""
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    spans: list[tuple[int, int]] = []
    pending: list[tuple[int, int]] = []
    statement_start = True
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            spans.append((offset(token.start), offset(token.end)))
            continue
        if token.type == tokenize.NL:
            continue
        if token.type == tokenize.STRING and (statement_start or pending):
            pending.append((offset(token.start), offset(token.end)))
            statement_start = False
            continue
        if pending and token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            spans.extend(pending)
        pending = []
        statement_start = token.type in (
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENCODING,
        )
    return sorted(spans)


@pytest.mark.parametrize("source", PROSE_SOURCES)
def test_python_prose_agrees_with_tokenize(source: str) -> None:
    assert _python_prose(source) == _tokenize_prose(source)


def test_python_that_does_not_tokenize_is_still_scanned() -> None:
    source = 'x = (\n  jax.devices("gpu")\n  # unclosed bracket and string: "gpu\n'
    assert [(a.line, a.rule) for a in scan_text("m.py", source)] == [(2, "cuda-device-string")]


# --- values ---------------------------------------------------------------------------------


def test_assumption_round_trips_through_json() -> None:
    found = scan_text("Dockerfile", "FROM nvidia/cuda:12\nRUN nvidia-smi\n")
    assert len(found) == 2
    text = json.dumps([a.to_dict() for a in found])
    assert tuple(Assumption.from_dict(d) for d in json.loads(text)) == found
    assert str(found[0]) == f"Dockerfile:1: cuda-image: {found[0].reason}"


@pytest.mark.parametrize(
    "data",
    [
        {"file": "a", "line": 0, "rule": "r", "reason": "x", "text": "t"},
        {"file": "a", "line": True, "rule": "r", "reason": "x", "text": "t"},
        {"file": "a", "line": "3", "rule": "r", "reason": "x", "text": "t"},
        {"file": 1, "line": 3, "rule": "r", "reason": "x", "text": "t"},
        {"line": 3, "rule": "r", "reason": "x", "text": "t"},
    ],
)
def test_assumption_from_bad_dict_is_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="assumption key"):
        Assumption.from_dict(data)


def test_assumptions_per_rule_counts_sorted_by_rule() -> None:
    found = scan_text(
        "run.sh", "nvidia-smi\nnsys profile x\nexport CUDA_VISIBLE_DEVICES=0 && nvidia-smi\n"
    )
    assert assumptions_per_rule(found) == {"cuda-visible-devices": 1, "nvidia-tool": 3}
    assert list(assumptions_per_rule(found)) == sorted(assumptions_per_rule(found))
    assert assumptions_per_rule(()) == {}


def test_results_are_sorted_by_file_line_rule(project: Path) -> None:
    found = scan(project, exclude=EXCLUDE, use_git=False)
    keys = [(a.file, a.line, a.rule) for a in found]
    assert keys == sorted(keys)
    assert len(keys) == len(set(keys))
    assert all("\\" not in a.file and not a.file.startswith("/") for a in found)


def test_scan_leaves_the_tree_untouched(project: Path) -> None:
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    scan(project, exclude=EXCLUDE, use_git=False)
    after = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    assert before == after
    assert os.listdir(project)

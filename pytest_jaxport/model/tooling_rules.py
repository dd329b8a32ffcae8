"""The project scan's rules: NVIDIA-bound tooling and CI assumptions, as data (pure).

Each :class:`ToolingRule` is a regular expression applied per line, the file-name globs it
applies to, and a one-line reason; :data:`TOOLING_RULES` are the defaults (extended with each
platform's own from its description, and by the ``pytest_jaxport_tooling_rules`` hook).
The scan that applies them is :mod:`pytest_jaxport.model.tooling`'s.

(PYTEST_DONT_REWRITE: plugin code, not tests; its imports skip assertion rewriting.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from pytest_jaxport.model.globs import glob_regex
from pytest_jaxport.model.platforms import DESCRIPTIONS

_RULE_ID = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolingRule:
    """One kind of NVIDIA-bound assumption, as data.

    ``pattern`` is a regular expression searched in each line (Python's :mod:`re`, compiled
    with ``re.MULTILINE``; it should not look across line ends). ``files`` are globs over
    file names (``"Dockerfile*"``), or over paths when they contain a ``/``
    (``".github/workflows/*.yml"`` matches that path at any depth); matching ignores case.
    ``needles`` are optional lower-case substrings of which every match contains at least
    one: a file whose lower-cased text contains none is not searched (a speed-up only).
    Several rules may share an ``id``; a line is reported once per ``id``.

    >>> rule = ToolingRule(id="rocm-smi", pattern=r"\\brocm-smi\\b", files=("*.sh",),
    ...                    reason="ROCm-only tool")
    >>> bool(rule.regex.search("rocm-smi --showuse"))
    True
    """

    id: str
    pattern: str
    files: tuple[str, ...]
    reason: str
    needles: tuple[str, ...] = ()
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _RULE_ID.fullmatch(self.id):
            raise ValueError(
                f"tooling rule id must be lower-case letters, digits and '-', got {self.id!r}"
            )
        if isinstance(self.files, str) or not all(isinstance(g, str) and g for g in self.files):
            raise ValueError(
                f"tooling rule {self.id!r}: files must be a sequence of non-empty globs, "
                f"got {self.files!r}"
            )
        if not self.files:
            raise ValueError(f"tooling rule {self.id!r}: files must name at least one glob")
        for glob in self.files:
            try:
                re.compile(glob_regex(glob))
            except re.error as exc:
                raise ValueError(
                    f"tooling rule {self.id!r}: {glob!r} is not a valid glob: {exc}"
                ) from None
        if not isinstance(self.reason, str) or not self.reason.strip() or "\n" in self.reason:
            raise ValueError(f"tooling rule {self.id!r}: reason must be one non-empty line")
        if isinstance(self.needles, str) or not all(isinstance(n, str) and n for n in self.needles):
            raise ValueError(
                f"tooling rule {self.id!r}: needles must be a sequence of non-empty strings"
            )
        try:
            regex = re.compile(self.pattern, re.MULTILINE)
        except (re.error, TypeError) as exc:
            raise ValueError(
                f"tooling rule {self.id!r}: pattern {self.pattern!r} is not a valid regex: {exc}"
            ) from None
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "needles", tuple(n.lower() for n in self.needles))
        object.__setattr__(self, "regex", regex)


# File groups the default rules apply to. Matching ignores case; a glob without "/" is
# matched against the file name.
_PYTHON = ("*.py", "*.pyi", "*.pyw")
_SCRIPTS = (
    "*.sh",
    "*.bash",
    "*.zsh",
    "*.ksh",
    "*.fish",
    "*.slurm",
    "*.sbatch",
    "*.pbs",
    "*.lsf",
    "Makefile",
    "GNUmakefile",
    "*.mk",
    "*.make",
    "Justfile",
    "*.just",
    "Jenkinsfile",
    "Jenkinsfile.*",
    "tox.ini",
)
_CONTAINERS = (
    "Dockerfile",
    "Dockerfile.*",
    "*.Dockerfile",
    "Containerfile",
    "Containerfile.*",
    "*.Containerfile",
    "devcontainer.json",
    ".devcontainer.json",
)
# CI workflows (.github/workflows/*.yml, .gitlab-ci.yml, ...), compose files, Kubernetes
# manifests and conda environment files are all YAML.
_YAML = ("*.yml", "*.yaml")
_ENV = (".env", ".env.*", "*.env", ".envrc")
_CONFIG = ("*.toml", "*.ini", "*.cfg")
_DEPENDENCIES = (
    "pyproject.toml",
    "setup.cfg",
    "setup.py",
    "*requirements*.txt",
    "*requirements*.in",
    "requirements/*.txt",
    "requirements/*.in",
    "constraints*.txt",
    "*.lock",
    "Pipfile",
    "pylock*.toml",
    "noxfile.py",
)
_NOT_PYTHON = _SCRIPTS + _CONTAINERS + _YAML + _ENV + _CONFIG
_EVERYWHERE = _PYTHON + _NOT_PYTHON

_GPU = r"(?i:gpu|cuda)"
_DEVICE = r"""["']""" + _GPU + r"""(?::\d+)?["']"""  # "gpu", 'cuda', "cuda:0"
_PLATFORM_LIST = r"""[\w,]*?\b""" + _GPU + r"\b"  # cuda, "cpu,cuda"
_TOOLS = (
    r"(?:nsys|ncu|nvidia-smi|nvidia-docker|cuda-gdb|cuda-memcheck|compute-sanitizer"
    r"|nvprof|nv-nsight-cu-cli|dcgmi|nvcc)"
)
_TOOL_NEEDLES = ("nsys", "ncu", "nvidia", "cuda", "nvprof", "nsight", "dcgmi", "nvcc", "sanitizer")
_TOOL_REASON = "NVIDIA-only tool (Nsight, nvidia-smi, cuda-gdb): the workflow needs a counterpart"
_NOT_A_PATH = r"(?<![\w./-])"


def _any(*alternatives: str) -> str:
    return "|".join(alternatives)


TOOLING_RULES: tuple[ToolingRule, ...] = (
    ToolingRule(
        id="xla-gpu-flag",
        pattern=r"(?<![\w-])--xla_gpu_\w+",
        files=_EVERYWHERE,
        needles=("--xla_gpu_",),
        reason="GPU-only XLA flag: no effect off GPU, and cuDNN/Triton/NCCL tuning is CUDA-only",
    ),
    ToolingRule(
        id="cuda-pin",
        pattern=_any(
            r"\bjax(?:lib)?\[[^\]\n]*\bcuda",  # jax[cuda12], jax[cuda12-local], jax[cpu,cuda12]
            _NOT_A_PATH + r"jax[-_]?cuda\d*[-_](?:plugin|pjrt)\b",  # jax-cuda12-plugin
            r"\d\+cu(?:da)?\d",  # torch==2.1.0+cu121, jaxlib==0.4.20+cuda12.cudnn89
            _NOT_A_PATH + r"nvidia[-_](?!smi\b|docker\b)[a-z0-9]",  # nvidia-cudnn-cu12
            _NOT_A_PATH + r"cupy[-_]cuda\w*",
            r"download\.pytorch\.org/whl/(?:nightly/)?cu\d+",
            r"\btensorflow\[[^\]\n]*and-cuda",
            _NOT_A_PATH + r"(?:tensorflow|paddlepaddle|onnxruntime|faiss|mxnet)-gpu\b",
            _NOT_A_PATH + r"[a-z][\w.]*-cu\d{2,3}\b",  # cudf-cu12, mxnet-cu112
            r"\bpypi\.(?:ngc\.)?nvidia\.com",  # NVIDIA's package index
            r"\bdeveloper\.download\.nvidia\.com",  # NVIDIA's apt/yum repositories
            r"jax_cuda_releases",  # jax's CUDA find-links page
            _NOT_A_PATH + r"(?:cudatoolkit|pytorch-cuda)\b",  # conda
            _NOT_A_PATH + r"cuda-(?:toolkit|nvcc|version|runtime|cudart|python|bindings)\b",
            r"(?<![\w/-])nvidia::",  # conda channel prefix
            r"^[ \t]*-[ \t]*nvidia[ \t]*$",  # conda channel list entry
            r"^[ \t]*-[ \t]*[\w.-]+[ \t]*=[^=\s]*=\S*cuda",  # conda build: jaxlib=*=cuda*
            r"""\bextras[ \t]*=[ \t]*\[[^\]\n]*["'](?:and-)?cuda""",  # Poetry, Pipfile extras
            r"\buses:[ \t]*\S*(?i:cuda)",  # a CI action that installs the CUDA toolkit
        ),
        files=_DEPENDENCIES + _SCRIPTS + _CONTAINERS + _YAML,
        needles=("cuda", "nvidia", "+cu", "-cu", "-gpu", "download.pytorch.org"),
        reason="CUDA-specific dependency: NVIDIA wheels or a CUDA build no other backend uses",
    ),
    ToolingRule(
        id="cuda-image",
        pattern=_any(
            _NOT_A_PATH + r"nvidia/[a-z0-9][\w.-]*",  # nvidia/cuda:12.3.1-devel-ubuntu22.04
            r"\bnvcr\.io/",  # NVIDIA GPU Cloud
            r"\bghcr\.io/nvidia/",  # ghcr.io/nvidia/jax
            r"^[ \t]*(?i:FROM)[ \t]+(?:--platform=\S+[ \t]+)?\S*:\S*(?:cuda|cudnn|-gpu)",
            r"""\b(?:image|container):[ \t]*["']?\S*:\S*(?:cuda|cudnn|-gpu)""",
        ),
        files=_CONTAINERS + _YAML + _SCRIPTS + _ENV,
        needles=("nvidia/", "nvcr.io", "cuda", "cudnn", "-gpu"),
        reason="CUDA container image: the environment needs an NVIDIA driver and GPU",
    ),
    ToolingRule(
        id="nvidia-tool",
        pattern=r"(?<![\w.-])" + _TOOLS + r"(?![\w-])",
        files=_NOT_PYTHON,
        needles=_TOOL_NEEDLES,
        reason=_TOOL_REASON,
    ),
    ToolingRule(
        id="nvidia-tool",
        pattern=r"""["'](?:\S*/)?""" + _TOOLS + r"(?![\w-])",  # subprocess.run(["nsys", ...])
        files=_PYTHON,
        needles=_TOOL_NEEDLES,
        reason=_TOOL_REASON,
    ),
    ToolingRule(
        id="cuda-device-string",
        pattern=_any(
            # jax.devices("gpu"), jax.local_devices(backend="cuda"), jax.device_count("gpu")
            r"\b(?:local_)?(?:devices|device_count)\([ \t]*(?:backend[ \t]*=[ \t]*)?" + _DEVICE,
            # jit(f, backend="gpu"), device="cuda", platform = "cuda"
            r"\b(?:backend|platform|platforms|device|device_type|accelerator)[ \t]*=[ \t]*"
            + _DEVICE,
            # jax.default_backend() == "gpu", d.platform != "cuda"
            r"(?:\bdefault_backend\(\)|\bplatform|\bbackend|\.device_kind)[ \t]*[!=]=[ \t]*"
            + _DEVICE,
            _DEVICE + r"[ \t]*[!=]=[ \t]*(?:jax\.)?(?:default_backend\(\)|\w*\.platform)",
            r"""\bdefault_device\([^)\n]*["']""" + _GPU,  # jax.default_device(...gpu...)
            r"\bdevice\([ \t]*" + _DEVICE,  # torch.device("cuda")
            r"\.to\([ \t]*" + _DEVICE,  # tensor.to("cuda")
            # os.environ["JAX_PLATFORMS"] = "cuda", os.environ.setdefault("JAX_PLATFORMS", "gpu")
            r"""\bJAX_PLATFORMS?(?:_NAME)?["'][ \t]*(?:\][ \t]*=|,)[ \t]*["']""" + _PLATFORM_LIST,
            # jax.config.update("jax_platforms", "cuda")
            r"""["']jax_(?:platforms|platform_name)["'][ \t]*,[ \t]*["']""" + _PLATFORM_LIST,
        ),
        files=_PYTHON,
        needles=("gpu", "cuda"),
        reason='hard-coded "gpu"/"cuda" device: never runs on TPU or CPU ("cuda": nor on ROCm)',
    ),
    ToolingRule(
        id="cuda-device-string",
        pattern=r"""\bJAX_PLATFORMS?(?:_NAME)?\b["']?[ \t]*[=:][ \t]*["']?""" + _PLATFORM_LIST,
        files=_NOT_PYTHON,
        needles=("gpu", "cuda"),
        reason='hard-coded "gpu"/"cuda" platform: never runs on TPU or CPU ("cuda": nor on ROCm)',
    ),
    ToolingRule(
        id="cuda-visible-devices",
        pattern=r"\b(?:CUDA|NVIDIA)_VISIBLE_DEVICES\b|\bCUDA_DEVICE_ORDER\b",
        files=_EVERYWHERE,
        needles=("visible_devices", "device_order"),
        reason="CUDA device selection: TPUs ignore it; ROCm expects ROCR_/HIP_VISIBLE_DEVICES",
    ),
    ToolingRule(
        id="gpu-jax-config",
        pattern=_any(
            r"\bjax_(?!cuda\d)\w*?(?:gpu|cuda)\w*",  # jax_cuda_*, jax_pallas_use_mosaic_gpu
            r"""\bconfig\.update\([ \t]*["']xla_gpu_\w+""",
            r"\bJAX_(?!CUDA\d)\w*?(?:GPU|CUDA)\w*",  # the same options as environment variables
        ),
        files=_EVERYWHERE,
        needles=("gpu", "cuda"),
        reason="GPU-only jax.config option: it does nothing, or fails, on other backends",
    ),
)
"""The default rules. Extend with the ``pytest_jaxport_tooling_rules`` hook or ``rules=``."""

_FILE_GROUPS: dict[str, tuple[str, ...]] = {"everywhere": _EVERYWHERE, "not-python": _NOT_PYTHON}

TOOLING_RULES += tuple(
    ToolingRule(
        id=found.id,
        pattern=found.pattern,
        files=_FILE_GROUPS[found.files],
        needles=found.needles,
        reason=found.reason,
    )
    for described in DESCRIPTIONS.values()
    for found in described.tooling
)
# ...and each platform's own tools and environment variables, from its description
# (model/platforms.py): Intel's oneAPI, SYCL and Level Zero.


def rule_ids(rules: Iterable[ToolingRule] = TOOLING_RULES) -> tuple[str, ...]:
    """The distinct rule ids, in rule order.

    >>> rule_ids()[:3]
    ('xla-gpu-flag', 'cuda-pin', 'cuda-image')
    """
    return tuple(dict.fromkeys(rule.id for rule in rules))

#!/usr/bin/env bash
# The lent TPU v5e's part of benchmarks/tpu_chip.py (issue 48), run through the `device` tool
# from a folder holding this script, tpu_chip.py, fidelity_corpus.py, tpu_chip_project/ and
# modules/ (tpu_chip.py deviceless --out here: the corpus lowered for tpu on a CPU machine):
#   1. pytest-jaxport on the chip: tpu_chip_project's checks with --jaxport-compile=tpu (tpu
#      is present there: the compiled census is the chip's own compile);
#   2. the same modules compiled by the chip, and each program as a user's jit compiles it.
# Everything lands in $OUT/tpu-chip.tar.gz. About 3 minutes.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
D="$OUT/tpu-chip"
mkdir -p "$D"
start=$(date +%s)
python3 -c "import jax, importlib.metadata as m; print(jax.__version__, m.version('libtpu'), jax.devices())" \
    > "$D/devices.txt" 2>&1
rm -rf /tmp/tpu_chip_project && cp -r "$HERE/tpu_chip_project" /tmp/tpu_chip_project
(cd /tmp/tpu_chip_project && timeout 90 python3 -m pytest -p no:cacheprovider -p no:randomly -q -rA \
    --jaxport-compile=tpu --jaxport-report="$D/onchip.json" > "$D/onchip.txt" 2>&1; echo "rc=$?" >> "$D/onchip.txt")
echo "onchip done at $(( $(date +%s) - start )) s" >> "$D/times.txt"
(cd "$HERE" && timeout 140 python3 tpu_chip.py chip --modules "$HERE/modules" --out "$D" --sizes small --deadline 110 \
    > "$D/chip.log" 2>&1; echo "rc=$?" >> "$D/chip.log")
echo "chip done at $(( $(date +%s) - start )) s" >> "$D/times.txt"
cd "$OUT" && tar czf tpu-chip.tar.gz tpu-chip && rm -rf tpu-chip

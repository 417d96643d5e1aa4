#!/usr/bin/env bash
# Packs what a `run` call on the GPU machine needs, from the repo root here: carry [".carry", ".gpu"] and start the
# command with `source .gpu/setup.sh` (it installs the wheels once per machine and makes shardlab importable from .gpu/src).
#   .carry/whl/          deepspeed, hjson, pydantic (../shared/gpu/make_wheels.sh), liger-kernel, torchao, datasets,
#                        pytest (the CUDA-only tests): what the GPU image (Python 3.12) lacks
#   .carry/extra.tar.xz  datasets' compiled dependencies (pyarrow, xxhash, ...), unpacked there only where the image's
#                        own cannot import
#   .gpu/src/            a copy of this tree (the package, benchmarks/*.py, the test scripts a call runs)
#   .gpu/setup.sh        the first line of every call (benchmarks/gpu_setup.sh)
# Re-run it after any change to the code a call runs: `bash benchmarks/gpu_pack.sh` (wheels are kept once built;
# --src refreshes only .gpu/src). Both folders are git-ignored; together they stay under run's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY312=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
pin() { sed -n "s/^$1==//p" .ci/constraints.txt; }
dl() {  # wheels for the GPU image's Python into the first argument's folder; pip's warnings about local indexes dropped
  local log; log=$(mktemp)
  python3 -m pip download -q --no-deps "${PY312[@]}" -d "$@" 2> "$log" || { grep -v WARN "$log" >&2; rm -f "$log"; exit 1; }
  rm -f "$log"
}

if [ "${1:-}" != "--src" ] && [ ! -f .carry/extra.tar.xz ]; then
  wheels=${SHARED:-../shared}/gpu/make_wheels.sh  # SHARED: where the workplace's shared folder is, from this checkout
  [ -f "$wheels" ] || { echo "gpu_pack.sh: $wheels not found; set SHARED to the shared folder" >&2; exit 2; }
  bash "$wheels" "$(pin deepspeed)" > /dev/null 2> >(grep -v WARNING >&2)
  mkdir -p .carry/whl && cp .whl/*.whl .carry/whl/
  dl .carry/whl "datasets==$(pin datasets)" "torchao==$(pin torchao)" liger-kernel==0.8.5 pytest pluggy iniconfig
  tmp=$(mktemp -d)
  # its compiled (and pickling) dependencies at the versions its METADATA asks for, built for 3.12
  mapfile -t deps < <(python3 - .carry/whl/datasets-*.whl <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
for req in re.findall(r"^Requires-Dist: (.+)$", meta, re.M):
    if ";" not in req and re.match(r"(pyarrow|dill|xxhash|multiprocess|fsspec)\b", req):
        print(req.replace(" ", ""))
PY
)
  dl "$tmp/whl" "${deps[@]}"
  mkdir "$tmp/site" && for w in "$tmp"/whl/*.whl; do python3 -m zipfile -e "$w" "$tmp/site"; done
  tar cJf .carry/extra.tar.xz.tmp -C "$tmp/site" . && mv .carry/extra.tar.xz.tmp .carry/extra.tar.xz
  rm -rf "$tmp"
fi

rm -rf .gpu/src.tmp && mkdir -p .gpu/src.tmp/benchmarks .gpu/src.tmp/tests/strategies
cp -r core strategies recipes pyproject.toml .gpu/src.tmp/
cp benchmarks/*.py .gpu/src.tmp/benchmarks/
cp tests/__init__.py .gpu/src.tmp/tests/
cp tests/strategies/__init__.py tests/strategies/*_steps.py .gpu/src.tmp/tests/strategies/
find .gpu/src.tmp -name __pycache__ -prune -exec rm -rf {} +
rm -rf .gpu/src && mv .gpu/src.tmp .gpu/src

cp benchmarks/gpu_setup.sh .gpu/setup.sh
du -sh .carry .gpu | tr '\n' ' '; echo

#!/usr/bin/env bash
# The wheels benchmarks/run_on_gpu.sh installs on the GPU machine, where nothing can be downloaded and whose Python
# 3.12 has no Ray: Ray (the worker-scaling part: embedded local Ray) and what Ray needs that such a machine lacks
# (jsonschema, jsonschema-specifications, referencing, rpds-py), each at the version installed here, and torchao
# 0.18.0 (the layer sweep's fp8 rows through its Float8Linear), for CPython 3.12
# on x86-64 Linux, into .whl/ (*.whl is git-ignored). Ray's wheel is repacked without its Java jars and the
# dashboard's source maps (a local Python Ray uses neither; 31 of its 75 MB), so that the working tree and .whl/
# stay small (under 64 MiB together).
#
#     bash benchmarks/gpu_machine_wheels.sh          (from the repository root, where pip can download; prints the size)
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(ray jsonschema jsonschema-specifications referencing rpds-py)
PINS=()
for p in "${PKGS[@]}"; do
    PINS+=("$p==$(python3 -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$p")")
done
mkdir -p .whl
rm -f .whl/*.whl
PLATFORMS=()
for n in 17 24 27 28 31 34 35; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
# torchao (not installed here): the fp8 rows' Float8Linear, at the version the measured file names
PINS+=("torchao==0.18.0")
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 "${PLATFORMS[@]}" -d .whl "${PINS[@]}"
python3 - <<'PY'
import glob, os, zipfile

DROP = ("ray/jars/", ".js.map")  # Java workers' jars; the dashboard bundle's source maps
for path in glob.glob(".whl/ray-*.whl"):
    tmp = path + ".tmp"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            name = info.filename
            if name.startswith(DROP[0]) or name.endswith(DROP[1]):
                continue
            data = src.read(name)
            if name.endswith(".dist-info/RECORD"):  # the dropped files' lines out of the record too
                data = b"\n".join(line for line in data.split(b"\n")
                                  if not (line.startswith(DROP[0].encode()) or b".js.map," in line))
            dst.writestr(info, data)
    os.replace(tmp, path)
PY
ls -la .whl
du -cb .whl/*.whl | tail -1

#!/usr/bin/env bash
# Gather what `make gpu-check` needs on the lent GPU machine and its image lacks, into .gpu/
# (git-ignored; about 50 MB, under the device tool's 64 MiB): wheels for its Python 3.12 and the
# en-fr corpus, gzipped. Then, with the device tool: carry [".gpu"] and run
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl \
#     && PYTHONPATH=/tmp/site:$PWD make gpu-check PYTHON=python3 GPU_CHECK="--data .gpu/enfr"
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data/enfr}
rm -rf .gpu && mkdir -p .gpu/whl .gpu/enfr
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/.gpu/" "$exclude" 2>/dev/null || echo "/.gpu/" >> "$exclude"
# The image has torch, sentencepiece, sacrebleu, typer, tqdm, pyyaml, safetensors, pyarrow,
# pandas and huggingface-hub; these are missing (no dependencies pulled: all named here).
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .gpu/whl \
    datasets dill multiprocess pydantic pydantic-core annotated-types typing-inspection ctranslate2
for f in train.en train.fr valid.en valid.fr; do
    gzip -c "$DATA/$f" > ".gpu/enfr/$f.gz"
done
du -sh .gpu

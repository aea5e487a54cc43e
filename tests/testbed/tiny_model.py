"""Tiny models that the real vLLM CPU build serves, made deterministically in seconds.

    .venv-engine/bin/python tests/testbed/tiny_model.py OUT_DIR [--model tiny-qwen3-next]  # needs torch,
                                                                                       # safetensors, tokenizers

tiny-llama (default): a Llama (tests/engine/models/tiny-llama/config.json: hidden 64, head_dim 32, float32).
tiny-qwen3-next: the hybrid the seeds are about (tests/engine/models/tiny-qwen3-next/config.json): 3 Gated
DeltaNet layers + 1 gated full-attention layer, 4 routed experts + a shared expert in every layer, linear
key/value head dim 128 (the CPU GDN kernel needs it); checkpoint names as vLLM's qwen3_next loader reads them
(one tensor per expert). No MTP weights: the CPU build cannot serve MTP with prefix caching on a hybrid.

Writes config.json,
generation_config.json, model.safetensors (random weights from a fixed seed), a byte-level BPE tokenizer
trained with `tokenizers` on the built-in text below (tokenizer.json), and tokenizer_config.json with a
ChatML chat template. Every file's bytes are the same on every run (the test bed's model hub stand-in
serves them at a fixed commit, so their hashes must not move). TEST CODE ONLY.

--resume-blob-mib N adds original/consolidated.bin, N MiB of deterministic bytes: larger than
huggingface_hub's 10 MiB download chunk, so a transfer the hub stand-in interrupts resumes with a Range
request (smaller files are restarted from byte 0). vLLM loads top-level weights only and ignores it.
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "tests/engine/models"
SEED = 20240607
SPECIAL_TOKENS = ["<pad>", "<s>", "<|im_end|>", "<|im_start|>"]  # ids 0..3: bos 1, eos 2 as in config.json
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TEXT = """\
Two small computers sit side by side on a desk and share one fast cable between them.
Each one holds half of a language model, and together they answer questions one token at a time.
The first node is the head: it listens on port 8000, schedules requests and gathers the results.
The second node is the worker: it waits for the head, loads its half of the weights and joins the group.
A deployment is ready when both ranks are loaded, the link is up, the warm-up requests have run and the
acceptance checks pass; an open port alone proves nothing.
The weights are pinned to one revision and downloaded once; the engine image is pinned by its digest.
Hello! How can I help you today? Please summarise the text above in one short sentence.
The quick brown fox jumps over the lazy dog, then the dog wakes up and chases the fox around the garden.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 65536 131072 262144.
def serve(model, port=8000):\n    return start_engine(model=model, port=port, tensor_parallel_size=2)
{"role": "user", "content": "What is the capital of France?"}, {"role": "assistant", "content": "Paris."}
"""


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TEXT.splitlines() * 4, trainer=trainer)
    return tokenizer


def random_source():
    """rand(*shape): small normal weights from one seeded generator, so every run writes the same bytes."""
    import torch

    gen = torch.Generator().manual_seed(SEED)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * 0.02).contiguous()

    return rand


def llama_weights(config):
    import torch

    rand = random_source()
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    tensors = {"model.embed_tokens.weight": rand(vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = rand(heads * head_dim, hidden)
        tensors[p + "self_attn.k_proj.weight"] = rand(kv_heads * head_dim, hidden)
        tensors[p + "self_attn.v_proj.weight"] = rand(kv_heads * head_dim, hidden)
        tensors[p + "self_attn.o_proj.weight"] = rand(hidden, heads * head_dim)
        tensors[p + "mlp.gate_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.up_proj.weight"] = rand(inter, hidden)
        tensors[p + "mlp.down_proj.weight"] = rand(hidden, inter)
        tensors[p + "input_layernorm.weight"] = torch.ones(hidden)
        tensors[p + "post_attention_layernorm.weight"] = torch.ones(hidden)
    tensors["model.norm.weight"] = torch.ones(hidden)
    tensors["lm_head.weight"] = rand(vocab, hidden)
    return tensors


def gated_deltanet(rand, config, p):
    """One Gated DeltaNet layer: fused q/k/v/z and b/a projections, causal conv over q/k/v, decay and norm."""
    import torch

    hidden, k_heads, v_heads = config["hidden_size"], config["linear_num_key_heads"], config["linear_num_value_heads"]
    key_dim, value_dim = k_heads * config["linear_key_head_dim"], v_heads * config["linear_value_head_dim"]
    return {
        p + "in_proj_qkvz.weight": rand(2 * key_dim + 2 * value_dim, hidden),
        p + "in_proj_ba.weight": rand(2 * v_heads, hidden),
        p + "conv1d.weight": rand(2 * key_dim + value_dim, 1, config["linear_conv_kernel_dim"]),
        p + "A_log": torch.log(torch.linspace(1.0, 16.0, v_heads)),
        p + "dt_bias": torch.ones(v_heads),
        p + "norm.weight": torch.ones(config["linear_value_head_dim"]),
        p + "out_proj.weight": rand(hidden, value_dim),
    }


def gated_attention(rand, config, p):
    """Full attention with an output gate (q_proj holds query and gate) and per-head q/k norms."""
    import torch

    hidden, heads, kv_heads, head_dim = (
        config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")
    )
    return {
        p + "q_proj.weight": rand(2 * heads * head_dim, hidden),
        p + "k_proj.weight": rand(kv_heads * head_dim, hidden),
        p + "v_proj.weight": rand(kv_heads * head_dim, hidden),
        p + "o_proj.weight": rand(hidden, heads * head_dim),
        p + "q_norm.weight": torch.zeros(head_dim),
        p + "k_norm.weight": torch.zeros(head_dim),
    }


def sparse_moe(rand, config, p):
    """Router, routed experts (one tensor per expert and projection) and the gated shared expert."""
    hidden, inter, shared = (
        config["hidden_size"],
        config["moe_intermediate_size"],
        config["shared_expert_intermediate_size"],
    )
    tensors = {p + "gate.weight": rand(config["num_experts"], hidden), p + "shared_expert_gate.weight": rand(1, hidden)}
    experts = [f"experts.{e}." for e in range(config["num_experts"])] + ["shared_expert."]
    for expert in experts:
        width = shared if expert == "shared_expert." else inter
        tensors[p + expert + "gate_proj.weight"] = rand(width, hidden)
        tensors[p + expert + "up_proj.weight"] = rand(width, hidden)
        tensors[p + expert + "down_proj.weight"] = rand(hidden, width)
    return tensors


def qwen3_next_weights(config):
    import torch

    rand = random_source()
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    tensors = {"model.embed_tokens.weight": rand(vocab, hidden)}
    for i, kind in enumerate(config["layer_types"]):
        p = f"model.layers.{i}."
        mixer = gated_deltanet if kind == "linear_attention" else gated_attention
        tensors.update(mixer(rand, config, p + ("linear_attn." if kind == "linear_attention" else "self_attn.")))
        tensors.update(sparse_moe(rand, config, p + "mlp."))
        # Qwen3-Next's RMSNorm scales by (1 + weight): zeros are the identity
        tensors[p + "input_layernorm.weight"] = torch.zeros(hidden)
        tensors[p + "post_attention_layernorm.weight"] = torch.zeros(hidden)
    tensors["model.norm.weight"] = torch.zeros(hidden)
    tensors["lm_head.weight"] = rand(vocab, hidden)
    return tensors


MODELS = {"tiny-llama": llama_weights, "tiny-qwen3-next": qwen3_next_weights}


def write_json(path, data):
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def resume_blob(path, mib):
    """mib MiB from a sha256 counter stream: the same bytes on every machine and Python version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        for block in range(mib * 1024 * 1024 // 32):
            out.write(hashlib.sha256(b"%d:%d" % (SEED, block)).digest())


def make(out_dir, resume_blob_mib=0, model="tiny-llama"):
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_file = MODELS_DIR / model / "config.json"
    config = json.loads(config_file.read_text())
    (out / "config.json").write_bytes(config_file.read_bytes())
    write_json(
        out / "generation_config.json",
        {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"], "do_sample": False},
    )
    save_file(MODELS[model](config), str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer = train_tokenizer()
    (out / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n")
    special = {"bos_token": "<s>", "eos_token": "<|im_end|>", "pad_token": "<pad>"}
    write_json(out / "special_tokens_map.json", special)
    write_json(
        out / "tokenizer_config.json",
        {
            **special,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 4096,
            "chat_template": CHAT_TEMPLATE,
            "add_bos_token": False,
            "add_eos_token": False,
            "clean_up_tokenization_spaces": False,
        },
    )
    if resume_blob_mib:
        resume_blob(out / "original" / "consolidated.bin", resume_blob_mib)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    for path in files:
        path.chmod(0o644)
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--resume-blob-mib", type=int, default=0, metavar="N")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny-llama")
    args = parser.parse_args()
    for name, digest in make(args.out_dir, args.resume_blob_mib, args.model).items():
        print(f"{digest}  {name}")


if __name__ == "__main__":
    sys.exit(main())

"""Builds a tiny random-weight Llama and its tokenizer in a folder, for a real engine to serve.

Run by the engine's own interpreter (it needs transformers and torch, which loadgen does not):
``$LOADGEN_VLLM_PYTHON tests/engines/tiny_model.py DIR``. Nothing is downloaded: the byte-level
BPE tokenizer is trained here on a few sentences, so a synthetic word is several tokens (as with
real tokenizers) and random weights emit byte tokens that do not decode to complete text on their
own, which is exactly when vLLM streams an empty-content chunk.
"""

from __future__ import annotations

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "the",
    "serving",
    "engine",
    "batches",
    "tokens",
    "latency",
    "throughput",
    "replica",
    "capacity",
    "plan",
    "sweep",
    "level",
    "prompt",
    "output",
    "stream",
]


def build(out: str) -> None:
    corpus = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(20)) for i in range(200)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    fast.save_pretrained(out)
    # head_dim 64: vLLM's CPU attention kernels refuse smaller heads.
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)


if __name__ == "__main__":
    build(sys.argv[1])

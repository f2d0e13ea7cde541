"""Writes a small HuggingFace-format tokenizer for `make e2e-bench`.

aiperf counts and synthesizes prompt tokens with a HuggingFace tokenizer, and
would download one (or tiktoken's o200k_base table) at start-up; this
machine reaches no such host. The emulator's own tokenizer is a regular
expression with FNV-32a ids that no HuggingFace file describes, so the
benchmark gets a byte-level BPE trained here, in a second, on the corpus
aiperf itself ships for synthetic prompts: every prompt it builds is made of
that corpus, and every piece of it encodes and decodes exactly. Token counts
aiperf reports are this tokenizer's; the emulator counts its own.

usage: e2e_tokenizer.py OUT_DIR
"""
import pathlib
import sys

import aiperf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast


def main():
    out = pathlib.Path(sys.argv[1])
    if (out / "tokenizer.json").exists():
        return
    corpus = pathlib.Path(aiperf.__file__).parent / "dataset" / "generator" / "assets" / "shakespeare.txt"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train([str(corpus)], trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(out))


if __name__ == "__main__":
    main()

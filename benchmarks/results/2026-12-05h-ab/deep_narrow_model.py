# The CPU model of 2026-12-05h-ab.md: llama-1b's 22 decoder layers at hidden 64 (4 heads, 1 KV head, vocabulary 320,
# untied), random weights, so that a step is mostly host work. Usage: python3 deep_narrow_model.py FOLDER untied 22
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from shardlab.recipes.model import byte_tokenizer
tied = sys.argv[2] == "tied"
cfg = LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=int(sys.argv[3]), num_attention_heads=4,
                  num_key_value_heads=1, vocab_size=320, max_position_embeddings=2048, tie_word_embeddings=tied,
                  bos_token_id=0, eos_token_id=1, pad_token_id=1)
torch.manual_seed(0)
m = LlamaForCausalLM(cfg)
m.save_pretrained(sys.argv[1]); byte_tokenizer().save_pretrained(sys.argv[1])

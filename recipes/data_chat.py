"""Chat and instruction records -> token ids and labels: rendered with a chat template, trained on the assistant's
tokens only.

A record becomes a list of {role, content} messages: chat records are their `messages`; prompt-completion and alpaca
records a user turn and an assistant turn (alpaca: instruction, then a blank line and the input when it is not blank).
They are rendered with the tokenizer's chat template, or, where the tokenizer has none, LLAMA3_TEMPLATE (a tokenizer
with Llama 3's special tokens) or PLAIN_TEMPLATE (any other).

Which tokens are the assistant's: the conversation is rendered up to each assistant turn (with the generation prompt)
and through it; what the turn adds (its content and end-of-turn marker) is a span of the whole rendering, and a token
of the whole rendering is a label when its characters overlap a span, the rule of transformers'
`apply_chat_template(return_assistant_tokens_mask=True)` (which only works with templates that carry `{% generation %}`
markers; this works with any template that renders a conversation's first turns as a prefix of the whole). Every other
label is -100 (IGNORE), and so is each example's first token: in a packed block it is never a target predicted from
the example before it.
"""
from __future__ import annotations

import hashlib
import os
from typing import Optional

from shardlab.core.errors import UserError

FORMATS = ("chat", "prompt-completion", "alpaca")
"""The formats rendered with a chat template, in the order --data-format auto tries them."""
COLUMNS = {"chat": ("messages",), "prompt-completion": ("prompt", "completion"), "alpaca": ("instruction", "output")}
"""The fields each format needs (alpaca's `input` is optional)."""
ROLES = ("system", "user", "assistant", "tool")
IGNORE = -100
"""The label of a token that is not a target (PyTorch's cross-entropy ignore_index, Hugging Face's convention)."""
BATCH = 256
"""Records per rendering batch."""
BYTES_PER_PROCESS = 1 << 20
"""Records' bytes per rendering process, at least (fewer processes for less data: starting one costs about a second)."""

# Llama 3's published prompt format (Meta, "Meta Llama 3 model card and prompt formats",
# https://www.llama.com/docs/model-cards-and-prompt-formats/meta-llama-3/): <|begin_of_text|>, then each message as
# <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>; the assistant's turn is prompted by its header.
# Unlike Meta's own template the contents are not trimmed, so an assistant turn's labels are its content exactly,
# then <|eot_id|>.
LLAMA3_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
LLAMA3_TEMPLATE = (
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
# A tokenizer with neither a chat template nor Llama 3's special tokens (the byte-level tokenizer of the shipped
# shapes, most base models'): plain text, each turn "### Role:\nCONTENT", turns separated by a blank line, and an
# assistant turn ended by the tokenizer's EOS token, so that the model learns where its answer stops.
# (Newlines right after a block tag are written as {{ '\n\n' }}: transformers renders with trim_blocks.)
PLAIN_TEMPLATE = (
    "{% for m in messages %}{% if not loop.first %}{{ '\\n\\n' }}{% endif %}### {{ m['role'] | capitalize }}:\n"
    "{{ m['content'] }}{% if m['role'] == 'assistant' and eos_token is defined and eos_token %}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{% if messages %}{{ '\\n\\n' }}{% endif %}### Assistant:\n{% endif %}")
DEFAULTS_KEY = hashlib.sha256((LLAMA3_TEMPLATE + PLAIN_TEMPLATE).encode()).hexdigest()[:12]
"""Part of the data cache key: a change to the default templates re-renders cached data."""


def detect(columns: list[str]) -> str:
    """--data-format auto: the first format whose fields the records have, else text."""
    return next((fmt for fmt in FORMATS if all(c in columns for c in COLUMNS[fmt])), "text")


def found_line(fmt: str, text_field: str) -> str:
    """What --data-format auto says it found."""
    if fmt == "text":
        return (f"text records (no 'messages', 'prompt' + 'completion' or 'instruction' + 'output' fields), "
                f"trained on '{text_field}'")
    return f"{fmt} records ({' + '.join(repr(c) for c in COLUMNS[fmt])}), trained on the assistant's tokens only"


def template_for(tokenizer) -> tuple[Optional[str], str]:
    """The chat template to render with (None: the tokenizer's own) and its name, for the data note."""
    if getattr(tokenizer, "chat_template", None):
        return None, "the tokenizer's chat template"
    ids = [tokenizer.convert_tokens_to_ids(t) for t in LLAMA3_TOKENS]
    if all(i is not None and i != tokenizer.unk_token_id for i in ids):
        return LLAMA3_TEMPLATE, "the Llama 3 default template (the tokenizer has none)"
    return PLAIN_TEMPLATE, "the plain-text default template (the tokenizer has no chat template nor Llama 3's tokens)"


def to_messages(record: dict, fmt: str) -> list[dict]:
    """A record as {role, content} messages; ValueError says what is wrong with it."""
    if fmt == "prompt-completion":
        return [{"role": "user", "content": record["prompt"]}, {"role": "assistant", "content": record["completion"]}]
    if fmt == "alpaca":
        extra = record.get("input") or ""
        user = record["instruction"] + ("\n\n" + extra if extra.strip() else "")
        return [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"]}]
    messages = record["messages"]
    if not messages:
        raise ValueError("its 'messages' list is empty")
    out = []
    for k, m in enumerate(messages, 1):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise ValueError(f"message {k} has role {role!r}; the known roles are {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            raise ValueError(f"message {k} ({role}) has no text 'content'")
        out.append({"role": role, "content": m["content"]})
    if not any(m["role"] == "assistant" for m in out):
        raise ValueError("its 'messages' have no assistant turn, so nothing to train on; give each record one")
    return out


def render(tokenizer, template: Optional[str], messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The conversation as text, and the character spans [start, end) of its assistant turns (see the module doc).
    A conversation that opens with the assistant has no prompt to render before it: its turn starts where its content
    last appears in the rendering of that turn alone."""
    def text(msgs: list[dict], prompt: bool) -> str:
        try:
            return tokenizer.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=prompt)
        except Exception as e:  # noqa: BLE001 - a template's own refusal (roles that do not alternate, ...)
            raise ValueError(f"the chat template refused it ({_first_line(e)})") from None

    whole = text(messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        through = whole if i == len(messages) - 1 else text(messages[:i + 1], False)
        if i:
            before = text(messages[:i], True)
        else:  # the conversation opens with the assistant: no prompt to render (templates refuse an empty one)
            before = through[:through.rfind(m["content"])] if m["content"] in through else None
        if before is None or not (through.startswith(before) and whole.startswith(through)):
            raise ValueError("the chat template does not render the conversation's first turns as the start of the "
                             "whole, so the assistant's tokens cannot be told apart; give a tokenizer whose template does")
        spans.append((len(before), len(through)))
    return whole, spans


def labels_of(ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """Each token's label: its id where its characters overlap an assistant span, else IGNORE; the first token IGNORE."""
    labels, j = [IGNORE] * len(ids), 0
    for k, (start, end) in enumerate(offsets):
        while j < len(spans) and start >= spans[j][1]:
            j += 1
        if j == len(spans):
            break
        if end > spans[j][0]:
            labels[k] = ids[k]
    if labels:
        labels[0] = IGNORE
    return labels


def tokenise_examples(parts: list, names: list[str], tokenizer, template: Optional[str], fmt: str,
                      workers: int) -> tuple[list, int]:
    """Each part as a table of examples: `input_ids` (uint32), `labels` (int32, IGNORE where not a target),
    `first_label` (the first target's position, -1 for none) and `sep` (an EOS separator follows it in a block);
    and the most processes a part was rendered over."""
    import datasets

    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"--data-format {fmt}: needs a fast (Rust) tokenizer to find the assistant's tokens; "
                        "give a model folder with tokenizer.json")
    features = datasets.Features({"input_ids": datasets.List(datasets.Value("uint32")),
                                  "labels": datasets.List(datasets.Value("int32")),
                                  "first_label": datasets.Value("int32"), "sep": datasets.Value("bool")})
    out, used = [], 1
    for part, where in zip(parts, names):
        procs = min(workers, -(-len(part) // BATCH), max(1, part.data.nbytes // BYTES_PER_PROCESS))
        used = max(used, procs)
        if procs > 1:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            out.append(part.with_format("arrow").map(
                _encode, batched=True, with_indices=True, batch_size=BATCH, writer_batch_size=BATCH, features=features,
                remove_columns=part.column_names, num_proc=procs if procs > 1 else None,
                fn_kwargs={"tokenizer": tokenizer, "template": template, "fmt": fmt, "where": where}))
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - a worker's UserError may come back wrapped
            found = _user_error(e)
            if found is e:
                raise
            raise found from None
    return out, used


def _encode(batch, indices: list[int], tokenizer, template: Optional[str], fmt: str, where: str):
    """A batch of records (an arrow table) -> their examples (an arrow table)."""
    import pyarrow as pa

    texts, spans = [], []
    for record, i in zip(batch.to_pylist(), indices):
        try:
            text, s = render(tokenizer, template, to_messages(record, fmt))
        except ValueError as e:
            raise UserError(f"--data {where}: record {i + 1}: {e}") from None
        texts.append(text)
        spans.append(s)
    encodings = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    eos = tokenizer.eos_token_id
    ids, labels, first, sep = [], [], [], []
    for e, s in zip(encodings, spans):
        ids.append(e.ids)
        labels.append(labels_of(e.ids, e.offsets, s))
        first.append(next((k for k, v in enumerate(labels[-1]) if v != IGNORE), -1))
        sep.append(eos is not None and bool(e.ids) and e.ids[-1] != eos)
    return pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.uint32())),
                     "labels": pa.array(labels, type=pa.list_(pa.int32())),
                     "first_label": pa.array(first, type=pa.int32()), "sep": pa.array(sep, type=pa.bool_())})


def _user_error(error: BaseException) -> BaseException:
    """The UserError behind an exception (datasets re-raises a worker's), else the exception itself."""
    seen = error
    while seen is not None:
        if isinstance(seen, UserError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return error


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]

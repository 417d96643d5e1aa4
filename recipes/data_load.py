"""Reading --data with Hugging Face `datasets`: which files, through which builder, checked; documents as tables.

A record of .jsonl/.json/.parquet/.csv (or a row of a save_to_disk folder) is a document: its --data-field column.
A .txt/.md file is one document, read in pieces of about CHUNK characters cut at a line break: its pieces are
tokenised one by one (in parallel, in bounded memory) and joined without EOS, only its last piece is followed by one.
Chat and instruction records (--data-format, recipes/data_chat.py) are examples: their fields, one table per file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from shardlab.core.errors import UserError

TEXT_SUFFIXES = (".txt", ".md", ".text")
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", **{s: "text" for s in TEXT_SUFFIXES}}
KINDS = ".txt, .md, .jsonl, .json, .parquet or .csv"
CHUNK = 64 << 10
"""Characters of a text file per piece (tokenizers are several times faster on pieces of this size than on a
whole file). A piece ends at a line break between two non-blank characters where it can, so that a tokenizer
splits the same words as in the whole file; a SentencePiece tokenizer still adds a word-start marker at each
piece's start (one token in about 65,000 characters differs from tokenising the file whole)."""


@dataclass
class Source:
    """What --data names, found but not read: the files (their sizes and times key the cache), or a save_to_disk folder."""

    given: Optional[str]
    files: list[Path]
    saved: bool = False
    """A `Dataset.save_to_disk` folder (`files` are its arrow files)."""

    def fingerprint(self) -> list:
        return [[str(f.resolve()), (s := f.stat()).st_size, s.st_mtime_ns] for f in self.files]


@dataclass
class Documents:
    """The documents as `datasets` tables, in file order: column `text`, and `end` in pieces of text files."""

    parts: list = field(default_factory=list)
    records: int = 0
    """Documents read: records, plus one per text file."""
    dropped: int = 0
    """Documents without text (empty or whitespace only), not trained on."""
    format: str = "text"
    """text, or a format of recipes/data_chat.py FORMATS (what --data-format asked, or what auto found)."""
    found: Optional[str] = None
    """What --data-format auto found in the records' fields (None: it was given, or the data is text files)."""
    names: list[str] = field(default_factory=list)
    """Examples' parts: the file (or save_to_disk folder) each came from, for messages naming a record."""


def find_source(path: Optional[str], embedded: Path) -> Source:
    """The files --data names (cheap checks only: they exist, there are some); None: the shipped corpus."""
    if path is None:
        return Source(None, [embedded])
    root = Path(path)
    if not root.exists():
        raise UserError(f"--data {path}: no such file or folder; give a {KINDS} file, a folder of them, "
                        f"or a save_to_disk folder")
    if root.is_dir() and ((root / "state.json").is_file() or (root / "dataset_dict.json").is_file()):
        return Source(path, sorted(f for f in root.rglob("*") if f.is_file()), saved=True)
    files = sorted(f for f in (root.rglob("*") if root.is_dir() else [root])
                   if f.is_file() and f.suffix.lower() in BUILDERS and not any(p.startswith(".") for p in f.relative_to(root).parts))
    if not files:
        raise UserError(f"--data {path}: no {KINDS} files found; give such a file or a folder holding them")
    return Source(path, files)


def load_documents(source: Source, text_field: str, work: Path, fmt: str = "text") -> Documents:
    """Every document of the source as tables under `work` (arrow files), checked: the field is there and is text;
    or, for a chat or instruction format (given, or found by fmt `auto`), every example, with the fields it needs."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    docs = Documents()
    if fmt == "auto":
        fmt, docs.found = _detect(source, text_field, work)
    docs.format = fmt
    if fmt != "text":
        _add_examples(docs, source, fmt, work)
        return docs
    if source.saved:
        _add_records(docs, _load_saved(source.given), text_field, source.given)
    else:
        for builder, files in _runs(source.files):
            if builder == "text":
                _add_text_files(docs, files, work)
            else:
                _add_record_files(docs, builder, files, text_field, work)
    if docs.records == docs.dropped:
        where = "the shipped corpus" if source.given is None else source.given
        raise UserError(f"--data {where}: the files hold no text ({docs.records} documents, all empty); give files with text")
    return docs


def _runs(files: list[Path]) -> Iterator[tuple[str, list[Path]]]:
    """Consecutive files of one builder, in path order (the order documents are trained in)."""
    run: list[Path] = []
    for f in files:
        if run and BUILDERS[f.suffix.lower()] != BUILDERS[run[0].suffix.lower()]:
            yield BUILDERS[run[0].suffix.lower()], run
            run = []
        run.append(f)
    if run:
        yield BUILDERS[run[0].suffix.lower()], run


def _add_text_files(docs: Documents, files: list[Path], work: Path) -> None:
    import datasets

    features = datasets.Features({"text": datasets.Value("string"), "end": datasets.Value("bool")})
    try:
        part = datasets.Dataset.from_generator(_pieces, features=features, cache_dir=str(work / "hf"),
                                               gen_kwargs={"files": [str(f) for f in files]}, writer_batch_size=128)
    except datasets.exceptions.DatasetGenerationError as e:
        raise _cause(e) from None
    ends = sum(part.with_format("arrow")["end"].to_pylist()) if len(part) else 0  # one per file with text
    docs.records += len(files)
    docs.dropped += len(files) - ends
    if len(part):
        docs.parts.append(part)


def _pieces(files: list[str]) -> Iterator[dict]:
    """Each file's pieces (see CHUNK), then an empty row that ends it."""
    for name in files:
        try:
            with open(name, encoding="utf-8") as f:  # universal newlines, as Path.read_text
                held: list[str] = []  # leading pieces of whitespace only: dropped if the whole file is
                seen = False
                for piece in _split(f):
                    if not seen and not piece.strip():
                        held.append(piece)
                        continue
                    for h in held:
                        yield {"text": h, "end": False}
                    held, seen = [], True
                    yield {"text": piece, "end": False}
                # the document's end, EOS follows; a file without text gives one row of no tokens (and no EOS)
                yield {"text": "", "end": seen}
        except UnicodeDecodeError as e:
            raise UserError(f"--data {name}: not UTF-8 text (byte {e.start} of a piece: {e.reason}); convert it to UTF-8") from None


def _split(f) -> Iterator[str]:
    carry = ""
    while True:
        piece = carry + f.read(CHUNK)
        if not piece:
            return
        piece += f.readline()
        carry = ""
        for _ in range(4096):  # move to a line break between non-blank characters, if one comes soon
            line = f.readline()
            if not line:
                break
            if piece[-2:-1].strip() and line[:1].strip():
                carry = line
                break
            piece += line
        yield piece


def _detect(source: Source, text_field: str, work: Path) -> tuple[str, Optional[str]]:
    """--data-format auto: the format of the first records' fields, and the line that says so; text files: text."""
    from shardlab.recipes.data_chat import detect, found_line

    if source.saved:
        columns = _load_saved(source.given).column_names
    else:
        first = next((f for f in source.files if BUILDERS[f.suffix.lower()] != "text"), None)
        if first is None:
            return "text", None
        columns = _load_records(BUILDERS[first.suffix.lower()], [first], work).column_names
    fmt = detect(columns)
    return fmt, found_line(fmt, text_field)


def _load_records(builder: str, files: list[Path], work: Path):
    """The records of files of one builder, as one table; a file that does not read is named, with why."""
    import datasets

    try:
        return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", cache_dir=str(work / "hf"))
    except Exception as e:  # noqa: BLE001 - which file, and why, is found below
        if len(files) > 1:
            for f in files:  # the one that fails alone
                _load_records(builder, [f], work)
        raise _file_error(files[0], builder, e) from None


def _add_record_files(docs: Documents, builder: str, files: list[Path], text_field: str, work: Path) -> None:
    table = _load_records(builder, files, work)
    if len(files) > 1 and (text_field not in table.column_names or table.data.column(text_field).null_count):
        for f in files:  # name the file
            _add_record_files(Documents(), builder, [f], text_field, work)
    _add_records(docs, table, text_field, str(files[0]))


def _add_records(docs: Documents, table, text_field: str, where: str) -> None:
    import datasets

    if text_field not in table.column_names:
        raise UserError(f"--data {where}: its records have no '{text_field}' field (they have: "
                        f"{', '.join(table.column_names) or 'nothing'}); give --data-field with the one holding the text")
    feature = table.features[text_field]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise UserError(f"--data {where}: field '{text_field}' holds {feature}, not text; give --data-field with a text field")
    column = table.data.column(text_field)
    if column.null_count:
        import pyarrow.compute as pc

        first = pc.index(pc.is_null(column), True).as_py()
        raise UserError(f"--data {where}: record {first + 1} has no '{text_field}' field; give it one or remove the record")
    part = table.select_columns([text_field])
    if text_field != "text":
        part = part.rename_column(text_field, "text")
    docs.parts.append(part)
    docs.records += len(part)  # blank records are counted by the tokeniser (they give no tokens)


def _add_examples(docs: Documents, source: Source, fmt: str, work: Path) -> None:
    """Chat or instruction records: one table per file, holding the fields `fmt` needs, checked."""
    if source.saved:
        tables = [(_load_saved(source.given), source.given)]
    else:
        tables = []
        for f in source.files:
            builder = BUILDERS[f.suffix.lower()]
            if builder == "text":
                raise UserError(f"--data {f}: a text file among {fmt} records; --data-format {fmt} reads records "
                                f"(.jsonl, .json, .parquet, .csv); move it out of --data, or train on text alone")
            tables.append((_load_records(builder, [f], work), str(f)))
    for table, where in tables:
        docs.parts.append(_example_fields(table, fmt, where))
        docs.names.append(where)
        docs.records += len(table)


def _example_fields(table, fmt: str, where: str):
    """The fields of `fmt` (recipes/data_chat.py COLUMNS, and alpaca's optional `input`) of a table, checked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from shardlab.recipes.data_chat import COLUMNS

    need = COLUMNS[fmt]
    missing = [c for c in need if c not in table.column_names]
    if missing:
        raise UserError(f"--data {where}: its records have no {' or '.join(repr(c) for c in missing)} field "
                        f"(they have: {', '.join(table.column_names) or 'nothing'}); --data-format {fmt} needs "
                        f"{' and '.join(repr(c) for c in need)}: give --data-format with the format they hold (auto finds it)")
    keep = [*need, *(["input"] if fmt == "alpaca" and "input" in table.column_names else [])]
    for name in keep:
        kind = table.data.column(name).type
        if name == "messages":
            item = kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None
            ok = (item is not None and pa.types.is_struct(item) and {"role", "content"} <= {f.name for f in item}
                  and all(_is_text(item.field(f).type) for f in ("role", "content")))
            what = "a list of {role, content} messages with text content"
        else:
            ok, what = _is_text(kind) or (name == "input" and pa.types.is_null(kind)), "text"
        if not ok:
            raise UserError(f"--data {where}: field '{name}' holds {table.features[name]}, not {what}; "
                            f"give it {what}, or another --data-format")
        column = table.data.column(name)
        if column.null_count and name != "input":
            first = pc.index(pc.is_null(column), True).as_py()
            raise UserError(f"--data {where}: record {first + 1} has no '{name}' field; give it one or remove the record")
    return table.select_columns(keep)


def _is_text(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _load_saved(path: str):
    import datasets

    try:
        loaded = datasets.load_from_disk(path)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"--data {path}: a save_to_disk folder that does not load ({_first_line(e)}); save it again") from None
    if isinstance(loaded, datasets.DatasetDict):
        if "train" in loaded:
            return loaded["train"]
        if len(loaded) != 1:
            raise UserError(f"--data {path}: a DatasetDict with splits {', '.join(loaded)} and no 'train'; save the split to train on")
        return next(iter(loaded.values()))
    return loaded


def _file_error(file: Path, builder: str, error: BaseException) -> UserError:
    """What is wrong with one file that `datasets` could not read, in one line."""
    if builder == "json" and file.suffix.lower() == ".jsonl" or builder == "json" and not _is_json_document(file):
        with open(file, encoding="utf-8", errors="replace") as f:
            seen = False
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                seen = True
                try:
                    record = json.loads(line)
                except ValueError:
                    return UserError(f"--data {file}: line {n} is not JSON; each line must be an object with the text field")
                if not isinstance(record, dict):
                    return UserError(f"--data {file}: line {n} is not a JSON object; each line must be one")
        if not seen:
            return UserError(f"--data {file}: holds no records; give it one JSON object per line, or remove it")
        return UserError(f"--data {file}: its lines do not form one table ({_first_line(error)}); give every record the same fields and types")
    return UserError(f"--data {file}: not a readable {builder} file ({_first_line(error)}); fix or remove it")


def _is_json_document(file: Path) -> bool:
    try:
        with open(file, encoding="utf-8") as f:
            json.load(f)
        return True
    except (ValueError, UnicodeDecodeError):
        return False


def _cause(error: BaseException) -> BaseException:
    while error.__cause__ is not None or error.__context__ is not None:
        if isinstance(error, UserError):
            return error
        error = error.__cause__ or error.__context__
    return error if isinstance(error, UserError) else UserError(f"--data: could not be read ({_first_line(error)})")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]

import pytest

from shardlab.recipes.model import byte_tokenizer


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """The byte-level tokenizer of the shipped test shapes, saved as a model folder's tokenizer."""
    folder = tmp_path_factory.mktemp("tokenizer")
    byte_tokenizer().save_pretrained(folder)
    return folder

"""The tiny tokenizer of specdec.testing, built once per session."""

import pytest

from specdec.testing import tiny_tokenizer as build_tiny_tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()

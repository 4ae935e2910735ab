"""core/text.py: what counts as an empty text, UTF-8 decoding with the place of a bad byte, and
one-line messages."""
from __future__ import annotations

import pytest

from backretrieval.core import DataError
from backretrieval.core.text import decode_utf8, is_blank, is_invisible, one_line


@pytest.mark.parametrize("text", ["", "   ", "\t\n", "\u200b\u200d", "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\U000e0041", "\u3164"])
def test_blank_texts(text):
    assert is_blank(text)


@pytest.mark.parametrize("text", ["a", " x ", "\u200bé", "日本", "😀", "\u0301"])
def test_texts_that_show(text):
    assert not is_blank(text)


def test_invisible_is_per_character():
    assert is_invisible(" ") and is_invisible("\u2060") and not is_invisible("-")


def test_decode_drops_the_bom_and_names_the_bad_byte(tmp_path):
    assert decode_utf8(b"\xef\xbb\xbfhello", "f.txt") == "hello"
    with pytest.raises(DataError, match=r"f\.txt: line 2: not UTF-8 \(byte 0xff at column 3\)"):
        decode_utf8(b"ok\nab\xffc", "f.txt")


def test_one_line_escapes_what_does_not_print():
    assert one_line("plain text") == "plain text"
    assert one_line("a\nb\x1b\u200b") == "a\\nb\\x1b\\u200b"
    assert "\n" not in one_line("path/with\nnewline")

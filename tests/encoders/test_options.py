"""Model options: declared by a signature, written in a spec string or as keywords, checked once."""
from __future__ import annotations

import pytest

from backretrieval.core import EncoderError
from backretrieval.encoders import build_encoder, encoder_info, get_image_encoder, get_text_encoder, list_text_encoders
from backretrieval.encoders.options import as_text, from_text, matches, split_spec


class Toy:
    """A text model whose options are one of each type."""

    dim = 2

    def __init__(self, path: str, *, count: int = 1, scale: float = 1.0, flag: bool = False, label: str = "x",
                 limit: int | None = None, batch_size: int = 8, progress: bool = False) -> None:
        self.path, self.count, self.scale, self.flag, self.label, self.limit = path, count, scale, flag, label, limit
        self.version = "toy"


TOY = encoder_info("text", "toy", Toy, description="a toy")


def test_the_signature_is_the_declaration():
    assert TOY.kind == "text" and TOY.takes_arg
    assert [o.name for o in TOY.options] == ["count", "scale", "flag", "label", "limit", "batch_size", "progress"]
    assert TOY.options_text().startswith("count: int = 1, scale: float = 1.0, flag: bool = False, label: str = 'x', "
                                         "limit: int | None = None")
    random = next(i for i in list_text_encoders() if i.name == "random")
    assert not random.takes_arg and [o.name for o in random.options] == ["seed", "dim", "batch_size", "progress"]


def test_spec_options_are_converted_by_type_and_equal_keywords():
    written = build_encoder(TOY, "p")  # no options: the plain spec
    assert written.name == "toy:p" and written.count == 1
    enc = build_encoder(TOY, "p", count=3, scale=0.5, flag=True, limit=None, batch_size=4)
    assert enc.name == "toy:p?count=3&scale=0.5&flag=true&limit=none"  # batch_size: a run setting, not named
    a = get_text_encoder("random?seed=3&dim=8")
    b = get_text_encoder("random", seed=3, dim=8, progress=True)
    assert a.name == b.name == "random?seed=3&dim=8" and a.version == b.version
    assert get_text_encoder("random?dim=8@trunc=4").name == "random?dim=8@trunc=4"
    assert get_image_encoder("color-hist?batch_size=2").batch_size == 2


def test_text_values():
    assert from_text("true", bool) is True and from_text("No", bool) is False
    assert from_text("none", int | None) is None and from_text("7", int | None) == 7
    assert from_text("1e-3", float) == 0.001 and from_text("a b", str) == "a b"
    for text, tp in (("x", int), ("maybe", bool), ("1.5", int)):
        with pytest.raises(ValueError):
            from_text(text, tp)
    assert matches(3, float) and not matches(True, int) and not matches("3", int) and matches(None, int | None)
    assert as_text(True) == "true" and as_text(None) == "none" and as_text(256) == "256"
    assert split_spec("hf:org/name?revision=abc&batch_size=4") == ("hf:org/name", [("revision", "abc"), ("batch_size", "4")])


@pytest.mark.parametrize("spec,options,message", [
    ("random?colour=1", {}, r"text model 'random': unknown option\(s\) colour \(known: seed, dim, batch_size, progress\)"),
    ("random", {"colour": 1}, r"unknown option\(s\) colour"),
    ("random?seed=x", {}, r"option seed='x' is not of type int \(known: seed, dim"),
    ("random", {"seed": "3"}, r"option seed='3' is of type str, not int"),
    ("random?seed=1", {"seed": 2}, r"option 'seed' is given both in the spec string and as a keyword"),
    ("random?seed", {}, r"bad option 'seed' in 'random\?seed'"),
    ("random?seed=1&seed=2", {}, r"option 'seed' is given twice"),
    ("random?api_key=abc", {}, r"option 'api_key' refused; secrets are never options.*OPENAI_API_KEY.*api_key_env"),
    ("random", {"token": "abc"}, r"option 'token' refused"),
    ("triplet:DIR?base_options=x", {}, r"option base_options='x' is not of type Mapping \| None"),
    ("color-hist?batch_size=1.5", {}, r"image model 'color-hist': option batch_size='1.5' is not of type int"),
])
def test_one_check_for_every_model(spec, options, message):
    get = get_image_encoder if spec.startswith("color-hist") else get_text_encoder
    with pytest.raises(EncoderError, match=message):
        get(spec, **options)


def test_a_signature_a_model_cannot_have_is_refused_at_declaration():
    def two(a: str, b: str) -> None:
        """Two positional parameters."""

    def optional_arg(path: str = "", *, seed: int = 0) -> None:
        """A positional parameter with a default."""

    def secret(*, api_key: str = "") -> None:
        """A secret as an option."""

    with pytest.raises(EncoderError, match=r"text model 'two': its factory takes \(a, b\) by position"):
        encoder_info("text", "two", two, description="")
    with pytest.raises(EncoderError, match="at most one positional parameter, without a default"):
        encoder_info("text", "optional", optional_arg, description="")
    with pytest.raises(EncoderError, match="'api_key' cannot be an option; secrets are never options"):
        encoder_info("image", "secret", secret, description="")
    with pytest.raises(EncoderError, match="kind must be 'text' or 'image'"):
        encoder_info("audio", "toy", Toy, description="")


def test_a_factory_taking_any_keyword_passes_options_on_unchecked():
    def anything(**options):
        """Any keyword."""
        return Toy("p", **options)

    info = encoder_info("text", "anything", anything, description="")
    assert info.options is None and info.options_text() == "any"
    assert build_encoder(info, count=2).count == 2
    with pytest.raises(TypeError):
        build_encoder(info, colour=1)  # the factory's own refusal


def test_an_at_sign_inside_an_option_value_is_not_a_variant():
    """Only ``@OP=`` with a variant's name starts a variant: an ``@`` in a value stays in the base spec."""
    from backretrieval.encoders.variants import parse_variant, split_variants

    assert split_variants("openai:m?base_url=http://u@host:1/v1") == ("openai:m?base_url=http://u@host:1/v1", [])
    assert split_variants("use-m?batch_size=8@trunc=64@noise=0.5") == ("use-m?batch_size=8", ["trunc=64", "noise=0.5"])
    assert parse_variant("precomputed:a@b.parquet@noise=1") == ("precomputed:a@b.parquet", [("noise", 1.0)])


@pytest.mark.parametrize("spec, expected", [
    ("minilm-en", "minilm-en"),
    ("minilm-en?batch_size=8&threads=2", "minilm-en"),
    ("openai:m?max_retries=1&dimensions=64&timeout=5&base_url=http://h/v1", "openai:m?dimensions=64"),
    ("hf:acme/e5?prompt_name=query&cache_dir=/x", "hf:acme/e5?prompt_name=query"),
    ("random?seed", "random?seed"),  # unreadable options: the spec as it is (building the model names the fault)
])
def test_vector_spec_keeps_only_the_options_that_change_vectors(spec, expected):
    from backretrieval.encoders.options import vector_spec

    assert vector_spec(spec) == expected
